"""A handoff within one session (docs/design.md, "A handoff within one session"): a clean release hands the lock to a
waiter of the same process as its delete is sent, without waiting for ZooKeeper to commit it; everything else goes
by ZooKeeper's notification. The link holds each request back, so that the two can be told apart: at a handoff in
the process, the released node is still in ZooKeeper when the next holder holds."""

import threading
import time

import pytest

from tests.support.helpers import linked_alias, wait_until
from tests.support.interrupts import Interrupted, raise_at, traced
from zklocks import zk_lock
from zklocks.client.pools import connections
from zklocks.recipes.queue import Contender

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]

LATENCY = 0.8  # seconds each request of our session is held back on its way to the server


class Waiter(threading.Thread):
    """Acquires ``lock``, notes when, and which contenders ZooKeeper still lists at that moment."""

    def __init__(self, lock, reader) -> None:
        super().__init__(daemon=True)
        self.lock, self.reader = lock, reader
        self.held_at: float | None = None
        self.listed: list[str] = []
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        with self.lock:
            self.held_at = time.monotonic()
            self.listed = [c for c in self.reader.get_children(self.lock.path) if not c.startswith("__")]
        self.done.set()


@pytest.fixture
def linked(zk_server):
    with linked_alias(zk_server, "/same-session") as link:
        yield link


def queued_behind(holder, reader) -> Waiter:
    """A waiter of the same session, queued and watching the holder's node."""
    session = connections["default"].session()
    waiter = Waiter(zk_lock(holder.name, timeout=20), reader)
    wait_until(lambda: len(session.successors) == 1, timeout=10)
    return waiter


@pytest.mark.parametrize("lock_delay", [0, 2.0], ids=["plain", "lock-delay"])
def test_a_clean_release_hands_over_in_the_process_unless_the_lock_node_keeps_a_guard(linked, lock_delay):
    """plain: the waiter holds at once, while the server still lists the released node. lock-delay: the release
    also clears the holder's guard in the lock node, which must not be sent again after the next holder wrote its
    own (a retry after a connection loss would): that waiter holds on ZooKeeper's notification."""
    proxy, reader = linked
    holder = zk_lock("pass-it-on", lock_delay=lock_delay)
    holder.acquire()
    waiter = queued_behind(holder, reader)
    proxy.latency = LATENCY
    released_at = time.monotonic()
    holder.release()
    assert waiter.done.wait(20)
    after = waiter.held_at - released_at
    print(f"held {after:.3f}s after the release; ZooKeeper then listed {waiter.listed}")
    if lock_delay:
        assert after >= LATENCY and len(waiter.listed) == 1, (after, waiter.listed)
    else:
        assert after < LATENCY / 2 and len(waiter.listed) == 2, (after, waiter.listed)
    assert len(connections["default"].session().successors) == 0


def test_a_lost_hold_is_not_handed_over_in_the_process(linked):
    """A hold that max_hold ended while its holder runs on: its node goes at the cap, and the waiter behind it
    holds when ZooKeeper says the node is gone, not before."""
    proxy, reader = linked
    holder = zk_lock("capped", max_hold=1.0)
    holder.acquire()
    waiter = queued_behind(holder, reader)
    proxy.latency = LATENCY
    assert waiter.done.wait(20)
    assert len(waiter.listed) == 1, waiter.listed  # the capped node was gone when the waiter held
    holder.release()


def test_a_signal_handlers_exception_in_the_handover_leaves_the_waiter_to_zookeepers_notification(linked):
    """An exception raised by a signal handler in the release's handover, at the waiter's wake-up: the release
    raises it, the node goes all the same, and the waiter holds on ZooKeeper's notification instead of sleeping."""
    proxy, reader = linked
    holder = zk_lock("interrupted-handover")
    holder.acquire()
    waiter = queued_behind(holder, reader)
    on_handed = next(c for c in Contender.wait_steps.__code__.co_consts if getattr(c, "co_name", "") == "on_handed")
    tracer, seen = raise_at(Contender._woken.__code__, caller=on_handed)
    with traced(tracer), pytest.raises(Interrupted):
        holder.release()
    assert seen, "the handover never reached the waiter's wake-up"
    assert waiter.done.wait(10), "the waiter was left asleep"
    assert not holder.is_held

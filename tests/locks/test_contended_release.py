"""A release without ``wait`` of a hold that queued behind another waits briefly for the server's answer
(handles/base.py, CONTENDED_RELEASE_SETTLE): on return the lock is free for every client, not only for the next
request of our session. An uncontended release, a release on an event loop and a release to a silent server return
at once, or within the bound. The link holds each request of our session back, so that the two can be told apart."""

import asyncio
import threading
import time

import pytest

from tests.support.helpers import linked_alias, wait_until
from tests.support.interrupts import Interrupted, raise_at, traced
from zklocks import zk_lock
from zklocks.handles.base import CONTENDED_RELEASE_SETTLE

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]


@pytest.fixture
def linked(zk_server):
    with linked_alias(zk_server, "/contended-release") as link:
        yield link


def listed(reader, lock) -> list[str]:
    return [c for c in reader.get_children(lock.path) if not c.startswith("__")]


class Holder(threading.Thread):
    """Holds lock ``name`` in a thread of its own until ``free`` is set, then releases and waits for the answer."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True)
        self.lock = zk_lock(name)
        self.holding, self.free = threading.Event(), threading.Event()
        self.start()
        assert self.holding.wait(10)

    def run(self) -> None:
        self.lock.acquire()
        self.holding.set()
        self.free.wait(30)
        self.lock.release(wait=True)


def held_after_a_wait(lock, reader) -> None:
    """``lock`` held by this thread, after queueing behind a holder in another thread."""
    holder = Holder(lock.name)
    threading.Timer(0.5, holder.free.set).start()
    lock.acquire(timeout=20)
    holder.join(10)
    assert lock._hold().contender.waited
    wait_until(lambda: len(listed(reader, lock)) == 1, timeout=10)


def contended_hold(linked, name: str, latency: float):
    """Lock ``name``, held by this thread after a wait; then the link holds each request back by ``latency``."""
    proxy, reader = linked
    lock = zk_lock(name)
    held_after_a_wait(lock, reader)
    proxy.latency = latency
    return lock


def timed_release(lock) -> float:
    started = time.monotonic()
    lock.release()
    return time.monotonic() - started


def test_a_contended_release_returns_once_the_server_has_applied_it(linked):
    reader, latency = linked[1], CONTENDED_RELEASE_SETTLE / 4
    lock = contended_hold(linked, "contended", latency)
    took = timed_release(lock)
    left = listed(reader, lock)
    print(f"released in {took:.3f}s; ZooKeeper then listed {left}")
    assert latency <= took < CONTENDED_RELEASE_SETTLE + 0.05, took
    assert left == [], left


def test_an_uncontended_release_does_not_wait(linked):
    proxy, reader = linked
    lock = zk_lock("uncontended")
    lock.acquire()
    assert not lock._hold().contender.waited
    proxy.latency = 0.5
    took = timed_release(lock)
    left = listed(reader, lock)
    assert took < 0.05 and len(left) == 1, (took, left)
    wait_until(lambda: listed(reader, lock) == [], timeout=10)


def test_a_contended_release_to_a_silent_server_waits_no_longer_than_its_bound(linked):
    reader = linked[1]
    lock = contended_hold(linked, "silent", 1.0)
    took = timed_release(lock)
    print(f"released in {took:.3f}s")
    assert CONTENDED_RELEASE_SETTLE * 0.9 <= took < CONTENDED_RELEASE_SETTLE + 0.2, took
    wait_until(lambda: listed(reader, lock) == [], timeout=10)  # the delete went on and was applied


def test_a_contended_release_on_an_event_loop_does_not_block_it(linked):
    proxy, reader = linked
    lock = zk_lock("on-the-loop")
    holder = Holder(lock.name)

    async def contend() -> tuple[bool, float]:
        threading.Timer(0.5, holder.free.set).start()
        async with lock:
            waited = lock._hold().contender.waited
            await asyncio.to_thread(holder.join, 10)
            await asyncio.to_thread(wait_until, lambda: len(listed(reader, lock)) == 1, 10)
            proxy.latency = 0.5
            started = time.monotonic()
        return waited, time.monotonic() - started

    waited, took = asyncio.run(contend())
    assert waited and took < 0.05, (waited, took)
    wait_until(lambda: listed(reader, lock) == [], timeout=10)


def test_a_signal_handlers_exception_in_the_wait_finds_the_release_done_and_reported(linked):
    """The exception reaches the caller; the delete was sent and the release reported (lock_released) before the
    wait, so the lock is free all the same."""
    from zklocks import signals
    from zklocks.client.interrupts import new_event
    from zklocks.handles.base import settle_releases

    reported = []

    def on_released(sender, name, **kwargs):
        reported.append(name)

    lock = contended_hold(linked, "interrupted", 0.5)
    signals.lock_released.connect(on_released)
    try:
        tracer, seen = raise_at(type(new_event()).wait.__code__, caller=settle_releases.__code__)
        with traced(tracer), pytest.raises(Interrupted):
            lock.release()
        assert seen, "the release never waited for its answer"
        assert not lock.is_held
        wait_until(lambda: listed(linked[1], lock) == [], timeout=10)
        wait_until(lambda: reported == ["interrupted"], timeout=10)
    finally:
        signals.lock_released.disconnect(on_released)
    linked[0].latency = 0
    other = zk_lock(lock.name)
    assert other.acquire(timeout=5)
    other.release()


def test_a_release_that_hands_over_within_the_session_does_not_wait(linked):
    """The contender right behind is ours and holds at the send: nobody else watches the node."""
    from tests.locks.test_same_session_handoff import queued_behind

    proxy, reader = linked
    lock = zk_lock("passed-on")
    held_after_a_wait(lock, reader)
    waiter = queued_behind(lock, reader)
    proxy.latency = 0.5
    took = timed_release(lock)
    assert waiter.done.wait(10)
    assert took < 0.05, took


def test_a_multi_lock_waits_once_for_all_its_members(linked):
    """Every member's delete goes out first; then one wait covers all their answers, not one wait per member."""
    from zklocks import zk_multi_lock

    proxy, reader = linked
    names = ["multi-a", "multi-b", "multi-c"]
    holders = [Holder(name) for name in names]
    multi = zk_multi_lock(names)
    for i, holder in enumerate(holders, 1):  # one after the other: each member is taken after a wait
        threading.Timer(0.5 * i, holder.free.set).start()
    multi.acquire(timeout=20)
    for holder in holders:
        holder.join(10)
    assert all(lock._hold().contender.waited for lock in multi.locks)
    latency = CONTENDED_RELEASE_SETTLE / 4
    proxy.latency = latency
    started = time.monotonic()
    multi.release()
    took = time.monotonic() - started
    left = [listed(reader, lock) for lock in multi.locks]
    print(f"released {len(names)} members in {took:.3f}s; ZooKeeper then listed {left}")
    assert latency <= took < 2 * latency, took  # one wait per member would take 3 × latency
    assert left == [[], [], []], left


def test_releases_for_an_asyncio_task_or_giving_back_do_not_wait(linked):
    """A thread releasing for an asyncio task or on commit serves others (the release pool); a failed acquire's
    give-back owes its caller an error now: neither waits. The same hold, released by its own thread, would."""
    from zklocks import owners
    from zklocks.handles.base import _settles, no_settling

    lock = zk_lock("for-another")
    held_after_a_wait(lock, linked[1])
    hold = lock._hold()
    assert _settles(hold)
    with owners.acting_as(object()):
        assert not _settles(hold)
    with no_settling():
        assert not _settles(hold)
    assert _settles(hold)
    lock.release()


def test_a_handoff_tells_whether_the_released_node_had_any_other_watcher():
    """Only an exclusive waiter right behind a node is its only watcher: shared contenders of any session may
    watch one exclusive node together, and the release must then still wait for its answer."""
    from zklocks.client.successors import Successors

    woken = []
    successors = Successors()
    successors.watch("/l/a", lambda: woken.append("reader"), sole=False)
    assert successors.released("/l/a") is False
    successors.watch("/l/b", lambda: woken.append("writer"), sole=True)
    assert successors.released("/l/b") is True
    assert successors.released("/l/b") is False  # each wake-up once
    assert woken == ["reader", "writer"] and len(successors) == 0


def test_a_connection_dropped_during_the_wait_ends_it_and_the_delete_goes_through_later(linked):
    """A process already holding, whose link is cut while its release waits: the failure ends the wait (within
    the bound), and the delete is retried once the session is back, so the next contender holds."""
    proxy, reader = linked
    lock = contended_hold(linked, "cut", 0.5)
    cut = threading.Timer(0.02, proxy.reset)
    cut.start()
    took = timed_release(lock)
    cut.join()
    proxy.latency = 0
    print(f"released in {took:.3f}s")
    assert took < CONTENDED_RELEASE_SETTLE + 0.2, took
    assert not lock.is_held
    wait_until(lambda: listed(reader, lock) == [], timeout=15)
    other = zk_lock(lock.name)
    assert other.acquire(timeout=10)
    other.release()

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


def test_a_signal_handlers_exception_in_the_wait_leaves_the_release_done(linked):
    """The exception reaches the caller; the delete was sent before the wait, so the lock is free all the same."""
    from zklocks.client.interrupts import new_event
    from zklocks.recipes.node import OwnNode

    proxy, reader = linked
    lock = contended_hold(linked, "interrupted", 0.5)
    tracer, seen = raise_at(type(new_event()).wait.__code__, caller=OwnNode.delete_nowait.__code__)
    with traced(tracer), pytest.raises(Interrupted):
        lock.release()
    assert seen, "the release never waited for its answer"
    assert not lock.is_held
    wait_until(lambda: listed(reader, lock) == [], timeout=10)
    proxy.latency = 0
    other = zk_lock(lock.name)
    assert other.acquire(timeout=5)
    other.release()

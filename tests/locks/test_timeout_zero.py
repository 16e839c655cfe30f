"""timeout=0 is one attempt (as with threading.Lock and kazoo): a free lock is taken, a held one fails at once."""

import asyncio
import time

import pytest

from tests.support.helpers import wait_until
from tests.support.threads import HeldInThread, in_thread
from zklocks import LockNotAcquired, LockTimeout, zk_lock, zk_multi_lock, zk_semaphore
from zklocks.client.pools import connections

pytestmark = pytest.mark.zk


def contenders(handle):
    client = connections["default"].session().client
    path = handle.path
    return [c for c in client.get_children(path) if "__lock__" in c or "__rlock__" in c] if client.exists(path) else []


def test_timeout_zero_takes_a_free_lock():
    lock = zk_lock("t0-free", timeout=0)
    assert lock.acquire() is True
    assert lock.is_held and lock.token
    lock.release()
    with zk_lock("t0-free", timeout=0) as held:
        assert held.is_held
    assert zk_lock("t0-free").acquire(timeout=0) is True
    zk_lock("t0-free").release()
    with zk_lock("t0-shared", shared=True, timeout=0) as reader:
        assert reader.is_held
    with zk_semaphore("t0-sem", 2, timeout=0) as sem:
        assert sem.is_held
    with zk_multi_lock(["t0-m1", ("t0-m2", "shared")], timeout=0) as multi:
        assert multi.is_held and all(multi.tokens.values())

    @zk_lock("t0-job:{n}", timeout=0)
    def job(n):
        return n + 1

    assert job(1) == 2

    async def main():
        handle = zk_lock("t0-async", timeout=0)
        assert await handle.acquire_async() is True
        await handle.release_async()
        async with zk_lock("t0-async", timeout=0) as again:
            return again.is_held

    assert asyncio.run(main()) is True


def test_timeout_zero_fails_at_once_on_a_held_lock_and_leaves_no_node():
    holder = HeldInThread(zk_lock("t0-held"))
    try:
        started = time.monotonic()
        assert zk_lock("t0-held", timeout=0).acquire() is False
        with pytest.raises(LockTimeout) as err:
            with zk_lock("t0-held", timeout=0):
                pass
        assert "t0-held" in str(err.value) and "default" in str(err.value)
        assert zk_lock("t0-held", shared=True).acquire(timeout=0) is False
        with pytest.raises(LockNotAcquired):
            with zk_multi_lock(["t0-free-member", "t0-held"], timeout=0):
                pass
        assert time.monotonic() - started < 2.0
        # The free member taken first was given back; no waiting node was left behind.
        assert in_thread(lambda: zk_lock("t0-free-member", blocking=False).acquire()) is True
        wait_until(lambda: len(contenders(zk_lock("t0-held"))) == 1, timeout=3)
    finally:
        holder.release()


def test_semaphore_timeout_zero_fails_at_once_when_the_leases_are_taken():
    lease = HeldInThread(zk_semaphore("t0-sem-full", 1))
    try:
        started = time.monotonic()
        assert zk_semaphore("t0-sem-full", 1, timeout=0).acquire() is False
        assert time.monotonic() - started < 2.0
    finally:
        lease.release()
    assert in_thread(lambda: zk_semaphore("t0-sem-full", 1, timeout=0).acquire()) is True


def test_a_tiny_timeout_raises_only_documented_errors():
    # A deadline that passes during the first requests gives False (LockTimeout), never a private exception.
    for handle in (zk_semaphore("tiny-sem", 1, timeout=1e-6), zk_lock("tiny-lock", timeout=1e-6)):
        try:
            assert handle.acquire() in (True, False)
        finally:
            handle.release()

"""A plain `with zk_lock(...)` (or acquire()) inside a coroutine would block the event loop, and wait forever for
a holder that is a coroutine on that very loop: it raises SyncLockInEventLoop, pointing to `async with`."""

import asyncio

import pytest
from django.core.exceptions import SynchronousOnlyOperation

from zklocks import SyncLockInEventLoop, zk_lock, zk_multi_lock, zk_semaphore

HINT = "in a coroutine, use `async with` or `await lock.acquire_async()`"


def run(coro):
    return asyncio.run(coro)


def test_with_in_a_coroutine_raises_before_touching_zookeeper():
    async def view():
        with zk_lock("report", timeout=5):
            return "ran"

    with pytest.raises(SyncLockInEventLoop) as info:
        run(view())
    assert str(info.value) == (
        "lock 'report' (alias 'default'): a blocking acquire on the thread of a running event loop would stop "
        f"the loop until the lock is granted; {HINT}"
    )
    assert isinstance(info.value, SynchronousOnlyOperation)  # caught where Django's own is


def test_acquire_semaphore_and_multi_lock_too():
    async def view():
        out = []
        for call in (
            lambda: zk_lock("a").acquire(),
            lambda: zk_semaphore("pool", 2).acquire(blocking=False),
            lambda: zk_multi_lock(["a", "b"]).__enter__(),
        ):
            try:
                call()
            except SyncLockInEventLoop as exc:
                out.append(str(exc).split(":", 1)[0])
        return out

    assert run(view()) == [
        "lock 'a' (alias 'default')",
        "lock 'pool' (alias 'default')",
        "multi-lock ['a', 'b'] (alias 'default')",
    ]


def test_a_sync_decorated_function_called_from_a_coroutine():
    @zk_lock("stock:{sku}")
    def reserve(sku):
        return sku

    async def view():
        return reserve("tea")

    with pytest.raises(SyncLockInEventLoop, match="lock 'stock:tea'"):
        run(view())


@pytest.mark.zk
def test_async_with_and_sync_in_a_thread_still_work():
    async def view():
        async with zk_lock("report") as lock:
            held = lock.is_held
        in_thread = zk_lock("report")

        def acquire_and_release() -> bool:
            # One thread does both: two to_thread calls may land on two executor threads, and a release by a
            # thread that does not hold is refused (LockOwnershipError), by design.
            got = in_thread.acquire(timeout=2)
            in_thread.release()
            return got

        got = await asyncio.to_thread(acquire_and_release)
        return held, got

    assert run(view()) == (True, True)

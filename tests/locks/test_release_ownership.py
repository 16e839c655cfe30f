"""Who may release: the owner that acquired, and work started in the holding task's context. Any other thread
or task gets LockOwnershipError while the lock is held through the handle: never a silent no-op that leaves the
lock held (docs/reference.md, "Release ownership")."""

import asyncio
import re

import pytest

from tests.support.helpers import wait_until
from tests.support.threads import HeldInThread, in_thread
from zklocks import LockOwnershipError, zk_lock, zk_semaphore

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]


def free_elsewhere(name: str) -> bool:
    """Whether another owner (a thread of its own) can take the lock at once."""

    def attempt():
        lock = zk_lock(name, blocking=False)
        if lock.acquire():
            lock.release(wait=True)
            return True
        return False

    return in_thread(attempt)


def held_by_a_task(name, release):
    async def main():
        lock = zk_lock(name, timeout=5)
        await lock.__aenter__()
        assert not free_elsewhere(name)
        await release(lock)
        return lock

    return asyncio.run(main())


def test_wait_for_of_aexit_releases():
    # On Python 3.11 wait_for runs the coroutine in a new task: it releases for the task that acquired.
    held_by_a_task("own-wait-for", lambda lock: asyncio.wait_for(lock.__aexit__(None, None, None), 10))
    assert wait_until(lambda: free_elsewhere("own-wait-for"), timeout=5)


def test_shield_of_aexit_releases():
    async def release(lock):
        await asyncio.shield(lock.__aexit__(None, None, None))

    held_by_a_task("own-shield", release)
    assert wait_until(lambda: free_elsewhere("own-shield"), timeout=5)


def test_to_thread_release_releases():
    held_by_a_task("own-to-thread", lambda lock: asyncio.to_thread(lock.release, True))
    assert free_elsewhere("own-to-thread")


def test_run_in_executor_release_says_it_cannot():
    # run_in_executor does not carry the task's context: the release cannot know it acts for the holder.
    async def release(lock):
        with pytest.raises(LockOwnershipError, match="own-executor"):
            await asyncio.get_running_loop().run_in_executor(None, lock.release)
        assert lock.is_held and not free_elsewhere("own-executor")
        await lock.__aexit__(None, None, None)  # the owner's own release still works

    held_by_a_task("own-executor", release)
    assert wait_until(lambda: free_elsewhere("own-executor"), timeout=5)


def test_a_waiter_queued_behind_gets_the_lock_after_a_wait_for_release():
    async def main():
        lock = zk_lock("own-queue", timeout=10)
        await lock.__aenter__()
        waiters = [asyncio.create_task(_take_and_leave("own-queue")) for _ in range(20)]
        await asyncio.sleep(0.3)
        await asyncio.wait_for(lock.__aexit__(None, None, None), 10)
        return await asyncio.wait_for(asyncio.gather(*waiters), 20)

    assert asyncio.run(main()) == [True] * 20


async def _take_and_leave(name):
    async with zk_lock(name, timeout=15):
        await asyncio.sleep(0.01)
    return True


def test_an_unrelated_thread_cannot_release_a_held_lock():
    owner = HeldInThread(zk_lock("own-thread"))
    handle = owner.handle
    with pytest.raises(LockOwnershipError):
        in_thread(handle.release)
    assert not free_elsewhere("own-thread")
    owner.release()
    assert wait_until(lambda: free_elsewhere("own-thread"), timeout=5)


def test_a_release_of_a_handle_nobody_holds_is_a_no_op():
    handle = zk_lock("own-nobody")
    handle.release()
    in_thread(handle.release)


# -- found by the stateful model (tests/model): tasks that copy the holder's context --


def test_a_child_task_whose_try_lock_failed_cannot_release_the_parents_hold():
    async def main():
        lock = zk_lock("own-child", timeout=5)
        async with lock:

            async def child():
                got = None
                try:
                    got = await lock.acquire_async(blocking=False)
                finally:
                    with pytest.raises(LockOwnershipError, match="own-child"):
                        lock.release()
                return got

            assert await asyncio.create_task(child()) is False
            lock.ensure_held()
            assert lock.is_held and not await asyncio.to_thread(free_elsewhere, "own-child")
        assert await asyncio.to_thread(wait_until, lambda: free_elsewhere("own-child"), 5)

    asyncio.run(main())


def sem_free_elsewhere(name: str) -> bool:
    def attempt():
        semaphore = zk_semaphore(name, 1, blocking=False)
        if semaphore.acquire():
            semaphore.release(wait=True)
            return True
        return False

    return in_thread(attempt)


# How a child task's ``finally`` gives back what it thinks it took, each routed through a thread: release_async
# with wait=True runs the release in a thread acting as the child; to_thread copies the child's context, which is a
# copy of the holder's.
CHILD_RELEASES = {
    "release_async(wait=True)": lambda handle: handle.release_async(wait=True),
    "to_thread(release)": lambda handle: asyncio.to_thread(handle.release, True),
}


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
@pytest.mark.parametrize("form", sorted(CHILD_RELEASES))
def test_a_child_task_whose_try_lock_failed_cannot_release_the_parents_hold_through_a_thread(kind, form):
    name = f"own-child-{kind}-{form[:8]}"
    make, free = (lambda: zk_lock(name, timeout=5), free_elsewhere)
    if kind == "semaphore":
        make, free = (lambda: zk_semaphore(name, 1, timeout=5), sem_free_elsewhere)

    async def main():
        handle = make()
        async with handle:

            async def child():
                try:
                    return await handle.acquire_async(blocking=False)
                finally:
                    with pytest.raises(LockOwnershipError):
                        await CHILD_RELEASES[form](handle)

            assert await asyncio.create_task(child()) is False
            handle.ensure_held()
            assert handle.is_held and not await asyncio.to_thread(free, name)
        assert await asyncio.to_thread(wait_until, lambda: free(name), 5)

    asyncio.run(main())


def test_a_helper_thread_whose_try_lock_failed_cannot_release_its_holders_hold():
    """The holder's own sync_to_async helper (Django's async pattern) tries the lock and releases in ``finally``:
    the thread took nothing, so its release is refused, although the thread may release for the holder otherwise."""
    from asgiref.sync import sync_to_async

    def helper(lock) -> bool:
        got = False
        try:
            got = lock.acquire(blocking=False)
        finally:
            with pytest.raises(LockOwnershipError, match="own-helper"):
                lock.release()
        return got

    async def main():
        lock = zk_lock("own-helper", timeout=5)
        async with lock:
            assert await sync_to_async(helper, thread_sensitive=False)(lock) is False
            lock.ensure_held()
            assert not await asyncio.to_thread(free_elsewhere, "own-helper")

    asyncio.run(main())
    assert free_elsewhere("own-helper")


async def _release_here(handle) -> None:
    handle.release()


# How a task created between two holds releases during the second: release() in the task itself, or
# release_async(wait=True), which runs the release in a thread acting as that task.
LATE_RELEASES = {
    "release()": _release_here,
    "release_async(wait=True)": lambda handle: handle.release_async(wait=True),
}


@pytest.mark.parametrize("form", sorted(LATE_RELEASES))
def test_a_task_created_after_the_hold_ended_cannot_release_the_next_hold(form):
    name = f"own-late-{form[:9]}"

    async def main():
        lock = zk_lock(name, timeout=5)
        await lock.__aenter__()
        await lock.__aexit__(None, None, None)
        go = asyncio.Event()

        async def late():
            await go.wait()
            with pytest.raises(LockOwnershipError, match=re.escape(name)):
                await LATE_RELEASES[form](lock)

        task = asyncio.create_task(late())  # created between the two holds: its context is a copy of the parent's
        await lock.__aenter__()
        go.set()
        await task
        lock.ensure_held()
        assert not await asyncio.to_thread(free_elsewhere, name)
        await lock.__aexit__(None, None, None)

    asyncio.run(main())


def test_a_coroutine_the_holder_created_releases_for_it_in_another_task():
    async def main():
        lock = zk_lock("own-made", timeout=5)
        await lock.__aenter__()
        await asyncio.create_task(lock.release_async(wait=True))  # created by the holder, run by a new task
        assert not lock.is_held

    asyncio.run(main())
    assert free_elsewhere("own-made")


def test_a_child_tasks_failed_multi_lock_cannot_release_the_parents_member_through_a_thread():
    from zklocks import zk_multi_lock

    async def main():
        lock = zk_lock("own-multi-member", timeout=5)
        async with lock:

            async def child():
                multi = zk_multi_lock([lock, "own-multi-other"], timeout=0)
                try:
                    return await multi.acquire_async()
                finally:
                    with pytest.raises(LockOwnershipError):
                        await asyncio.to_thread(multi.release)

            assert await asyncio.create_task(child()) is False
            lock.ensure_held()
            assert not await asyncio.to_thread(free_elsewhere, "own-multi-member")

    asyncio.run(main())

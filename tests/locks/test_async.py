"""async with / async decorators: off the event loop, real concurrent coroutines, cancellation, async views."""

import asyncio
import time
from itertools import pairwise

import pytest
from django.test import AsyncClient, override_settings

from tests.support.helpers import wait_until
from tests.support.threads import free_for_others
from zklocks import LockTimeout, zk_lock, zk_multi_lock, zk_semaphore
from zklocks.client.pools import connections

pytestmark = pytest.mark.zk


def queue_len(name):
    client = connections["default"].session().client
    path = zk_lock(name).path
    return len(client.get_children(path)) if client.exists(path) else 0


def test_async_with_excludes_concurrent_coroutines_without_blocking_the_loop():
    intervals = []
    first_held: list[int] = []
    go = None

    async def worker(i):
        async with zk_lock("async-ex", timeout=10) as lock:
            start = time.monotonic()
            if not first_held:
                first_held.append(i)
                await go.wait()  # the first holder lets go only once the loop ran the coroutine below
            await asyncio.sleep(0.05)
            intervals.append((start, time.monotonic(), lock.token))

    async def release_first_once_others_wait():
        # Runs on the same loop while the other workers wait for the lock: were their waits blocking the loop,
        # it would never run, the first holder would never let go, and they would all time out.
        while await asyncio.to_thread(queue_len, "async-ex") < 6:  # the first holder and five waiters
            await asyncio.sleep(0.02)
        go.set()

    async def main():
        nonlocal go
        go = asyncio.Event()
        await asyncio.gather(*(worker(i) for i in range(6)), release_first_once_others_wait())

    asyncio.run(main())
    assert len(intervals) == 6
    intervals.sort()
    for a, b in pairwise(intervals):
        assert a[1] <= b[0] and a[2] < b[2]


def test_async_decorator_holds_until_the_coroutine_finished():
    order = []

    @zk_lock("job:{n}", timeout=10)
    async def job(n):
        order.append(("start", n))
        await asyncio.sleep(0.1)
        order.append(("end", n))
        return n * 2

    async def main():
        return await asyncio.gather(job(1), job(1), job(2))

    assert asyncio.run(main()) == [2, 2, 4]
    ones = [e for e in order if e[1] == 1]
    assert ones == [("start", 1), ("end", 1), ("start", 1), ("end", 1)]
    assert job.__name__ == "job" and asyncio.iscoroutinefunction(job)


def test_cancelling_a_waiting_coroutine_removes_its_queue_node():
    holder = zk_lock("async-cancel")

    async def main():
        await holder.acquire_async()
        waiter = asyncio.create_task(zk_lock("async-cancel").__aenter__())
        await asyncio.to_thread(wait_until, lambda: queue_len("async-cancel") == 2, 5)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await asyncio.to_thread(wait_until, lambda: queue_len("async-cancel") == 1, 5)
        await holder.release_async()

    asyncio.run(main())
    assert queue_len("async-cancel") == 0


def test_async_timeout_and_semaphore_and_multi():
    async def main():
        async with zk_semaphore("async-sem", 2) as a, zk_multi_lock(["x1", "x2"]) as m:
            assert a.is_held and set(m.tokens) == {"x1", "x2"}
            async with zk_semaphore("async-sem", 2) as b:
                assert b.token != a.token
            holder = zk_lock("async-held")
            await holder.acquire_async()
            started = time.monotonic()

            async def contender():  # another task: another owner (the same task would re-enter)
                async with zk_lock("async-held", timeout=0.3):
                    pass

            with pytest.raises(LockTimeout):
                await asyncio.create_task(contender())
            # The timeout is kept: not given up early, nor waited out long after (a loose bound on 2 loaded cores,
            # against a wait that ignores it).
            assert 0.29 <= time.monotonic() - started < 3.0
            async with zk_lock("async-held", timeout=0.3) as nested:  # same task: reentrant, so it waits for nothing
                assert nested.token == holder.token and nested.is_held
            assert holder.is_held  # the nested release left the outer hold
            await holder.release_async()

    asyncio.run(main())


def test_async_tasks_sharing_one_handle_each_release_their_own_node():
    sem = zk_semaphore("async-shared", 3)
    read = zk_lock("async-read", shared=True)

    async def use():
        async with sem, read:
            await asyncio.sleep(0.05)

    async def main():
        await asyncio.gather(*(use() for _ in range(3)))

    asyncio.run(main())
    client = connections["default"].session().client
    wait_until(lambda: [c for c in client.get_children(sem.path) if "__lease__" in c] == [], timeout=3)
    wait_until(lambda: client.get_children(read.path) == [], timeout=3)


@pytest.mark.django_db
def test_async_django_view_guarded_by_zk_lock():
    with override_settings(ROOT_URLCONF="tests.support.app.urls"):

        async def main():
            client = AsyncClient()
            responses = await asyncio.gather(*(client.get("/counter/") for _ in range(5)))
            return [r.json()["value"] for r in responses]

        values = asyncio.run(main())
    assert sorted(values) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("form", ["zk_multi_lock", "release_on_commit"])
def test_a_task_cancelled_while_its_release_waits_for_a_thread_still_releases(form):
    """The release of ``async with`` runs in a thread of the release pool; the task is cancelled (a TaskGroup's
    sibling failed, a timeout) while the release waits for a free thread: the release runs all the same once one
    is free, and the lock is not left held by a task that is gone."""
    import threading

    from zklocks.handles import async_bridge

    names = [f"async-cancel-release-{form}-a", f"async-cancel-release-{form}-b"]
    free_threads = threading.Event()
    busy = [async_bridge._releaser().submit(free_threads.wait, 30) for _ in range(64)]  # every release thread

    async def holder(entered: asyncio.Event):
        handle = zk_multi_lock(names) if form == "zk_multi_lock" else zk_lock(names[0], release_on_commit=True)
        async with handle:
            entered.set()
        raise AssertionError("the release waited for a thread: the task should be cancelled before this")

    async def main():
        entered = asyncio.Event()
        task = asyncio.create_task(holder(entered))
        await entered.wait()
        await asyncio.sleep(0.2)  # the task now awaits its release, queued behind the busy threads
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
    finally:
        free_threads.set()
    for job in busy:
        job.result(10)
    wanted = names if form == "zk_multi_lock" else names[:1]
    wait_until(lambda: free_for_others(lambda: zk_multi_lock(wanted)), timeout=10)


def test_an_acquire_granted_after_its_loop_closed_is_given_back():
    """``asyncio.run`` ends while a multi-lock's acquire thread is still at work: it cancels the task and closes
    the loop, and the thread's success comes afterwards (as when the grant of a create under way arrives late).
    The grant is given back all the same, and the locks are free; a closed loop never tells its futures anything."""
    import threading

    from zklocks.handles.multilock import ZkMultiLock

    names = ["async-closed-loop-a", "async-closed-loop-b"]
    at_work = threading.Event()
    go_on = threading.Event()

    class HeldUp(ZkMultiLock):
        """Its acquire thread, granted, returns only once the test lets it (once the loop is closed)."""

        def _acquire(self, *args):
            result = super()._acquire(*args)
            at_work.set()
            go_on.wait(30)
            return result

    async def main():
        asyncio.get_running_loop().create_task(HeldUp(names).acquire_async())
        await asyncio.to_thread(at_work.wait, 30)
        # main returns: asyncio.run cancels the task above and closes the loop

    asyncio.run(main())
    go_on.set()
    wait_until(lambda: free_for_others(lambda: zk_multi_lock(names)), timeout=10)


def test_a_cancelled_wait_in_a_thread_logs_nothing_as_never_retrieved(caplog):
    """A multi-lock's acquire waits in a thread behind a holder, and its task is cancelled: the thread then ends in
    LockTimeout, which nobody awaits any more. It is read all the same: asyncio logs no "Future exception was never
    retrieved" for it."""
    import gc
    import logging

    names = ["async-unread-a", "async-unread-b"]
    caplog.set_level(logging.ERROR, logger="asyncio")
    holder = zk_multi_lock(names)
    assert holder.acquire()
    try:

        async def main():
            task = asyncio.create_task(zk_multi_lock(names, timeout=30).acquire_async())
            await asyncio.to_thread(wait_until, lambda: queue_len(names[0]) == 2, 10)  # queued behind the holder
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.to_thread(wait_until, lambda: queue_len(names[0]) == 1, 10)  # the thread gave up
            await asyncio.sleep(0.2)  # its LockTimeout reaches the loop's future

        asyncio.run(main())
        gc.collect()
    finally:
        holder.release()
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []


def test_a_contender_cancelled_while_its_listing_waits_for_the_one_in_flight_leaves_nothing_unread(zk_server, caplog):
    """Coroutines of one session share listings, one in flight at a time: a contender that arrives while one is
    answered joins the next. Cancelled there, and the session then closed, it leaves no future behind with an
    error nobody reads: asyncio logs no "Future exception was never retrieved"."""
    import gc
    import logging

    from tests.support.helpers import linked_alias
    from zklocks.recipes import step_runner

    caplog.set_level(logging.ERROR, logger="asyncio")
    with linked_alias(zk_server, "/async-unread-listing") as (proxy, _reader):
        session = connections["default"].session()
        holder = zk_lock("held")
        assert holder.acquire()
        proxy.latency = 0.3  # each listing is answered 0.3 s after it is sent

        async def main():
            first = asyncio.create_task(zk_lock("held", timeout=30).acquire_async())
            await asyncio.sleep(0.1)
            second = asyncio.create_task(zk_lock("held", timeout=30).acquire_async())
            loop = asyncio.get_running_loop()

            def second_waits_for_the_next_listing() -> bool:
                listings = step_runner._open_batches.get(loop)
                return listings is not None and any(key[0] is session for key in listings.open)

            deadline = time.monotonic() + 10
            while not second_waits_for_the_next_listing():
                assert time.monotonic() < deadline, "the second contender never joined the next listing"
                await asyncio.sleep(0.005)
            second.cancel()
            await asyncio.gather(second, return_exceptions=True)
            await asyncio.sleep(0)  # the cancelled contender is gone from every future it awaited
            await asyncio.to_thread(session.close)  # the listing in flight fails; the next batch meets a dead session
            await asyncio.gather(first, return_exceptions=True)
            await asyncio.sleep(0.1)

        asyncio.run(main())
        gc.collect()
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []


def test_a_release_whose_task_is_cancelled_meanwhile_leaves_its_error_read(caplog):
    """A release runs in a thread of its own pool, shielded: the task may be cancelled while it runs. An error the
    release then ends in (here a plain function's, in the release's place) is read all the same: asyncio logs no
    "Future exception was never retrieved"."""
    import gc
    import logging

    from zklocks.handles.async_bridge import run_off_loop

    caplog.set_level(logging.ERROR, logger="asyncio")
    finished = []

    def slow_failing_release():
        time.sleep(0.2)
        finished.append(True)
        raise RuntimeError("the release failed")

    async def main():
        task = asyncio.create_task(run_off_loop(slow_failing_release))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.to_thread(wait_until, lambda: finished, 5)
        await asyncio.sleep(0.05)  # the thread's outcome reaches the loop's future

    asyncio.run(main())
    gc.collect()
    assert finished  # the release ran to its end although the task was cancelled
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []

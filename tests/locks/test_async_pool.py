"""Many waiting coroutines: a release never queues behind them, and a waiter's timeout counts from its call."""

import asyncio
import time

import pytest

from tests.support.helpers import wait_until
from zklocks import LockTimeout, zk_lock
from zklocks.client.pools import connections

pytestmark = pytest.mark.zk

WAITERS = 260  # more than the threads that wait for async acquires


def queued(name):
    client = connections["default"].session().client
    path = zk_lock(name).path
    return len(client.get_children(path)) if client.exists(path) else 0


async def until(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_a_release_does_not_wait_behind_hundreds_of_waiting_coroutines():
    name = "async-crowd"
    served = []

    async def waiter(i):
        async with zk_lock(name, timeout=90):
            served.append(i)

    async def holder(ready, go):
        async with zk_lock(name):
            ready.set()
            await go.wait()
            started = time.monotonic()
        return time.monotonic() - started  # how long the release took

    async def main():
        ready, go = asyncio.Event(), asyncio.Event()
        holding = asyncio.create_task(holder(ready, go))
        await ready.wait()
        tasks = [asyncio.create_task(waiter(i)) for i in range(WAITERS)]
        # Every thread that waits for an acquire is taken (some waiters have no thread yet).
        await until(lambda: queued(name) >= 257, timeout=60)
        go.set()
        released_in = await asyncio.wait_for(holding, 5)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        return released_in

    released_in = asyncio.run(main())
    assert released_in < 1.0
    assert sorted(served) == list(range(WAITERS))
    wait_until(lambda: queued(name) == 0, timeout=5)


def test_a_waiter_behind_busy_threads_times_out_from_its_call():
    name = "async-busy"

    async def filler():
        try:
            async with zk_lock(name, timeout=6):
                pass
        except LockTimeout:
            pass

    async def main():
        holder = zk_lock(name)
        await holder.acquire_async()
        fillers = [asyncio.create_task(filler()) for _ in range(WAITERS)]
        await until(lambda: queued(name) >= 257, timeout=60)

        async def timed():  # a task of its own: the holder's task would re-enter
            async with zk_lock(name, timeout=0.5):
                pass

        started = time.monotonic()
        with pytest.raises(LockTimeout) as err:
            await asyncio.create_task(timed())
        took = time.monotonic() - started
        await holder.release_async()
        await asyncio.wait_for(asyncio.gather(*fillers), 60)
        return took, err.value

    took, error = asyncio.run(main())
    # From its call: a timeout counted once a thread took the call up would end after the fillers' 6 s. The margin
    # above 0.5 s is the loaded machine's.
    assert 0.45 <= took < 3.0, took
    assert name in str(error) and "default" in str(error)
    wait_until(lambda: queued(name) == 0, timeout=5)

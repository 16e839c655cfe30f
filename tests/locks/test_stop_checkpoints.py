"""on_lost="cancel" stops a thread only at checkpoints, never with an asynchronous exception (docs/lost.md): a stop
cannot land inside library code that holds a lock, a query after the loss never runs, and work handed to another
thread from a holding task stops at its own checkpoints."""

from __future__ import annotations

import asyncio
import logging
import logging.handlers
import queue
import random
import subprocess
import sys
import threading
import time

import pytest
from asgiref.sync import sync_to_async

from tests.support.helpers import wait_until, zk_settings
from zklocks import LockLost, checkpoint, zk_lock


def force_release_later(kz, lock, after: float) -> threading.Timer:
    node = lock._hold().contender.node
    timer = threading.Timer(after, kz.delete, args=(node,))
    timer.start()
    return timer


@pytest.mark.timeout(60)
def test_a_body_without_a_checkpoint_runs_on_and_its_with_says_lost(zk_server, kz):
    with zk_settings(zk_server.hosts, "/stop-nocheck"):
        lock = zk_lock("plain", on_lost="cancel")
        done = []
        with pytest.raises(LockLost) as info:
            with lock:
                force_release_later(kz, lock, 0).join()
                assert wait_until(lambda: not lock.is_held, 10)
                done.append("the body's end")  # nothing stopped it: it has no checkpoint
        assert done == ["the body's end"]
        assert info.value.reason == "deleted"
        checkpoint()  # after the with statement nothing raises
        assert not lock._mine


@pytest.mark.timeout(120)
def test_a_stop_never_leaves_a_library_lock_taken(zk_server, kz):
    """Losses at random moments while the body works a queue.Queue and logs through a QueueHandler (both take
    locks between an acquire and a try): each round the queue's mutex and the handler's lock are free after the
    stop. An asynchronous exception left them taken in about a quarter of the stops."""
    records: queue.Queue = queue.Queue()
    handler = logging.handlers.QueueHandler(records)
    logger = logging.getLogger("tests.stop-checkpoints")
    logger.addHandler(handler)
    logger.propagate = False
    work: queue.Queue = queue.Queue(maxsize=64)
    stops = 0
    try:
        # An open alias: its holders watch their node from the grant, so each stop lands within milliseconds
        # (a guarded alias sets that watch once a hold has lasted a second).
        with zk_settings(zk_server.hosts, "/stop-library", AUTH="open"):
            for i in range(40):
                lock = zk_lock(f"lib-{i}", on_lost="cancel")
                try:
                    with lock:
                        timer = force_release_later(kz, lock, random.uniform(0, 0.05))
                        ends = time.monotonic() + 5
                        while time.monotonic() < ends:
                            checkpoint()
                            work.put(i)
                            work.get()
                            logger.warning("item %d", i)
                            records.get_nowait()
                except LockLost:
                    stops += 1
                timer.join()
                for taken in (work.mutex, handler.lock, records.mutex):
                    assert taken.acquire(timeout=1), f"round {i}: a library lock was left taken"
                    taken.release()
    finally:
        logger.removeHandler(handler)
    assert stops == 40


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_a_query_after_the_loss_never_runs(zk_server, kz):
    from tests.support.app.models import Stock

    with zk_settings(zk_server.hosts, "/stop-query"):
        lock = zk_lock("db", on_lost="cancel")
        with pytest.raises(LockLost):
            with lock:
                Stock.objects.create(quantity=1)  # while held: it runs
                force_release_later(kz, lock, 0).join()
                assert wait_until(lambda: not lock.is_held, 10)
                Stock.objects.create(quantity=2)
                raise AssertionError("the query after the loss ran")
        assert sorted(Stock.objects.values_list("quantity", flat=True)) == [1]  # and after the with: it runs


@pytest.mark.timeout(60)
def test_work_handed_to_threads_stops_at_its_checkpoints_even_after_the_task_left(zk_server, kz):
    """The holding task is cancelled at the loss and its ``async with`` raises LockLost at once; the work it had
    handed to asyncio.to_thread and sync_to_async was started under the hold, and stops at its next checkpoint.
    Work handed over after the hold is not stopped."""
    progress = {"to_thread": 0, "sync_to_async": 0}

    def work(kind):
        for _ in range(1000):
            checkpoint()
            progress[kind] += 1
            time.sleep(0.01)
        return "finished"

    async def main():
        lock = zk_lock("handed", on_lost="cancel")
        helpers = []
        with pytest.raises(LockLost):
            async with lock:
                loop = asyncio.get_running_loop()
                helpers.append(loop.create_task(asyncio.to_thread(work, "to_thread")))
                helpers.append(loop.create_task(sync_to_async(work, thread_sensitive=False)("sync_to_async")))
                await asyncio.sleep(0.2)
                await asyncio.to_thread(force_release_later(kz, lock, 0).join)
                await asyncio.sleep(20)
        left_at = time.monotonic()
        outcomes = await asyncio.gather(*helpers, return_exceptions=True)
        stopped_after = time.monotonic() - left_at
        after = await asyncio.to_thread(lambda: (checkpoint(), "ran")[1])
        return outcomes, stopped_after, after

    with zk_settings(zk_server.hosts, "/stop-handed"):
        outcomes, stopped_after, after = asyncio.run(asyncio.wait_for(main(), 30))
    assert all(isinstance(o, LockLost) for o in outcomes), outcomes
    assert all(0 < n < 1000 for n in progress.values()), progress
    assert stopped_after < 1.0  # a checkpoint every 10 ms: they stopped right after the task
    assert after == "ran"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("leave", ["release_async(wait=True)", "shield(__aexit__)"])
def test_work_started_after_an_async_release_of_a_lost_hold_is_not_stopped(zk_server, kz, leave):
    """A lost hold left through a coroutine that runs in a copy of the task's context (a release off the loop, or
    an exit under asyncio.shield): the threads the task starts afterwards carry no stopper of it."""

    async def holder(lock):
        await lock.acquire_async()
        try:
            await asyncio.to_thread(force_release_later(kz, lock, 0).join)
            await asyncio.sleep(20)  # cancelled at the loss
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()
        assert not lock.is_held
        if leave == "shield(__aexit__)":
            with pytest.raises(LockLost):
                await asyncio.shield(lock.__aexit__(None, None, None))
        else:
            await lock.release_async(wait=True)
        during = await asyncio.to_thread(lambda: (checkpoint(), "ran")[1])
        return during, lock._mine

    with zk_settings(zk_server.hosts, "/stop-after-release"):
        lock = zk_lock(f"after-{leave[:6]}", on_lost="cancel")
        during, mine = asyncio.run(asyncio.wait_for(holder(lock), 30))
    assert during == "ran"
    assert not mine


DESCENDANTS = """
import os, subprocess, sys, time
from zklocks.celery.terminate import end_descendants
kids = [subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"]) for _ in range(2)]
time.sleep(0.5)
ps = ["ps", "-o", "pid=", "--ppid", f"{kids[0].pid},{kids[1].pid}"]
below = [int(p) for p in subprocess.run(ps, capture_output=True, text=True).stdout.split()]
print(" ".join(map(str, [k.pid for k in kids] + below)), flush=True)
print(end_descendants(), flush=True)
"""


@pytest.mark.timeout(60)
def test_terminate_kills_the_processes_the_task_started():
    """end_descendants, as on_lost="terminate" calls it before the worker process ends: the task's subprocesses
    and theirs are gone, the caller is not."""
    out = subprocess.run(
        [sys.executable, "-c", DESCENDANTS], capture_output=True, text=True, timeout=30, check=True
    ).stdout.split("\n")
    pids, killed = [int(p) for p in out[0].split()], int(out[1])
    assert len(pids) >= 4 and killed == len(pids)  # two shells, each with one or two sleeps below it

    def gone(pid):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie until its parent reaps it
        except OSError:
            return True

    assert wait_until(lambda: all(gone(p) for p in pids), 10)


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_a_swallowed_stop_never_commits_half_an_item(zk_server, kz):
    """A batch in one transaction, each item in its own savepoint, the LockLost of an item caught: the item cut by
    the loss is rolled back whole (the rollback to its savepoint runs, though it is a query), the items before it
    stay, and nothing after the loss is written."""
    from django.db import transaction

    from tests.support.app.models import Stock

    with zk_settings(zk_server.hosts, "/stop-savepoint"):
        lock = zk_lock("batch", on_lost="cancel")
        with pytest.raises(LockLost):
            with lock, transaction.atomic():
                for item in range(3):
                    try:
                        with transaction.atomic():
                            Stock.objects.create(quantity=10 * item)
                            if item == 1:
                                force_release_later(kz, lock, 0).join()
                                assert wait_until(lambda: not lock.is_held, 10)
                            Stock.objects.create(quantity=10 * item + 1)
                    except LockLost:
                        pass  # a batch job's per-item except
        assert sorted(Stock.objects.values_list("quantity", flat=True)) == [0, 1]


@pytest.mark.django_db(transaction=True)
def test_a_users_execute_wrapper_is_left_in_place():
    """Django's execute_wrapper() pops the last wrapper as it leaves; ours, added when a connection opens inside
    it, goes first, so the user's wrapper is the one that leaves."""
    from django.db import connection

    from zklocks.handles.stopping import query_checkpoint

    seen = []

    def blocker(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    connection.close()
    with connection.execute_wrapper(blocker):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")  # opens the connection: connection_created adds ours
    assert seen and connection.execute_wrappers == [query_checkpoint]

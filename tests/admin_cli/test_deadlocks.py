"""The wait-for graph: a deadlock banner on the admin list page, computed from the snapshot's node data."""

import asyncio
import concurrent.futures
import threading

import pytest

from tests.support.helpers import wait_until
from tests.support.threads import HeldInThread
from zklocks import LockTimeout, zk_lock
from zklocks.ops import read_model
from zklocks.ops.deadlocks import find
from zklocks.ops.snapshots import Contender, LockInfo
from zklocks.testing import free_port

LIST = "/admin/zklocks/lock/"


def c(thread, pid=1, host="h", task_id=None, seq=0, owner=None, asyncio_task=None):
    return Contender(
        node=f"n{seq}", mode="exclusive", sequence=seq, token=seq, session_id=1, created_at=0.0,
        host=host, pid=pid, thread=thread, task_id=task_id, owner=owner, asyncio_task=asyncio_task,
        ident=None if owner is None else 7,
    )  # fmt: skip


def lock(name, holders, waiters=(), kind="exclusive", max_leases=None):
    return LockInfo("default", name, name, "/" + name, kind, max_leases, list(holders), list(waiters))


def test_two_threads_in_a_cycle():
    (d,) = find("default", [lock("A", [c("t1")], [c("t2")]), lock("B", [c("t2")], [c("t1")])])
    assert sorted(d.locks) == ["A", "B"]
    text = d.describe()
    assert "thread t1 (pid 1 on h) holds 'A' and waits for 'B'" in text
    assert "thread t2 (pid 1 on h) holds 'B' and waits for 'A'" in text


def test_three_processes_and_tasks():
    a, b, t = c("x", pid=1), c("x", pid=2), c(None, pid=3, task_id="task-9")
    (d,) = find("default", [lock("A", [a], [t]), lock("B", [b], [a]), lock("C", [t], [b])])
    assert len(d.steps) == 3 and "task task-9 (pid 3 on h) holds 'C' and waits for 'A'" in d.describe()


def test_no_cycle_no_banner():
    # t2 waits for t1, which waits for t3, which waits for nobody
    assert find("default", [lock("A", [c("t1")], [c("t2")]), lock("B", [c("t3")], [c("t1")])]) == []
    # the same thread name in two processes is two actors
    assert find("default", [lock("A", [c("t", pid=1)], [c("t", pid=2)]), lock("B", [c("t", pid=2)])]) == []


def test_owners_not_thread_names_tell_actors_apart():
    # Tasks a and b of one event loop (one thread name, "loop"): a holds A and waits for C, held by thread t,
    # which waits for B, held by b, which waits for D, held by u. A chain: u's release lets everyone through.
    # By thread name, "loop" would hold A and B and t would close a cycle with it.
    a = c("loop", owner=1, asyncio_task="Task-1")
    b = c("loop", owner=2, asyncio_task="Task-2")
    t = c("worker", owner=3)
    chain = [lock("A", [a]), lock("B", [b], [t]), lock("C", [t], [a]), lock("D", [c("u", owner=4)], [b])]
    assert find("default", chain) == []
    cycle = [lock("A", [a], [b]), lock("B", [b], [a])]
    (d,) = find("default", cycle)
    assert "thread loop, asyncio task Task-1 (pid 1 on h) holds 'A' and waits for 'B'" in d.describe()
    assert "thread loop, asyncio task Task-2 (pid 1 on h) holds 'B' and waits for 'A'" in d.describe()
    # An owner number is per process: the same number in two processes is two actors.
    assert find("default", [lock("A", [c("t", pid=1, owner=1)], [c("t", pid=2, owner=1)])]) == []


def test_old_data_without_an_owner_falls_back_to_the_name():
    mixed = [lock("A", [c("t1")], [c("t2", owner=5)]), lock("B", [c("t2", owner=5)], [c("t1")])]
    (d,) = find("default", mixed)
    assert sorted(d.locks) == ["A", "B"]


def test_semaphores_and_foreign_contenders_are_left_out():
    sem = lock("S", [c("t1")], [c("t2")], kind="semaphore", max_leases=2)
    assert find("default", [sem, lock("B", [c("t2")], [c("t1")])]) == []
    foreign = Contender(node="f", mode="exclusive", sequence=1, token=1, session_id=2, created_at=0.0, raw="x")
    assert find("default", [lock("A", [foreign], [c("t2")]), lock("B", [c("t2")], [foreign])]) == []


@pytest.mark.zk
@pytest.mark.django_db
def test_a_real_deadlock_shows_a_banner(admin_client):
    ready = threading.Barrier(2)
    outcomes = []

    def worker(first, second):
        with zk_lock(first):
            ready.wait(10)
            try:
                with zk_lock(second, timeout=6):
                    outcomes.append("acquired")
            except LockTimeout:
                outcomes.append("timeout")

    threads = [
        threading.Thread(target=worker, args=("ledger/A", "ledger/B"), name="billing-1"),
        threading.Thread(target=worker, args=("ledger/B", "ledger/A"), name="billing-2"),
    ]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: sum(lock.queue_length for lock in read_model.snapshot().locks) == 2, 10)
        html = admin_client.get(LIST).content.decode()
        assert html.count('class="error zk-deadlock"') == 1
        assert "thread billing-1" in html and "thread billing-2" in html
        assert 'holds <a href="?q=ledger/A">ledger/A</a> and waits for <a href="?q=ledger/B">ledger/B</a>' in html
    finally:
        for t in threads:
            t.join(15)
    assert sorted(outcomes) in (["acquired", "timeout"], ["timeout", "timeout"])
    assert "zk-deadlock" not in admin_client.get(LIST).content.decode()


@pytest.mark.zk
@pytest.mark.django_db
def test_an_unreachable_alias_does_not_say_no_locks(admin_client, zklocks_settings):
    zklocks_settings(EXTRA_ALIASES={"reports": {"HOSTS": f"127.0.0.1:{free_port()}", "CONNECT_TIMEOUT": 0.5}})
    html = admin_client.get(LIST + "?alias=reports").content.decode()
    assert "zk-alias-error" in html
    assert "No locks." not in html and "No locks could be read" in html
    html = admin_client.get(LIST).content.decode()  # "default" answered, with no locks
    assert "No locks." not in html and "No locks in the aliases that answered." in html


class Loop:
    """An event loop in a thread of its own: the coroutines given to ``start`` are tasks of that one thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="event-loop", daemon=True)
        self.thread.start()

    def start(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def hold_then_wait(first, second, holding: threading.Event, timeout: float = 30, after=None):
    """Hold ``first``, then wait for ``second``; with ``after`` (an event), only once that is set too: else a task
    that got ahead could take both locks before the other took its first, and no cycle would form."""
    async with zk_lock(first):
        holding.set()
        while after is not None and not after.is_set():
            await asyncio.sleep(0.01)
        async with zk_lock(second, timeout=timeout):
            return "acquired"


def queued(n):
    return sum(lock.queue_length for lock in read_model.snapshot().locks) == n


@pytest.mark.zk
@pytest.mark.django_db
def test_two_tasks_of_one_loop_are_two_actors(admin_client):
    """A chain, not a cycle: task b holds z and waits for w (held by thread u, which waits for nothing); thread t
    holds y and waits for z; task a holds x and waits for y. Actors named by thread would make one actor of a
    and b (the loop's thread, holding x and z), and t would close a cycle with it."""
    loop = Loop()
    u = HeldInThread(zk_lock("chain/w"), name="holder-u")
    outcomes = []
    try:
        b_holds, t_holds, a_holds = threading.Event(), threading.Event(), threading.Event()
        b = loop.start(hold_then_wait("chain/z", "chain/w", b_holds))
        assert b_holds.wait(10)
        wait_until(lambda: queued(1), 10)

        def t_run():
            with zk_lock("chain/y"):
                t_holds.set()
                with zk_lock("chain/z", timeout=30):
                    outcomes.append("t")

        t = threading.Thread(target=t_run, name="holder-t")
        t.start()
        assert t_holds.wait(10)
        wait_until(lambda: queued(2), 10)
        a = loop.start(hold_then_wait("chain/x", "chain/y", a_holds))
        assert a_holds.wait(10)
        wait_until(lambda: queued(3), 10)

        (snap,) = read_model.snapshot().aliases
        waiters = {lock.name: lock.waiters[0] for lock in snap.locks if lock.waiters}
        assert waiters["chain/y"].thread == waiters["chain/w"].thread == "event-loop"  # a and b: one thread
        assert waiters["chain/y"].ident == waiters["chain/w"].ident
        assert waiters["chain/y"].owner != waiters["chain/w"].owner
        assert waiters["chain/y"].asyncio_task and waiters["chain/w"].asyncio_task
        assert find(snap.alias, snap.locks) == []
        html = admin_client.get(LIST).content.decode()
        assert "zk-deadlock" not in html
        assert f"asyncio task {waiters['chain/y'].asyncio_task}" in html

        u.release()  # the chain unwinds: b, then t, then a
        assert b.result(15) == "acquired" and a.result(15) == "acquired"
        t.join(15)
        assert outcomes == ["t"]
    finally:
        u.release()
        loop.stop()


@pytest.mark.zk
@pytest.mark.django_db
def test_a_real_cycle_between_two_tasks_of_one_loop(admin_client):
    loop = Loop()
    try:
        holding = threading.Event(), threading.Event()
        # Each takes its second lock only once both hold their first: a cycle, whatever the machine's load.
        a = loop.start(hold_then_wait("pair/A", "pair/B", holding[0], timeout=12, after=holding[1]))
        b = loop.start(hold_then_wait("pair/B", "pair/A", holding[1], timeout=12, after=holding[0]))
        wait_until(lambda: queued(2), 8)
        (snap,) = read_model.snapshot().aliases
        (d,) = find(snap.alias, snap.locks)
        assert sorted(d.locks) == ["pair/A", "pair/B"]
        assert all(step.who.label.startswith("thread event-loop, asyncio task ") for step in d.steps)
        html = admin_client.get(LIST).content.decode()
        assert html.count('class="error zk-deadlock"') == 1
        # Broken by cancelling one task in its wait (not by waiting out the timeouts): its first lock goes with
        # it, and the other task gets in.
        a.cancel()
        assert b.result(30) == "acquired"
        with pytest.raises(concurrent.futures.CancelledError):
            a.result(30)
    finally:
        loop.stop()

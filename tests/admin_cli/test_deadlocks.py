"""The wait-for graph: a deadlock banner on the admin list page, computed from the snapshot's node data."""

import threading

import pytest

from tests.support.helpers import wait_until
from zklocks import LockTimeout, inspect, zk_lock
from zklocks.deadlocks import find
from zklocks.inspect import Contender, LockInfo
from zklocks.testing import free_port

LIST = "/admin/zklocks/lock/"


def c(thread, pid=1, host="h", task_id=None, seq=0):
    return Contender(
        node=f"n{seq}", mode="exclusive", sequence=seq, token=seq, session_id=1, created_at=0.0,
        host=host, pid=pid, thread=thread, task_id=task_id,
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
        wait_until(lambda: sum(lock.queue_length for lock in inspect.snapshot().locks) == 2, 10)
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

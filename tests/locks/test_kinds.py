"""Shared locks, semaphores and multi-locks on a real server, with several processes where exclusion is claimed."""

import threading
import time

import pytest

from tests.support.helpers import assert_no_overlap, raw_client, read_records, spawn_worker, wait_until
from tests.support.threads import HeldInThread, in_thread
from zklocks import (
    LockNotAcquired,
    LockTimeout,
    LockUpgradeError,
    SemaphoreMismatch,
    zk_lock,
    zk_multi_lock,
    zk_semaphore,
)
from zklocks.conf import alias_config
from zklocks.testing import four_letter

pytestmark = pytest.mark.zk


def try_lock(name, shared=False):
    def attempt():
        lock = zk_lock(name, shared=shared, blocking=False)
        got = lock.acquire()
        if got:
            lock.release()
        return got

    return in_thread(attempt)


# -- reader/writer matrix --


@pytest.mark.parametrize(
    "held,asked,expected",
    [
        ("shared", "shared", True),
        ("shared", "exclusive", False),
        ("exclusive", "shared", False),
        ("exclusive", "exclusive", False),
    ],
)
def test_reader_writer_matrix(held, asked, expected):
    with zk_lock("matrix", shared=held == "shared"):
        assert try_lock("matrix", shared=asked == "shared") is expected


def test_writer_waits_for_all_readers_and_later_readers_queue_behind_it():
    readers = [HeldInThread(zk_lock("rw", shared=True)) for _ in range(2)]
    assert len({r.token for r in readers}) == 2
    got = threading.Event()

    def writer():
        with zk_lock("rw", timeout=10):
            got.set()
            time.sleep(0.2)

    w = threading.Thread(target=writer)
    w.start()
    wait_until(lambda: len(children("rw")) == 3, timeout=5)
    assert try_lock("rw", shared=True) is False  # a new reader queues behind the waiting writer: no starvation
    readers[0].release()
    time.sleep(0.2)
    assert not got.is_set()
    readers[1].release()
    assert got.wait(5)
    w.join(5)


def children(name):
    from zklocks.client.pools import connections

    return connections["default"].session().client.get_children(zk_lock(name).path)


def test_shared_acquire_by_exclusive_holder_is_nested_without_a_new_node():
    with zk_lock("down") as w:
        with zk_lock("down", shared=True) as r:
            assert r.token == w.token
            assert len(children("down")) == 1
        assert w.is_held
    assert try_lock("down") is True


def test_upgrade_from_shared_is_a_clear_error():
    with zk_lock("up", shared=True):
        with pytest.raises(LockUpgradeError, match="upgrade would deadlock"):
            zk_lock("up").acquire()
    assert try_lock("up") is True


def test_readers_share_across_processes_and_writers_exclude(zk_server, tmp_path):
    out = tmp_path / "rw.jsonl"
    ns = alias_config().namespace
    procs = [
        spawn_worker(
            "hold",
            "--hosts",
            zk_server.hosts,
            "--namespace",
            ns,
            "--name",
            "doc",
            "--count",
            "8",
            "--hold",
            "0.03",
            "--out",
            str(out),
            *(["--shared"] if i < 3 else []),
        )
        for i in range(5)
    ]
    try:
        assert [p.wait(90) for p in procs] == [0] * 5
    finally:
        for p in procs:
            p.kill()
    records = read_records(out)
    writes = [r for r in records if not r["shared"]]
    reads = [r for r in records if r["shared"]]
    assert len(writes) == 16 and len(reads) == 24
    assert_no_overlap(writes)
    for w in writes:
        for r in reads:
            assert r["end"] <= w["start"] or w["end"] <= r["start"], f"reader {r} overlaps writer {w}"
    # That readers share is shown without sampling the machine's timing: a reader in another process holds
    # (its record says so), and a reader here gets in at once while a writer here cannot.
    held_out = tmp_path / "reader.jsonl"
    reader = spawn_worker(
        "hold-forever",
        "--hosts",
        zk_server.hosts,
        "--namespace",
        ns,
        "--name",
        "doc",
        "--shared",
        "--out",
        str(held_out),
    )
    try:
        assert wait_until(lambda: held_out.exists() and read_records(held_out), timeout=60)
        assert try_lock("doc", shared=True) is True
        assert try_lock("doc") is False
    finally:
        reader.kill()
        reader.wait(30)


# -- one notification per release --


def test_each_release_notifies_exactly_one_waiter(zk_server):
    from zklocks.client.pools import connections

    fired = []
    n = 6
    holder = zk_lock("herd")
    holder.acquire()
    threads = []
    results = []

    def waiter():
        with zk_lock("herd", timeout=20) as lock:
            results.append(lock.token)

    session = connections["default"].session()
    original = session.client.get_async

    def counting_get_async(path, watch=None):
        if watch is not None:

            def counted(event, watch=watch):
                fired.append(event.path)
                return watch(event)

            return original(path, watch=counted)
        return original(path)

    session.client.get_async = counting_get_async
    try:
        for _ in range(n):
            t = threading.Thread(target=waiter)
            t.start()
            threads.append(t)
        wait_until(lambda: len(children("herd")) == n + 1, timeout=5)
        lock_path = zk_lock("herd").path

        def watched():
            return [
                line for line in four_letter(zk_server.port, "wchp").splitlines() if line.startswith(lock_path + "/")
            ]

        # Each waiter watches a different single node; nobody watches the parent's children.
        wait_until(lambda: len(watched()) == n, timeout=5)
        assert lock_path not in [line.strip() for line in four_letter(zk_server.port, "wchp").splitlines()]
        holder.release()
        for t in threads:
            t.join(20)
    finally:
        session.client.get_async = original
    assert len(results) == n
    # n releases (holder + n-1 waiters) woke exactly n waiters: one notification each. The threads share a session,
    # so each release handed the lock over in the process as it sent its delete, and ZooKeeper's notifications may
    # come after the last thread ended: one per released node all the same, and no more.
    wait_until(lambda: len(fired) >= n, timeout=5)
    time.sleep(0.3)
    assert len(fired) == n and len(set(fired)) == n, fired


# -- semaphores --


def test_semaphore_allows_max_leases_holders():
    holders = [HeldInThread(zk_semaphore("pool", 2)) for _ in range(2)]
    assert all(h.acquired for h in holders)
    assert in_thread(lambda: zk_semaphore("pool", 2, blocking=False).acquire()) is False
    started = time.monotonic()
    with pytest.raises(LockTimeout):
        in_thread(lambda: zk_semaphore("pool", 2, timeout=0.4).__enter__())
    assert 0.39 <= time.monotonic() - started < 3.0  # the timeout is kept (a loose bound on 2 loaded cores)
    tokens = {h.token for h in holders}
    assert len(tokens) == 2 and all(isinstance(t, int) for t in tokens)
    holders[0].release()
    third = HeldInThread(zk_semaphore("pool", 2, blocking=False))
    assert third.acquired is True
    holders[1].release()
    third.release()


def test_one_owner_can_take_two_leases_and_give_both_back():
    sem = zk_semaphore("twice", 2)
    assert sem.acquire() and sem.acquire()
    assert in_thread(lambda: zk_semaphore("twice", 2, blocking=False).acquire()) is False
    sem.release()
    sem.release()
    wait_until(lambda: children("twice") == ["__mutex__"], timeout=3)  # no lease left behind


def test_non_blocking_semaphore_fails_at_once_even_with_a_blocking_waiter_queued():
    holder = HeldInThread(zk_semaphore("full", 1))
    waiter = threading.Thread(target=lambda: zk_semaphore("full", 1, timeout=3).acquire())
    waiter.start()
    time.sleep(0.3)  # the waiter holds the internal mutex while it waits for a lease
    started = time.monotonic()
    assert in_thread(lambda: zk_semaphore("full", 1, blocking=False).acquire()) is False
    assert time.monotonic() - started < 2.0  # not behind the waiter, which would keep it until its 3 s timeout
    holder.release()
    waiter.join(10)


def test_semaphore_waiter_gets_a_lease_when_one_is_released():
    first = zk_semaphore("slots", 1)
    first.acquire()
    got = threading.Event()

    def waiter():
        with zk_semaphore("slots", 1, timeout=10):
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    assert not got.is_set()
    first.release()
    assert got.wait(5)
    t.join(5)


def test_semaphore_max_leases_mismatch_is_refused():
    with zk_semaphore("agree", 3):
        with pytest.raises(SemaphoreMismatch, match="max_leases=3 .* asked for 2"):
            in_thread(lambda: zk_semaphore("agree", 2).acquire())
    with pytest.raises(ValueError, match="max_leases must be an integer >= 1, not 0"):
        zk_semaphore("bad", 0)


def test_semaphore_across_processes_never_exceeds_its_leases(zk_server, tmp_path):
    import subprocess
    import sys

    from tests.support.helpers import ROOT

    out = tmp_path / "sem.jsonl"
    ns = alias_config().namespace
    script = (
        "import json,os,sys,time\n"
        "from tests.support.workers import setup\n"
        f"setup({zk_server.hosts!r}, {ns!r}, 4.0)\n"
        "from zklocks import zk_semaphore\n"
        f"out=open({str(out)!r},'a',buffering=1)\n"
        "for _ in range(6):\n"
        "    with zk_semaphore('sem', 2, timeout=30) as s:\n"
        "        a=time.monotonic(); time.sleep(0.03); b=time.monotonic()\n"
        "    out.write(json.dumps({'start':a,'end':b,'pid':os.getpid()})+'\\n')\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, start_new_session=True
        )
        for _ in range(4)
    ]
    try:
        assert [p.wait(90) for p in procs] == [0] * 4
    finally:
        for p in procs:
            p.kill()
    records = read_records(out)
    assert len(records) == 24
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    level, peak = 0, 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    assert 1 <= peak <= 2
    # That two processes hold leases at once is shown without sampling the machine's timing: a process holds one
    # (its record says so), and here one more lease is granted at once while a third is not.
    held_out = tmp_path / "held.jsonl"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import json,os,time\n"
            "from tests.support.workers import setup\n"
            f"setup({zk_server.hosts!r}, {ns!r}, 4.0)\n"
            "from zklocks import zk_semaphore\n"
            "with zk_semaphore('sem', 2, timeout=30):\n"
            f"    open({str(held_out)!r},'a').write(json.dumps({{'pid':os.getpid()}})+'\\n')\n"
            "    time.sleep(120)\n",
        ],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    try:
        assert wait_until(lambda: held_out.exists() and read_records(held_out), timeout=60)
        second, third = zk_semaphore("sem", 2), zk_semaphore("sem", 2)
        assert second.acquire(blocking=False) is True
        try:
            assert third.acquire(blocking=False) is False
        finally:
            second.release()
    finally:
        holder.kill()
        holder.wait(30)


# -- multi-locks --


def test_multi_lock_takes_all_and_exposes_tokens():
    with zk_multi_lock(["b", "a", ("c", "shared")], timeout=5) as multi:
        assert set(multi.tokens) == {"a", "b", "c"} and all(multi.tokens.values())
        assert multi.is_held
        assert try_lock("a") is False and try_lock("b") is False
        assert try_lock("c", shared=True) is True and try_lock("c") is False
    assert try_lock("a") and try_lock("b") and try_lock("c")


def test_multi_lock_is_all_or_nothing_on_timeout(zk_server):
    blocker = HeldInThread(zk_lock("m3"))
    started = time.monotonic()
    with pytest.raises(LockTimeout):
        with zk_multi_lock(["m1", "m2", "m3"], timeout=0.5):
            pass
    assert 0.49 <= time.monotonic() - started < 3.0  # the timeout is kept (a loose bound on 2 loaded cores)
    # Nothing of m1 and m2 is kept.
    assert try_lock("m1") and try_lock("m2")
    with pytest.raises(LockNotAcquired):
        zk_multi_lock(["m1", "m3"], blocking=False).__enter__()
    assert try_lock("m1")
    blocker.release()


def test_multi_locks_in_opposite_orders_do_not_deadlock():
    done = []

    def worker(names):
        for _ in range(10):
            with zk_multi_lock(names, timeout=10):
                pass
        done.append(names)

    threads = [threading.Thread(target=worker, args=(n,)) for n in (["x", "y"], ["y", "x"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(done) == 2


def test_multi_lock_rejects_duplicates():
    with pytest.raises(ValueError, match="twice"):
        zk_multi_lock(["a", ("a", "shared")])


def test_raw_watch_count_is_zero_after_everything_is_released(zk_server):
    with zk_lock("w1"):
        pass
    client = raw_client(zk_server.hosts)
    try:
        assert zk_lock("w1").path not in four_letter(zk_server.port, "wchp")
    finally:
        client.stop()


def test_a_semaphore_node_with_deeply_nested_data_is_claimed_not_raised_on(kz):
    """Anyone's data on the semaphore's node (nested past the JSON parser's recursion limit) is a node without
    our marker: the first contender claims it, and no RecursionError escapes the acquire."""
    path = zk_semaphore("deep-data", 2).path
    kz.create(path, b"[" * 100_000, makepath=True)
    with zk_semaphore("deep-data", 2):
        pass

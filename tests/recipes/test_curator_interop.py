"""LAYOUT "curator": zklocks and Apache Curator's own recipes (Debian's libcurator-recipes-java, in a JVM) exclude
each other on one lock path, both ways. Both sides record every hold on CLOCK_MONOTONIC (Java's System.nanoTime
is CLOCK_MONOTONIC on Linux); each recorded interval lies inside its hold, so an overlap is a real one."""

from __future__ import annotations

import random
import re
import threading
import time
import uuid
from itertools import pairwise

import pytest
from django.core.checks import run_checks
from kazoo.exceptions import NoNodeError

from tests.support.curator import CuratorContenders
from tests.support.helpers import raw_client, read_records, tree, wait_until
from tests.support.threads import HeldInThread
from zklocks import conf, lock_path, zk_leader, zk_lock, zk_rw_lock, zk_semaphore
from zklocks.ops import read_model
from zklocks.recipes import layout

# A JVM's start-up on a loaded machine (the fast tier beside another copy of itself): a bound, not a wait.
JVM_START = 30.0

pytestmark = pytest.mark.zk

SECONDS = 4.0
PROTECTED = r"_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-"


@pytest.fixture
def kz(zk_server):
    client = raw_client(zk_server.hosts)
    yield client
    client.stop()
    client.close()


def python_contenders(log, handles, seconds=SECONDS, hold=0.005):
    """One thread per (kind, handle factory): take and release in a loop for ``seconds``, one JSON line a hold."""
    lines: list[str] = []
    errors: list[BaseException] = []
    until = time.monotonic() + seconds

    def run(idx, kind, make):
        try:
            while time.monotonic() < until:
                handle = make()
                asked = time.monotonic_ns()
                assert handle.acquire(timeout=30), f"python-{idx} not acquired within 30 s"
                start = time.monotonic_ns()
                token = handle.token
                time.sleep(hold * (idx % 3) / 2)
                end = time.monotonic_ns()
                handle.release()
                lines.append(
                    f'{{"side": "python", "who": "python-{idx}", "kind": "{kind}", "asked": {asked}, '
                    f'"start": {start}, "end": {end}, "token": {token}}}'
                )
                time.sleep(0.002)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, kind, make)) for i, (kind, make) in enumerate(handles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 40)
    assert not errors, errors
    with open(log, "a") as f:
        f.write("".join(line + "\n" for line in lines))


def run_mixed(tmp_path, hosts, name, recipe, handles, *, java_threads=3, max_leases=1, first=None, java_extra=0.0):
    """Curator contenders in a JVM and zklocks contenders in threads on one lock, SECONDS each. ``first(java, log)``
    runs once the JVM contends and before the zklocks threads start; the JVM contends ``java_extra`` seconds
    longer to make up for it. Each side has a log file of its own: the JVM writes its file through a buffer, in
    pieces that need not end with a line, until it exits."""
    log = tmp_path / "python.jsonl"
    java_log = tmp_path / "java.jsonl"
    java = CuratorContenders(
        hosts,
        lock_path(name),
        recipe,
        java_log,
        threads=java_threads,
        seconds=SECONDS + java_extra,
        max_leases=max_leases,
    )
    with java:
        if first is not None:
            first(java, log)
        python_contenders(log, handles)
        assert java.wait() == 0, java.output
    return read_records(java_log) + read_records(log)


MET = "a Curator reader read inside a zklocks reader's hold"


def read_alongside_curator(kz, name, log, java, threads, *, within=20.0, settle=5.0, hold_at_most=5.0) -> str:
    """Make a Curator reader read inside a zklocks reader's hold, while the JVM (``threads`` threads) is the only
    other contender on ``name``. Returns how it went; the zklocks holds go to ``log``, as python_contenders'.

    Gates are nodes of our own named as Curator names a writer's: every contender queued behind one waits until
    it is deleted. A round:

    1. gate G; wait until each JVM thread has a node behind G (the JVM can take nothing and queue nothing more).
       If the first of them is a writer's, delete G, let the JVM run a moment, and start again;
    2. a zklocks reader R queues behind the JVM's nodes, and gate B right behind R (nothing can come between);
       delete G: the JVM's nodes are served in order, the readers at the head first, and each JVM thread queues
       again behind B; R holds once the JVM's writers ahead of it are done;
    3. once R holds, the first node behind B is a Curator reader's, with only B before it that is not a reader's;
       delete B: that reader can hold now, and only now (B was there when it queued). Its recorded start is after
       R's, and once its node is gone, its recorded end (taken before its release) is before R's end.

    Step 3 is the claim under test: a Curator reader does not wait for a zklocks reader. If it did, its node stays,
    R lets go after ``hold_at_most``, and no reader of either side reads inside the other's hold here."""
    path = lock_path(name)
    ours: set[str] = set()
    changed = threading.Event()
    rng = random.Random()

    def seq(child: str) -> int:
        return int(child[-11:]) if child[-11] == "-" else int(child[-10:])

    def wake(_event) -> None:
        changed.set()

    def wait_for(predicate, timeout: float):
        """predicate(children in queue order) until it returns something true, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            changed.clear()
            try:
                children = sorted(kz.get_children(path, watch=wake), key=seq)
            except NoNodeError:  # no one has queued yet
                children = []
            value = predicate(children)
            if value or time.monotonic() > deadline:
                return value
            changed.wait(0.05)

    def gate() -> str:
        node = kz.create(f"{path}/_c_{uuid.uuid4()}-__WRIT__", ephemeral=True, sequence=True, makepath=True)
        node = node.rsplit("/", 1)[1]
        ours.add(node)
        return node

    def lift(node: str) -> None:
        if node in ours:
            try:
                kz.delete(f"{path}/{node}")
            except NoNodeError:
                pass
            ours.discard(node)

    def jvm_behind(gate_node: str):
        """The JVM's nodes, once every one of its threads queues behind ``gate_node``."""

        def check(children):
            jvm = [c for c in children if c not in ours]
            return jvm if len(jvm) == threads and all(seq(c) > seq(gate_node) for c in jvm) else None

        return wait_for(check, settle)

    lines = []

    def one_round() -> str | None:
        g = gate()
        b = None
        reader = None
        asked = start = 0  # the zklocks reader's hold, recorded as python_contenders records one
        try:
            jvm = jvm_behind(g)
            if jvm is None or "__READ__" not in jvm[0]:
                return None
            asked = time.monotonic_ns()
            reader = HeldInThread(zk_rw_lock(name).read, name="python-meet", wait_for_acquire=False, timeout=30)
            own = wait_for(lambda children: [c for c in children if c not in ours and c not in jvm], settle)
            assert own and len(own) == 1 and seq(own[0]) > seq(jvm[-1]), (own, jvm)
            b = gate()
            lift(g)
            assert reader.wait(40), reader.error or "the zklocks reader not acquired within 30 s"
            start = time.monotonic_ns()  # after its acquire returned, and before B goes: inside its hold
            behind = seq(b)
            first = wait_for(lambda children: [c for c in children if seq(c) > behind][:1], settle)
            if not first or "__READ__" not in first[0]:
                return None
            lift(b)
            if wait_for(lambda children: first[0] not in children, hold_at_most):
                return MET
            return f"no Curator reader read within {hold_at_most}s while a zklocks reader held"
        finally:
            lift(g)
            if b is not None:
                lift(b)
            if reader is not None:
                end = time.monotonic_ns()  # before its release: inside its hold
                reader.release()
                assert reader.error is None, reader.error
                if start:
                    lines.append(
                        f'{{"side": "python", "who": "python-meet", "kind": "r", "asked": {asked}, '
                        f'"start": {start}, "end": {end}, "token": {reader.token}}}'
                    )

    outcome = None
    give_up = time.monotonic() + within
    try:
        while time.monotonic() < give_up and java.proc.poll() is None:
            outcome = one_round() or outcome
            if outcome == MET:
                return outcome
            time.sleep(rng.uniform(0, 0.03))  # the next gate cuts the JVM's turns elsewhere
        return outcome or "the JVM was done before a Curator reader queued first behind a gate"
    finally:
        for node in list(ours):
            lift(node)
        with open(log, "a") as f:
            f.write("".join(line + "\n" for line in lines))


def overlaps(records, compatible=lambda a, b: False):
    """Pairs of holds that overlap in time and may not (``compatible`` says which may)."""
    ordered = sorted(records, key=lambda r: r["start"])
    found = []
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if b["start"] >= a["end"]:
                break
            if not compatible(a, b):
                found.append((a, b))
    return found


def waited_for(records, waiter_side):
    """How many holds of ``waiter_side`` waited while the other side held (asked before its hold ended and got
    the lock only after)."""
    other = [r for r in records if r["side"] != waiter_side]
    mine = [w for w in records if w["side"] == waiter_side]
    return sum(1 for w in mine if any(w["asked"] < o["end"] <= w["start"] and o["start"] < w["start"] for o in other))


def assert_progress_and_waits(records):
    sides = {side: [r for r in records if r["side"] == side] for side in ("java", "python")}
    print(  # shown with -s, and on failure
        f"holds: java {len(sides['java'])}, python {len(sides['python'])}; waited for the other side: "
        f"java {waited_for(records, 'java')}, python {waited_for(records, 'python')}"
    )
    assert len(sides["java"]) >= 5 and len(sides["python"]) >= 5, {k: len(v) for k, v in sides.items()}
    assert waited_for(records, "java") > 0, "no Curator contender ever waited for a zklocks holder"
    assert waited_for(records, "python") > 0, "no zklocks contender ever waited for a Curator holder"


def assert_no_node_left(kz, path, internal=()):
    def clean():
        left = [p for p in tree(kz, path) if p.rsplit("/", 1)[1] not in internal]
        return not left or print(left)

    wait_until(clean, timeout=10)


@pytest.fixture
def curator_layout(zklocks_settings):
    return zklocks_settings(LAYOUT="curator", POOL_SIZE=2)


def test_mutex_excludes_curator_both_ways(curator_layout, zk_server, kz, tmp_path):
    name = "interop:mutex"
    records = run_mixed(tmp_path, zk_server.hosts, name, "mutex", [("x", lambda: zk_lock(name))] * 3)
    assert overlaps(records) == []
    assert_progress_and_waits(records)
    py = sorted((r for r in records if r["side"] == "python"), key=lambda r: r["start"])
    assert all(a["token"] < b["token"] for a, b in pairwise(py)), "fencing tokens must still increase"
    assert_no_node_left(kz, lock_path(name))


def test_leader_latch_and_zk_leader_elect_one_leader_between_them(curator_layout, zk_server, kz, tmp_path):
    name = "interop:latch"
    records = run_mixed(tmp_path, zk_server.hosts, name, "latch", [("e", lambda: zk_leader(name))] * 3)
    assert overlaps(records) == [], "two leaders at once"
    assert_progress_and_waits(records)
    assert {r["side"] for r in records} == {"java", "python"}
    assert_no_node_left(kz, lock_path(name))
    with zk_leader(name) as leader:
        (child,) = kz.get_children(lock_path(name))
        assert re.fullmatch(PROTECTED + r"latch-\d{10}", child)  # LeaderLatch's own node name
        assert leader.token == kz.exists(f"{lock_path(name)}/{child}").czxid


def test_kazoo_layout_does_not_exclude_curator(zklocks_settings, zk_server, kz, tmp_path):
    """The same test with the default layout: zklocks and Curator do not see each other's nodes and hold together,
    so LAYOUT "curator" is needed."""
    zklocks_settings(POOL_SIZE=2)
    name = "interop:kazoo-layout"
    records = run_mixed(tmp_path, zk_server.hosts, name, "mutex", [("x", lambda: zk_lock(name))] * 3)
    mixed = [(a, b) for a, b in overlaps(records) if a["side"] != b["side"]]
    assert len(mixed) > 10, f"expected zklocks and Curator holds to overlap under LAYOUT='kazoo', saw {len(mixed)}"


def test_read_write_lock_excludes_curator(curator_layout, zk_server, kz, tmp_path):
    name = "interop:rw"
    rw = [("w", lambda: zk_rw_lock(name).write), ("r", lambda: zk_rw_lock(name).read)]
    met = []

    def meet(java, log):
        # Readers of both sides read together at least once, whatever the timing (the short random holds of the
        # mixed run below need not meet): queued so that a Curator reader may only hold inside a zklocks reader's.
        met.append(read_alongside_curator(kz, name, log, java, threads=4))

    records = run_mixed(tmp_path, zk_server.hosts, name, "rw", rw * 2, java_threads=4, first=meet, java_extra=3.0)
    assert overlaps(records, compatible=lambda a, b: a["kind"] == b["kind"] == "r") == []
    together = overlaps(records, compatible=lambda a, b: a["side"] == b["side"])
    assert together, f"readers of both sides never read together ({met})"
    for side in ("java", "python"):
        for kind in "rw":
            assert any(r["side"] == side and r["kind"] == kind for r in records), (side, kind)
    assert_progress_and_waits(records)
    assert_no_node_left(kz, lock_path(name))


def test_semaphore_excludes_curator(curator_layout, zk_server, kz, tmp_path):
    name = "interop:semaphore"
    records = run_mixed(
        tmp_path,
        zk_server.hosts,
        name,
        "semaphore",
        [("l", lambda: zk_semaphore(name, 2))] * 3,
        java_threads=3,
        max_leases=2,
    )
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    assert most <= 2, f"{most} holders of a 2-lease semaphore at once"
    assert_progress_and_waits(records)
    assert_no_node_left(kz, lock_path(name), internal=("locks", "leases"))


def test_node_names_foreign_data_and_shared_mutex(curator_layout, zk_server, kz, tmp_path):
    name = "interop:names"
    with zk_lock(name) as lock:
        (child,) = kz.get_children(lock_path(name))
        assert re.fullmatch(PROTECTED + r"lock-\d{10}", child), child
        _, stat = kz.get(f"{lock_path(name)}/{child}")
        assert lock.token == stat.czxid
    rw = zk_rw_lock(name)
    with rw.write, rw.read:  # the writer may read: a nested hold, no new node
        (child,) = kz.get_children(lock_path(name))
        assert re.fullmatch(PROTECTED + r"__WRIT__\d{10}", child), child
    with rw.read:
        (child,) = kz.get_children(lock_path(name))
        assert re.fullmatch(PROTECTED + r"__READ__\d{10}", child), child
    with pytest.raises(ValueError, match=r"zk_rw_lock\('interop:names'\)\.read") as err:
        zk_lock(name, shared=True)
    assert "'default'" in str(err.value)
    # A Curator holder's data (the client's address) is shown verbatim by the read model (admin, CLI).
    log = tmp_path / "holds.jsonl"
    with CuratorContenders(zk_server.hosts, lock_path(name), "mutex", log, threads=1, seconds=1.0, hold_ms=-3000):
        info = wait_until(lambda: (i := read_model.lock_info("default", name)[0]) and i.holders and i, JVM_START)
        (holder,) = info.holders
        assert re.fullmatch(PROTECTED + r"lock-\d{10}", holder.node)
        assert holder.raw and holder.host is None, holder
        raw, _ = kz.get(f"{lock_path(name)}/{holder.node}")
        assert holder.raw == raw.decode()
        assert not zk_lock(name).acquire(blocking=False)


def test_semaphore_of_curator_only_in_read_model(curator_layout, zk_server, tmp_path):
    """A semaphore only Curator uses has no zklocks marker: the read model knows it by its leases/ child."""
    name = "interop:curator-semaphore"
    log = tmp_path / "holds.jsonl"
    java = CuratorContenders(
        zk_server.hosts, lock_path(name), "semaphore", log, threads=1, seconds=1.0, hold_ms=-3000, max_leases=2
    )
    with java:
        info = wait_until(lambda: (i := read_model.lock_info("default", name)[0]) and i.holders and i, JVM_START)
        assert info.kind == "semaphore"
        (holder,) = info.holders
        assert holder.mode == "lease" and re.fullmatch(PROTECTED + r"lease-\d{10}", holder.node)
        assert holder.raw  # Curator's data, verbatim
        with zk_semaphore(name, 2, timeout=5):  # the second lease is free
            assert not zk_semaphore(name, 2).acquire(blocking=False)


def test_own_node_found_by_protected_prefix(curator_layout):
    """After a connection loss during a create, a contender finds its node by Curator's ``_c_<uuid>-`` prefix."""
    from zklocks.client.pools import connections
    from zklocks.recipes.queue import Contender

    session = connections["default"].session()
    a, b = Contender(session, "/p", "lock-"), Contender(session, "/p", "lock-")
    assert re.fullmatch(PROTECTED, a.guid) and a.prefix == f"/p/{a.guid}lock-"
    children = [f"{b.guid}lock-0000000001", f"{a.guid}lock-0000000002", "_c_foreign-lock-0000000000"]
    assert a._find_own(children) == f"{a.guid}lock-0000000002"


def test_kazoo_layout_rw_handles_are_zk_locks(zklocks_settings, kz):
    name = "interop:kazoo-rw"
    with zk_rw_lock(name).read:
        (child,) = kz.get_children(lock_path(name))
        assert re.fullmatch(r"[0-9a-f]{32}__rlock__\d{10}", child)
        with zk_lock(name, shared=True):  # the same lock: a nested hold
            assert len(kz.get_children(lock_path(name))) == 1
    with zk_rw_lock(name).write:
        (child,) = kz.get_children(lock_path(name))
        assert re.fullmatch(r"[0-9a-f]{32}__lock__\d{10}", child)
        with zk_lock(name):
            assert len(kz.get_children(lock_path(name))) == 1


def test_layout_checks(settings):
    hosts = "127.0.0.1:2181"
    settings.ZKLOCKS = {
        "default": {"HOSTS": hosts, "NAMESPACE": "/shop"},
        "java": {"HOSTS": "localhost:2181,zk2", "NAMESPACE": "/shop", "LAYOUT": "curator"},  # one server shared
        "other": {"HOSTS": hosts, "NAMESPACE": "/other", "LAYOUT": "curator"},
        "typo": {"HOSTS": hosts, "LAYOUT": "Curator"},
    }
    conf.reset()
    found = [m for m in run_checks() if m.id in ("zklocks.E040", "zklocks.E041")]
    assert [(m.id, m.msg) for m in found] == [
        (
            "zklocks.E040",
            "ZKLOCKS['typo']: LAYOUT must be one of 'kazoo', 'curator', not 'Curator'.",
        ),
        (
            "zklocks.E041",
            "ZKLOCKS['java']: LAYOUT 'curator' differs from alias 'default''s 'kazoo' on the same HOSTS and "
            "NAMESPACE '/shop': their locks would not exclude each other.",
        ),
    ]
    assert all(m.hint for m in found)


def test_layout_names_agree():
    assert tuple(layout.LAYOUTS) == conf.LAYOUT_NAMES
    assert re.fullmatch(PROTECTED, layout.CURATOR.new_tag())

"""Sequence exhaustion (docs/design.md §13) on a real server whose snapshot has lock nodes a few creates short
of 2**31-1.

ZooKeeper 3.8 names a sequential child after its parent's child counter, a signed 32-bit int. Once the counter
reaches 2**31-1 it stays there: every later child gets the suffix 2147483647 again, and a create that is
pipelined behind another create of the same parent gets -2147483648, -2147483647, ... (which sort first). A
queue ordered by suffix is then ordered by guid. zklocks refuses to queue on such a node (SequenceExhausted)
and recycles it at its next empty moment; holds never overlap.
"""

import io
import threading
import time
from itertools import pairwise

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from tests.support.helpers import assert_no_overlap, raw_client, read_records, spawn_worker
from zklocks import SequenceExhausted, zk_lock, zk_semaphore
from zklocks.client.pools import close_all
from zklocks.names import join_path
from zklocks.recipes.layout import SEQUENCE_LIMIT
from zklocks.testing import ZkServer

NS = "/seq"
START = 2**31 - 1 - 3  # three creates before the counter sticks


@pytest.fixture
def near_limit():
    """A server of the test's own whose lock nodes "hot", "rw", "proc" and the semaphore "sem"'s mutex are
    three creates short of the limit; settings.ZKLOCKS points at it."""
    server = ZkServer(tick_time=100)
    nodes = {join_path(NS, name): START for name in ("hot", "rw", "proc", "kz")}
    nodes[join_path(NS, "sem") + "/__mutex__"] = START
    server.seed(nodes)
    try:
        server.start()
        cfg = {
            "HOSTS": server.hosts,
            "NAMESPACE": NS,
            "SESSION_TIMEOUT": 2.0,
            "CONNECT_TIMEOUT": 2.0,
            "REAP_INTERVAL": 0,
        }
        with override_settings(ZKLOCKS={"default": cfg}):
            yield server
            close_all()
    finally:
        server.cleanup()


def suffix(child: str) -> int:
    return int(child.rsplit("__", 1)[1])


def contend(handle, workers: int, seconds: float, *, kinds=None, hold: float = 0.004):
    """``workers`` threads take ``handle(i)`` again and again for ``seconds``; (holds, refusals, errors)."""
    holds, refusals, errors = [], [], []
    stop_at = time.monotonic() + seconds

    def run(i: int) -> None:
        while time.monotonic() < stop_at:
            try:
                with handle(i) as held:
                    start = time.monotonic()
                    token = held.token
                    time.sleep(hold)
                    end = time.monotonic()
                holds.append(
                    {
                        "start": start,
                        "end": end,
                        "token": token,
                        "worker": i,
                        "kind": kinds(i) if kinds else "exclusive",
                    }
                )
            except SequenceExhausted as exc:
                refusals.append(exc)
                time.sleep(0.005)
            except Exception as exc:  # anything else fails the test below
                errors.append(exc)
                return

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    assert not any(t.is_alive() for t in threads)
    return holds, refusals, errors


def keep_busy(name: str, seconds: float) -> threading.Thread:
    """Hold ``name`` for ``seconds`` in a thread of its own, so the lock node is never empty meanwhile."""
    ready = threading.Event()

    def run() -> None:
        with zk_lock(name, timeout=10):
            ready.set()
            time.sleep(seconds)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(10)
    return t


def assert_refusal_is_clear(refusals, name: str, path: str | None = None) -> None:
    assert refusals, "the exhausted lock node was never detected"
    exc = refusals[0]
    assert exc.name == name and exc.alias == "default" and exc.path == (path or join_path(NS, name))
    text = str(exc)
    assert repr(name) in text and "'default'" in text and f"zklocks_reap --alias default --recycle {name}" in text


def assert_recycled(server, name: str) -> None:
    """The node was deleted and re-created: its counter starts again from zero."""
    client = raw_client(server.hosts)
    try:
        path = join_path(NS, name)
        with zk_lock(name, timeout=5):
            (child,) = client.get_children(path)
            assert 0 <= suffix(child) < 10_000
    finally:
        client.stop()


def test_seeded_snapshot_puts_the_counter_where_asked(near_limit):
    client = raw_client(near_limit.hosts)
    try:
        path = join_path(NS, "kz")
        made = [client.create(f"{path}/n{i}__lock__", ephemeral=True, sequence=True) for i in range(5)]
        # Debian's 3.8.0: the counter sticks at 2**31-1 instead of wrapping.
        assert [suffix(p) for p in made] == [START, START + 1, START + 2, SEQUENCE_LIMIT, SEQUENCE_LIMIT]
    finally:
        client.stop()


def test_exclusive_lock_across_the_limit_never_has_two_holders(near_limit):
    keeper = keep_busy("hot", 1.0)
    holds, refusals, errors = contend(lambda i: zk_lock("hot", timeout=10), workers=6, seconds=4.0)
    keeper.join(5)
    assert not errors, errors
    assert_no_overlap(holds)
    assert_refusal_is_clear(refusals, "hot")
    assert len(holds) > 20  # the lock went on working after its node was recycled
    assert_recycled(near_limit, "hot")


def test_shared_lock_across_the_limit_keeps_writers_alone(near_limit):
    keeper = keep_busy("rw", 1.0)

    def kinds(i):
        return "shared" if i < 3 else "exclusive"

    holds, refusals, errors = contend(
        lambda i: zk_lock("rw", shared=kinds(i) == "shared", timeout=10), workers=6, seconds=4.0, kinds=kinds
    )
    keeper.join(5)
    assert not errors, errors
    writes = [h for h in holds if h["kind"] == "exclusive"]
    reads = [h for h in holds if h["kind"] == "shared"]
    assert writes and reads
    assert_no_overlap(writes)
    for w in writes:
        for r in reads:
            assert r["end"] <= w["start"] or w["end"] <= r["start"], f"reader {r} overlaps writer {w}"
    assert_refusal_is_clear(refusals, "rw")
    assert_recycled(near_limit, "rw")


def test_semaphore_of_one_across_the_limit_never_has_two_holders(near_limit):
    # The semaphore's leases are counted, not ordered; its mutex queue is what runs out.
    holds, refusals, errors = contend(lambda i: zk_semaphore("sem", 1, timeout=10), workers=6, seconds=3.0)
    assert not errors, errors
    for a, b in pairwise(sorted(holds, key=lambda h: h["start"])):
        assert a["end"] <= b["start"], f"overlapping leases: {a} and {b}"
    assert_refusal_is_clear(refusals, "sem", join_path(NS, "sem") + "/__mutex__")
    assert len(holds) > 20


def test_processes_across_the_limit_never_hold_together(near_limit, tmp_path):
    out = tmp_path / "holds.jsonl"
    keeper = keep_busy("proc", 1.5)
    procs = [
        spawn_worker(
            "hold",
            "--hosts",
            near_limit.hosts,
            "--namespace",
            NS,
            "--name",
            "proc",
            "--count",
            "25",
            "--hold",
            "0.005",
            "--out",
            str(out),
            "--record-exhausted",
        )
        for _ in range(3)
    ]
    try:
        assert [p.wait(90) for p in procs] == [0] * 3
    finally:
        for p in procs:
            p.kill()
    keeper.join(5)
    records = read_records(out)
    holds = [r for r in records if "start" in r]
    refused = [r for r in records if "exhausted" in r]
    assert len(holds) == 75
    assert_no_overlap(holds)
    assert refused and "'proc'" in refused[0]["exhausted"]
    assert_recycled(near_limit, "proc")


def test_reap_reports_a_worn_node_and_recycle_waits_for_its_next_empty_moment(near_limit):
    keeper = keep_busy("hot", 1.0)  # suffix START: still trusted, and the node is in use
    out = io.StringIO()
    call_command("zklocks_reap", stdout=out)
    # The other seeded nodes are empty: the sweep recycles them as it reaps them.
    assert "default: removed 4 empty lock node(s)" in out.getvalue()
    assert (
        f"lock node hot has used {START + 1} of 2147483647 sequence numbers; recycle it with --alias default "
        "--recycle hot"
    ) in out.getvalue()
    err = io.StringIO()
    with pytest.raises(CommandError, match="not recycled: 'hot'"):
        call_command("zklocks_reap", "--recycle", "hot", "--wait", "0.2", stdout=out, stderr=err)
    assert "was never empty within 0.2s" in err.getvalue()
    started = time.monotonic()
    out = io.StringIO()
    call_command("zklocks_reap", "--recycle", "hot", "--wait", "10", stdout=out)
    assert "default: recycled lock node /seq/hot of 'hot'" in out.getvalue()
    assert time.monotonic() - started < 5
    keeper.join(5)
    assert_recycled(near_limit, "hot")


def test_snapshot_never_shows_a_contender_past_the_limit_as_holder(near_limit):
    from zklocks.ops.read_model import read_namespace

    client = raw_client(near_limit.hosts)
    try:
        with zk_lock("kz", timeout=5) as lock:
            mine = lock._hold().contender.name
            # Creates the server prepares before the first is applied: ZooKeeper names some of them -2147483648, ...,
            # which sort before everyone. One transaction makes sure of it (pipelined creates did only when the
            # server had not applied the first by the time the next came in).
            transaction = client.transaction()
            for i in range(12):
                transaction.create(f"{join_path(NS, 'kz')}/{i:032x}__lock__", b"", ephemeral=True, sequence=True)
            made = [p.rsplit("/", 1)[1] for p in transaction.commit()]
            assert any(suffix(c) < 0 for c in made) and any(suffix(c) == SEQUENCE_LIMIT for c in made)
            (info,) = [i for i in read_namespace(client, NS) if i.name == "kz"]
            assert [h.node for h in info.holders] == [mine]
            assert {w.node for w in info.waiters} == set(made)
            assert [w.sequence for w in info.waiters[:2]] == [START + 1, START + 2]
    finally:
        client.stop()

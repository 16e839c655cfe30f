"""The read model: holders and waiters in queue order, kinds, foreign data, unreachable aliases, multiRead."""

import os
import socket
import time
import uuid

import pytest
from kazoo.recipe.lock import Lock

from benchmarks.inspect_snapshot import populate
from tests.support.helpers import raw_client, wait_until
from tests.support.threads import hold, lease, queue_behind
from zklocks import lock_path
from zklocks.client.multiread import fetch, multiread_support
from zklocks.client.pools import connections
from zklocks.ops import read_model
from zklocks.testing import free_port

pytestmark = pytest.mark.zk


def test_exclusive_holder_and_waiters_in_order():
    holder = hold("orders:42", "web-1", task=("t-123", "shop.tasks.charge"))
    waiters = []
    try:
        for i in range(3):
            waiters.append(queue_behind("orders:42", f"waiter-{i}", i + 1))
        info, error = read_model.lock_info("default", "orders:42")
        assert error is None
        assert info.kind == "exclusive" and info.name == "orders:42"
        assert len(info.holders) == 1
        h = info.holder
        assert (h.host, h.pid, h.thread) == (socket.gethostname(), os.getpid(), "web-1")
        assert (h.task_id, h.task_name) == ("t-123", "shop.tasks.charge")
        assert h.token == holder.token and h.mode == "exclusive"
        assert h.session_id == connections["default"].session().client.client_id[0]
        assert [w.thread for w in info.waiters] == ["waiter-0", "waiter-1", "waiter-2"]
        assert [w.sequence for w in info.waiters] == sorted(w.sequence for w in info.waiters)
        assert all(w.token > h.token for w in info.waiters)
        assert 0 <= info.held_for() < 30
        # The snapshot of every lock shows the same.
        snap = read_model.snapshot()
        assert not snap.errors
        assert snap.find("default", "orders:42").queue_length == 3
    finally:
        holder.release()
        for w in waiters:
            w.release()


def test_a_waiter_that_got_the_lock_shows_acquired_at():
    first = hold("handover", "first")
    second = queue_behind("handover", "second", 1)
    before = time.time()
    first.release()
    assert second.wait(10)
    try:
        info = wait_until(lambda: (i := read_model.lock_info("default", "handover")[0]) and i.holder.acquired_at and i)
        assert info.holder.thread == "second" and info.holder.acquired_at >= before - 1
        assert info.holder.queued_at < info.holder.acquired_at
        assert info.holder.token == second.token
    finally:
        second.release()


def _handed_over(name: str):
    """``name`` held by thread 'second', which waited for thread 'first' to release it."""
    first = hold(name, "first")
    second = queue_behind(name, "second", 1)
    first.release()
    assert second.wait(10)
    return second


def test_a_hold_whose_record_fails_costs_later_holds_nothing(monkeypatch):
    # One periodic look at young holds serves every hold of the process: a hold that fails it must not end it.
    from zklocks.handles import hold_registry

    real = hold_registry.record_acquired_at
    failed = []

    def fails_once(hold, waited, acquired_at):
        if not failed:
            failed.append(hold.name)
            raise RuntimeError("a record that cannot be written")
        real(hold, waited, acquired_at)

    monkeypatch.setattr(hold_registry, "record_acquired_at", fails_once)
    second = _handed_over("handover-a")
    bystander = hold("bystander", "bystander")  # younger: the next look is still due for it after the failure
    try:
        wait_until(lambda: failed)
    finally:
        bystander.release()
        second.release()
    assert failed == ["handover-a"]
    second = _handed_over("handover-b")
    try:
        assert wait_until(lambda: (i := read_model.lock_info("default", "handover-b")[0]) and i.holder.acquired_at)
    finally:
        second.release()


def test_shared_holders_are_the_readers_before_the_first_writer():
    r1 = hold("catalog", "reader-1", shared=True)
    r2 = hold("catalog", "reader-2", shared=True)
    writer = queue_behind("catalog", "writer", 1)
    r3 = queue_behind("catalog", "reader-3", 2, shared=True)
    try:
        info, _ = read_model.lock_info("default", "catalog")
        assert info.kind == "shared"
        assert [(h.thread, h.mode) for h in info.holders] == [("reader-1", "shared"), ("reader-2", "shared")]
        assert [(w.thread, w.mode) for w in info.waiters] == [("writer", "exclusive"), ("reader-3", "shared")]
    finally:
        for t in (r1, r2, writer, r3):
            t.release()


def test_semaphore_leases_and_waiters():
    a = lease("renderers", 2, "render-a")
    b = lease("renderers", 2, "render-b")
    assert a.wait(10) and b.wait(10)
    c = lease("renderers", 2, "render-c")
    try:
        info = wait_until(lambda: (i := read_model.lock_info("default", "renderers")[0]) and i.waiters and i)
        assert info.kind == "semaphore" and info.max_leases == 2
        assert sorted(h.thread for h in info.holders) == ["render-a", "render-b"]
        assert {h.mode for h in info.holders} == {"lease"}
        assert [w.thread for w in info.waiters] == ["render-c"]
        assert {h.token for h in info.holders} == {a.token, b.token}
    finally:
        for t in (a, b, c):
            t.release()


def test_foreign_data_is_shown_verbatim(zk_server):
    kz = raw_client(zk_server.hosts)
    try:
        kazoo_lock = Lock(kz, lock_path("interop"), identifier="worker-7 <b>kazoo</b>")
        assert kazoo_lock.acquire(timeout=5)
        info, _ = read_model.lock_info("default", "interop")
        assert info.holder.raw == "worker-7 <b>kazoo</b>"
        assert info.holder.host is None and info.holder.session_id == kz.client_id[0]
        assert info.holder.queued_at == info.holder.created_at  # from the server's ctime
        kazoo_lock.release()
    finally:
        kz.stop()
        kz.close()


def test_names_come_back_verbatim():
    name = "<script>alert(1)</script> ünïcode/../x"
    t = hold(name, "odd")
    try:
        info = read_model.snapshot().find("default", name)
        assert info is not None and info.name == name
        assert "/" not in info.node
    finally:
        t.release()


def test_unreachable_alias_is_an_error_naming_it(zklocks_settings):
    dead = f"127.0.0.1:{free_port()}"
    zklocks_settings(
        EXTRA_ALIASES={"archive": {"HOSTS": dead, "CONNECT_TIMEOUT": 1.0, "AUTH": [("digest", "reader:s3cret-pw")]}}
    )
    t = hold("alive", "alive")
    try:
        started = time.monotonic()
        snap = read_model.snapshot()
        took = time.monotonic() - started
        assert took < 1.0 + 2.0  # its CONNECT_TIMEOUT, with slack for a loaded machine
        errors = {a.alias: a.error for a in snap.aliases if a.error}
        assert list(errors) == ["archive"]
        assert "'archive'" in errors["archive"] and "s3cret" not in errors["archive"]
        assert snap.find("default", "alive") is not None
    finally:
        t.release()


def test_unknown_alias_is_an_error_not_an_exception():
    snap = read_model.snapshot(["nope"])
    assert snap.aliases[0].error and "'nope'" in snap.aliases[0].error


def test_multiread_and_single_reads_agree(zk_server):
    kz, reader = raw_client(zk_server.hosts), raw_client(zk_server.hosts)
    try:
        ns = f"/zklocks-test/bench-{uuid.uuid4().hex[:8]}"
        nodes = populate(kz, ns, 30)
        fast = read_model.read_namespace(reader, ns)
        assert multiread_support.get(reader) is True  # Debian's 3.8 server speaks multiRead
        multiread_support[reader] = False
        slow = read_model.read_namespace(reader, ns)
        assert [lock.to_dict(0) for lock in fast] == [lock.to_dict(0) for lock in slow]
        assert len(fast) == 30 and nodes == 150
        kinds = {lock.kind for lock in fast}
        assert kinds == {"exclusive", "shared", "semaphore"}
        assert sum(len(lock.holders) + len(lock.waiters) for lock in fast) == 30 * 4 - 3  # minus 3 __mutex__
    finally:
        for c in (kz, reader):
            c.stop()
            c.close()


def test_fetch_reports_missing_nodes_as_none(zk_server):
    kz = raw_client(zk_server.hosts)
    try:
        kz.ensure_path("/zklocks-test/fetch/a")
        kz.set("/zklocks-test/fetch/a", b"hello")
        ops = [
            ("data", "/zklocks-test/fetch/a"),
            ("data", "/zklocks-test/fetch/missing"),
            ("children", "/zklocks-test/fetch"),
            ("children", "/zklocks-test/nothing"),
        ]
        got = fetch(kz, ops, lambda r: r.get(timeout=5))
        assert got[0][0] == b"hello" and got[1] is None and got[2] == ["a"] and got[3] is None
    finally:
        kz.stop()
        kz.close()


def test_snapshot_to_dict_is_json_ready():
    import json

    t = hold("json-me", "j")
    try:
        data = read_model.snapshot().to_dict()
        text = json.dumps(data)
        assert '"json-me"' in text and data["aliases"][0]["locks"][0]["holders"][0]["session_id"].startswith("0x")
    finally:
        t.release()


def test_an_empty_lock_node_has_no_kind_and_no_holder():
    hold("emptied", "once").release()
    info, error = read_model.lock_info("default", "emptied")
    assert error is None and info is not None  # the node stays until the reaper's sweep
    assert info.kind is None and info.holders == [] and info.waiters == [] and info.held_for() is None


def test_concurrent_snapshots_of_an_unreachable_alias_stay_within_connect_timeout(zklocks_settings):
    import threading

    zklocks_settings(EXTRA_ALIASES={"gone": {"HOSTS": f"127.0.0.1:{free_port()}", "CONNECT_TIMEOUT": 1.0}})
    took = []

    def look():
        started = time.monotonic()
        snap = read_model.snapshot(["gone"])
        took.append((time.monotonic() - started, snap.aliases[0].error))

    threads = [threading.Thread(target=look) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(took) == 3
    for seconds, error in took:
        assert error and "'gone'" in error
        assert seconds < 1.0 + 0.5 + 1.0  # CONNECT_TIMEOUT, the bound's margin, slack for a loaded machine

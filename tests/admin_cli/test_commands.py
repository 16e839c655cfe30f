"""manage.py zklocks_status and zklocks_release against the suite's ZooKeeper."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.support.threads import hold
from zklocks import LockLost
from zklocks.ops import read_model
from zklocks.testing import free_port

pytestmark = pytest.mark.zk


def run(*args):
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_status_table(busy_orders):
    holder, _ = busy_orders
    text = run("zklocks_status")
    lines = text.splitlines()
    assert lines[0].split() == ["ALIAS", "NAME", "KIND", "HOLDER", "HELD", "FOR", "TOKEN", "QUEUE"]
    row = next(line for line in lines if "orders:7" in line)
    assert "web-1" in row and "shop.charge [task-abc]" in row and str(holder.token) in row and "exclusive" in row
    assert row.rstrip().endswith("2")
    queue = [line for line in lines if line.startswith("    ")]
    assert queue[0].strip().startswith("1.") and "waiter-a" in queue[0]
    assert queue[1].strip().startswith("2.") and "waiter-b" in queue[1]


def test_status_json(busy_orders):
    holder, _ = busy_orders
    data = json.loads(run("zklocks_status", "--json", "--alias", "default"))
    (alias,) = data["aliases"]
    assert alias["alias"] == "default" and alias["error"] is None
    (lock,) = alias["locks"]
    assert lock["name"] == "orders:7" and lock["holders"][0]["token"] == holder.token
    assert [w["thread"] for w in lock["waiters"]] == ["waiter-a", "waiter-b"]


def test_status_when_empty():
    assert run("zklocks_status").strip() == "no locks"


def test_status_unreachable_alias_exits_non_zero(zklocks_settings, busy_orders):
    zklocks_settings(EXTRA_ALIASES={"far": {"HOSTS": f"127.0.0.1:{free_port()}", "CONNECT_TIMEOUT": 1.0}})
    out = io.StringIO()
    with pytest.raises(CommandError) as err:
        call_command("zklocks_status", stdout=out)
    assert "'far'" in str(err.value) and err.value.returncode == 1
    assert "orders:7" in out.getvalue()  # the reachable alias is still shown


def test_status_escapes_terminal_control_characters():
    t = hold("ctl", "evil\x1b[2Jthread")
    try:
        text = run("zklocks_status")
        assert "\x1b" not in text and "evil\\x1b[2Jthread" in text
    finally:
        t.release()


def test_release_with_yes(busy_orders):
    holder, (first, _) = busy_orders
    text = run("zklocks_release", "orders:7", "--yes")
    assert "does not stop a live holder" in text and f"token {holder.token}" in text
    assert first.wait(10) and first.token > holder.token
    holder.release()
    assert isinstance(holder.lost, LockLost) and holder.lost.reason == "deleted"


def test_release_asks_and_respects_no(busy_orders, monkeypatch):
    holder, _ = busy_orders
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    with pytest.raises(CommandError, match="aborted"):
        run("zklocks_release", "orders:7")
    assert read_model.lock_info("default", "orders:7")[0].holder.token == holder.token


def test_release_without_a_terminal_aborts(busy_orders, monkeypatch):
    holder, _ = busy_orders

    def no_input(prompt):
        raise EOFError

    monkeypatch.setattr("builtins.input", no_input)
    with pytest.raises(CommandError, match="aborted"):
        run("zklocks_release", "orders:7")
    assert read_model.lock_info("default", "orders:7")[0].holder.token == holder.token


def test_release_asks_and_accepts_yes(busy_orders, monkeypatch):
    holder, (first, _) = busy_orders
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    run("zklocks_release", "orders:7")
    assert first.wait(10)


def test_release_errors():
    with pytest.raises(CommandError, match="no holder"):
        run("zklocks_release", "nobody-holds-this", "--yes")
    with pytest.raises(CommandError, match="unknown zklocks alias"):
        run("zklocks_release", "x", "--alias", "nope", "--yes")
    with pytest.raises(CommandError, match="empty"):
        run("zklocks_release", "", "--yes")


def test_release_of_a_semaphore_deletes_its_leases():
    from tests.support.helpers import wait_until
    from tests.support.threads import lease

    a, b = lease("pool", 2, "lease-a"), lease("pool", 2, "lease-b")
    assert a.wait(10) and b.wait(10)
    c = lease("pool", 2, "lease-c")
    try:
        wait_until(lambda: read_model.lock_info("default", "pool")[0].waiters)
        text = run("zklocks_release", "pool", "--yes")
        assert text.count("released: node") == 2
        assert c.wait(10) and c.token > max(a.token, b.token)
    finally:
        for t in (a, b, c):
            t.release()
    assert isinstance(a.lost, LockLost) and isinstance(b.lost, LockLost)


def test_status_reads_at_most_limit_locks_and_filters_by_name(kz):
    from zklocks import conf

    ns = conf.alias_config().namespace
    kz.ensure_path(ns)
    for i in range(5):
        kz.create(f"{ns}/batch-{i}")
    kz.create(f"{ns}/other-lock")
    text = run("zklocks_status", "--limit", "2", "--name", "batch-")
    rows = [line for line in text.splitlines() if "batch-" in line and not line.startswith("...")]
    assert [row.split()[1] for row in rows] == ["batch-0", "batch-1"], text
    assert "... and 3 more lock(s) not read" in text and "other-lock" not in text
    data = json.loads(run("zklocks_status", "--json", "--limit", "1"))
    assert data["not_read"] == 5 and sum(len(a["locks"]) for a in data["aliases"]) == 1
    text = run("zklocks_status", "--limit", "0")  # counted, not read: never "no locks"
    assert "no locks" not in text and "... and 6 more lock(s) not read" in text, text
    with pytest.raises(CommandError, match="--limit"):
        run("zklocks_status", "--limit", "-1")

"""Guarded by default (docs/security.md, "Guarded by default"): an alias without AUTH gets an identity derived
from SECRET_KEY, its nodes refuse writes and deletes by anyone else, ``AUTH="open"`` is the explicit way out (and
the deploy check warns about it), and a key rotated with its fallback keeps every lock and queue working while
``zklocks_check --fix-acls`` moves the nodes to the new key."""

from __future__ import annotations

import io
import os
import signal
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from tests.support.helpers import raw_client, run_zklocks_check, spawn_worker, wait_until, zk_settings
from zklocks import conf, zk_lock
from zklocks.checks import check_guarded_aliases
from zklocks.client.kazoo_options import digest_id
from zklocks.client.pools import close_all, connections
from zklocks.identity import derived_credential

OLD = "old-key-" + "o" * 50
NEW = "new-key-" + "n" * 50


@pytest.fixture(autouse=True)
def _close():
    yield
    close_all()


@pytest.fixture
def seer(zk_server):
    """A client of every identity here (ZooKeeper shows a digest id only to a client with ADMIN on the node)."""
    from django.conf import settings

    keys = (settings.SECRET_KEY, OLD, NEW)
    client = raw_client(zk_server.hosts, auth_data=[("digest", derived_credential(k)) for k in keys])
    yield client
    client.stop()
    client.close()


def key_id(secret_key: str) -> tuple[str, str]:
    return digest_id(derived_credential(secret_key))


def grants(kz, path: str) -> dict[tuple[str, str], int]:
    acl, _ = kz.get_acls(path)
    return {(entry.id.scheme, entry.id.id): entry.perms for entry in acl}


def test_an_alias_without_auth_refuses_writes_and_deletes_by_anyone_else(zk_server, seer):
    from django.conf import settings

    namespace = f"/zklocks-identity-{uuid.uuid4().hex[:10]}/locks"
    anonymous = raw_client(zk_server.hosts, anonymous=True)
    try:
        with zk_settings(zk_server.hosts, namespace):
            lock = zk_lock("orders:7")
            assert lock.acquire()
            node = lock._hold().contender.node
            mine = key_id(settings.SECRET_KEY)
            for path in (namespace.rsplit("/", 1)[0], namespace, f"{namespace}/orders:7", node):
                assert grants(seer, path) == {mine: Permissions.ALL, ("world", "anyone"): Permissions.READ}
            assert connections["default"].session().writes_guarded
            with pytest.raises(NoAuthError):
                anonymous.delete(node)
            with pytest.raises(NoAuthError):
                anonymous.set(f"{namespace}/orders:7", b"forged")
            with pytest.raises(NoAuthError):
                anonymous.create(f"{namespace}/orders:7/_c_forged-lock-", ephemeral=True, sequence=True)
            assert lock.is_held
            lock.ensure_held()
            # The command prints the credential for clients outside Django; with it, a client may write.
            out = io.StringIO()
            call_command("zklocks_credential", "--bare", stdout=out)
            assert out.getvalue().strip() == derived_credential(settings.SECRET_KEY)
            peer = raw_client(zk_server.hosts, anonymous=True, auth_data=[("digest", out.getvalue().strip())])
            try:
                peer.set(f"{namespace}/orders:7", b"")
            finally:
                peer.stop()
                peer.close()
            lock.release()
            assert check_guarded_aliases() == []
    finally:
        anonymous.stop()
        anonymous.close()


def test_auth_open_is_a_choice_the_deploy_check_warns_about(zk_server, kz):
    namespace = f"/zklocks-open-{uuid.uuid4().hex[:10]}"
    with zk_settings(zk_server.hosts, namespace, AUTH="open"):
        with zk_lock("open-one") as lock:
            assert grants(kz, lock._hold().contender.node) == {("world", "anyone"): Permissions.ALL}
            assert not connections["default"].session().writes_guarded
        (warning,) = check_guarded_aliases()
        assert warning.id == "zklocks.W007"
        assert 'AUTH is "open"' in warning.msg
        with pytest.raises(CommandError, match='AUTH is "open"'):
            call_command("zklocks_credential", stdout=io.StringIO())


def test_no_secret_key_and_no_auth_is_an_error_and_credentials_stay_out_of_reprs():
    alias = {"HOSTS": "127.0.0.1:2181"}
    configs, problems = conf.validate({"default": alias}, keys=())
    assert configs == {} and [p.id for p in problems] == ["zklocks.E019"]
    assert 'AUTH="open"' in problems[0].hint
    configs, problems = conf.validate({"default": {**alias, "AUTH": "open"}}, keys=())
    assert problems == [] and configs["default"].identity == "open" and configs["default"].auth == ()
    configs, problems = conf.validate({"default": alias}, keys=(NEW, OLD))
    cfg = configs["default"]
    assert problems == [] and cfg.identity == "derived"
    assert cfg.auth == (("digest", derived_credential(NEW)), ("digest", derived_credential(OLD)))
    password = derived_credential(NEW).split(":", 1)[1]
    assert password not in repr(cfg) and NEW not in password
    assert derived_credential(NEW) != derived_credential(OLD)
    # An explicit AUTH or ACL is the project's own choice: nothing is derived.
    configs, _ = conf.validate({"default": {**alias, "AUTH": [("digest", "app:pw")]}}, keys=(NEW,))
    assert configs["default"].identity == "configured" and configs["default"].auth == (("digest", "app:pw"),)


@pytest.mark.timeout(120)
def test_a_key_rotated_with_its_fallback_keeps_locks_and_queues_and_fix_acls_moves_the_nodes(zk_server, seer, tmp_path):
    namespace = f"/zklocks-rotation-{uuid.uuid4().hex[:10]}/locks"

    def on(secret_key: str, fallbacks: list[str]):
        return override_settings(SECRET_KEY=secret_key, SECRET_KEY_FALLBACKS=fallbacks)

    # Before: every process on the old key; it made the namespace and the lock node.
    with zk_settings(zk_server.hosts, namespace), on(OLD, []):
        with zk_lock("report"):
            pass
    assert set(grants(seer, f"{namespace}/report")) == {key_id(OLD), ("world", "anyone")}
    # The rolling deploy: a process still on the old key holds "report"; this one has the new key and the old as
    # its fallback, and queues behind it (under a lock node only the old identity may write).
    out = tmp_path / "old.jsonl"
    args = ["--hosts", zk_server.hosts, "--namespace", namespace, "--name", "report", "--out", str(out)]
    old_process = spawn_worker("hold-forever", "--session-timeout", "2", *args, secret_key=OLD)
    try:
        wait_until(lambda: out.exists() and out.read_text(), timeout=30)
        with zk_settings(zk_server.hosts, namespace), on(NEW, [OLD]):
            waiter = zk_lock("report")
            assert not waiter.acquire(timeout=0.5)  # the old process holds it
            os.killpg(old_process.pid, signal.SIGKILL)
            assert waiter.acquire(timeout=20)
            waiter.release()
            # A lock node made under the new key grants the old identity too: old processes can queue there.
            with zk_lock("fresh"):
                pass
            assert set(grants(seer, f"{namespace}/fresh")) == {key_id(NEW), key_id(OLD), ("world", "anyone")}
            follower = spawn_worker("hold", "--count", "3", *args[:4], "--name", "fresh", *args[6:], secret_key=OLD)
            assert follower.wait(60) == 0
            # The audit names the nodes of the old key only; --fix-acls gives them the alias's ACL.
            lines, failed = run_zklocks_check()
            assert failed is not None
            assert any(f"{namespace}/report: made under a SECRET_KEY" in line for line in lines), lines
            lines, failed = run_zklocks_check("--fix-acls")
            assert failed is None, "\n".join(lines)
            assert key_id(NEW) in grants(seer, f"{namespace}/report")
        # The fallback goes: every lock works on the new key alone; the old key's grants are left to fix.
        with zk_settings(zk_server.hosts, namespace), on(NEW, []):
            for name in ("report", "fresh"):
                with zk_lock(name):
                    pass
            lines, failed = run_zklocks_check()
            assert failed is not None and any("another password" in line for line in lines), lines
            lines, failed = run_zklocks_check("--fix-acls")
            assert failed is None, "\n".join(lines)
            for name in ("report", "fresh"):
                assert set(grants(seer, f"{namespace}/{name}")) == {key_id(NEW), ("world", "anyone")}
            lines, failed = run_zklocks_check()
            assert failed is None, "\n".join(lines)
    finally:
        if old_process.poll() is None:
            os.killpg(old_process.pid, signal.SIGKILL)
        old_process.wait(10)

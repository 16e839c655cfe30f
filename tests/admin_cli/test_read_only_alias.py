"""Read-only tools under a read-only identity (docs/security.md, "Read-only tools"): a READ_ONLY alias reads
what the project's aliases write under READ_ACL="auth" (the admin's read model, the health check,
zklocks_status, zklocks_check), takes no lock and releases none, and its identity is refused every write by
ZooKeeper itself."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from django.core.management import call_command
from django.test import override_settings
from kazoo.exceptions import NoAuthError

from tests.support.helpers import raw_client, run_zklocks_check
from zklocks import conf, zk_lock
from zklocks.checks import check_guarded_aliases
from zklocks.client.kazoo_options import build_acl
from zklocks.client.pools import close_all
from zklocks.exceptions import ZkConfigError
from zklocks.health import long_holds, probe
from zklocks.identity import READER, derived_credential
from zklocks.ops.force_release import force_release
from zklocks.ops.read_model import snapshot

KEY = "reader-test-key-" + "k" * 40


@pytest.fixture(autouse=True)
def _close():
    yield
    close_all()


def aliases(hosts: str, namespace: str, reader: dict | None = None):
    common = {"HOSTS": hosts, "NAMESPACE": namespace, "SESSION_TIMEOUT": 2.0, "CONNECT_TIMEOUT": 2.0}
    common |= {"REAP_INTERVAL": 0, "TICK_TIME": 0.2, "READ_ACL": "auth"}
    return override_settings(
        SECRET_KEY=KEY,
        ZKLOCKS={"default": common, "monitor": {**common, "READ_ONLY": True, **(reader or {})}},
    )


@pytest.mark.timeout(60)
def test_a_read_only_alias_sees_every_holder_and_can_change_nothing(zk_server):
    namespace = f"/zklocks-reader-{uuid.uuid4().hex[:10]}/locks"
    anonymous = raw_client(zk_server.hosts, anonymous=True)
    reader_credential = derived_credential(KEY, reader=True)
    reader = raw_client(zk_server.hosts, anonymous=True, auth_data=[("digest", reader_credential)])
    try:
        with aliases(zk_server.hosts, namespace):
            assert conf.alias_config("monitor").auth == (("digest", reader_credential),)
            assert reader_credential.startswith(f"{READER}:") and reader_credential != derived_credential(KEY)
            out = io.StringIO()
            call_command("zklocks_credential", "--reader", "--bare", stdout=out)
            assert out.getvalue().strip() == reader_credential
            with zk_lock("nightly-report", timeout=5) as held:
                node = held._hold().contender.node
                lock_node = node.rsplit("/", 1)[0]
                # READ_ACL="auth": nobody but the project's identities reads; the reader reads and does no more.
                with pytest.raises(NoAuthError):
                    anonymous.get(node)
                assert reader.get(node)[1].czxid == held.token
                for write in (
                    lambda: reader.set(node, b"forged"),
                    lambda: reader.delete(node),
                    lambda: reader.create(f"{lock_node}/_c_forged-lock-", ephemeral=True, sequence=True),
                    lambda: reader.set(lock_node, b"forged"),
                ):
                    with pytest.raises(NoAuthError):
                        write()
                # The admin's read model, the health check and zklocks_status, through the READ_ONLY alias.
                snap = snapshot(["monitor"])
                assert snap.errors == []
                (seen,) = [lock for lock in snap.locks if lock.name == "nightly-report"]
                assert [h.token for h in seen.holders] == [held.token]
                assert probe("monitor") is None
                assert long_holds(["monitor"], 0.0001) and "nightly-report" not in " ".join(
                    long_holds(["monitor"], 1e-4)
                )
                status = io.StringIO()
                call_command("zklocks_status", "--alias", "monitor", "--json", stdout=status)
                assert "nightly-report" in json.dumps(json.loads(status.getvalue()))
                # It takes no lock and releases none: a clear error, before any request.
                with pytest.raises(ZkConfigError, match="READ_ONLY"):
                    zk_lock("nightly-report", using="monitor", timeout=1).acquire()
                with pytest.raises(ZkConfigError, match="READ_ONLY"):
                    force_release("monitor", seen.node)
                assert held.is_held
                held.ensure_held()
                lines, failed = run_zklocks_check("--alias", "monitor", "--fix-acls")
                assert failed is None, lines
                assert any("READ_ONLY" in line for line in lines) and any("lock(s) read" in line for line in lines)
            assert check_guarded_aliases() == []  # a READ_ONLY alias creates nothing: no W007 for it
    finally:
        for client in (anonymous, reader):
            client.stop()
            client.close()


@pytest.mark.timeout(60)
def test_a_monitoring_host_without_the_key_reads_with_the_printed_credential(zk_server):
    namespace = f"/zklocks-reader-{uuid.uuid4().hex[:10]}/locks"
    credential = derived_credential(KEY, reader=True)
    with aliases(zk_server.hosts, namespace):
        with zk_lock("nightly-report", timeout=5):
            pass
    # Another host: no SECRET_KEY of the project, only the read-only credential in AUTH. It lists the lock
    # node (READ on the namespace and on the lock node is what that takes under READ_ACL="auth").
    monitor = {"HOSTS": zk_server.hosts, "NAMESPACE": namespace, "READ_ONLY": True, "READ_ACL": "auth"}
    with override_settings(
        SECRET_KEY="another-host-" + "h" * 40, ZKLOCKS={"default": {**monitor, "AUTH": [("digest", credential)]}}
    ):
        snap = snapshot(["default"])
        assert snap.errors == [] and [lock.name for lock in snap.locks] == ["nightly-report"]
        lines, failed = run_zklocks_check()
        assert failed is None and any("READ_ONLY: identity as configured" in line for line in lines), lines
    # With a wrong credential the namespace's nodes refuse even the read, and zklocks_check says why.
    with aliases(zk_server.hosts, namespace, {"AUTH": [("digest", f"{READER}:not-the-password")]}):
        lines, failed = run_zklocks_check("--alias", "monitor")
        assert failed is not None and any("cannot read" in line for line in lines), lines


def test_read_only_settings_and_the_acl_that_grants_the_reader():
    hosts = {"HOSTS": "127.0.0.1:2181"}
    _, problems = conf.validate({"default": {**hosts, "READ_ONLY": "yes"}}, keys=(KEY,))
    assert [p.id for p in problems] == ["zklocks.E022"]
    configs, problems = conf.validate(
        {
            "default": {**hosts, "READ_ACL": "auth"},
            "w": {**hosts, "NAMESPACE": "/w"},
            "r": {**hosts, "READ_ONLY": True},
        },
        keys=(KEY,),
    )
    assert problems == []
    reader_id = ("digest", derived_credential(KEY, reader=True).split(":")[0])
    acl = {(e.id.scheme, e.id.id.split(":")[0]): e.perms for e in build_acl(configs["default"])}
    assert acl[reader_id] == 1  # READ only, beside the project's identity's ALL
    world = {(e.id.scheme, e.id.id) for e in build_acl(configs["w"])}
    assert ("world", "anyone") in world  # READ_ACL="world": anyone reads already, no reader entry needed
    assert configs["r"].read_only and configs["r"].readers == ()
    assert configs["r"].auth == (("digest", derived_credential(KEY, reader=True)),)


def test_code_that_takes_locks_on_a_read_only_alias_is_named_by_a_check(monkeypatch):
    from zklocks.checks import check_settings

    monkeypatch.setattr(conf, "_declared_aliases", [("monitor", "view reports.views.export")])
    with aliases("127.0.0.1:2181", "/zklocks-reader-check"):
        messages = [m for m in check_settings() if m.id == "zklocks.W008"]
    assert len(messages) == 1 and "reports.views.export" in messages[0].msg and "'monitor'" in messages[0].msg


def test_a_read_only_alias_on_a_writable_aliass_namespace_is_listed_once():
    from zklocks.ops.read_model import distinct_aliases

    with aliases("127.0.0.1:2181", "/zklocks-reader-once"):
        assert distinct_aliases(["default", "monitor"]) == ["default"]  # the admin and zklocks_status list these
        assert distinct_aliases(["monitor"]) == ["monitor"]  # asked for by name, or alone on a monitoring host
    with aliases("127.0.0.1:2181", "/zklocks-reader-once", reader={"NAMESPACE": "/elsewhere"}):
        assert distinct_aliases(["default", "monitor"]) == ["default", "monitor"]
    with aliases("127.0.0.1:2181", "/zklocks-reader-once", reader={"HOSTS": "0x7f000001:2181"}):
        assert distinct_aliases(["default", "monitor"]) == ["default"]  # the same server, another spelling


def test_beat_on_a_read_only_alias_is_refused_by_a_check():
    from zklocks.checks import check_beat_settings

    with aliases("127.0.0.1:2181", "/zklocks-reader-beat"), override_settings(ZKLOCKS_BEAT={"USING": "monitor"}):
        messages = [m for m in check_beat_settings() if m.id == "zklocks.E031"]
    assert len(messages) == 1 and "READ_ONLY" in messages[0].msg, messages
    with aliases("127.0.0.1:2181", "/zklocks-reader-beat"), override_settings(ZKLOCKS_BEAT={"USING": "default"}):
        assert [m for m in check_beat_settings() if m.id == "zklocks.E031"] == []


@pytest.mark.timeout(60)
def test_nodes_that_do_not_grant_the_reader_are_reported_and_fixed(zk_server):
    """A lock node made before READ_ACL="auth" granted the read-only identity (or by a peer) hides its locks
    from a READ_ONLY alias: zklocks_check says so, --fix-acls grants it, and the READ_ONLY alias then reads."""
    from kazoo.security import make_digest_acl

    namespace = f"/zklocks-reader-{uuid.uuid4().hex[:10]}/locks"
    project = derived_credential(KEY)
    peer = raw_client(zk_server.hosts, anonymous=True, auth_data=[("digest", project)])
    try:
        with aliases(zk_server.hosts, namespace):
            with zk_lock("made-first", timeout=5):
                pass
            # A peer given the project's credential (zklocks_credential's kazoo snippet) makes a lock node.
            peer.create(f"{namespace}/made-by-a-peer", acl=[make_digest_acl(*project.split(":", 1), all=True)])
            lines, failed = run_zklocks_check("--alias", "monitor")
            assert failed is not None and any("could not read every lock" in line for line in lines), lines
            lines, failed = run_zklocks_check("--alias", "default")
            assert failed is not None and any("made-by-a-peer" in line and "read-only identity" in line
                                              for line in lines), lines  # fmt: skip
            lines, failed = run_zklocks_check("--alias", "default", "--fix-acls")
            assert failed is None, lines
            lines, failed = run_zklocks_check("--alias", "monitor")
            assert failed is None and any("2 lock(s) read" in line for line in lines), lines
            # Whatever path forgot to refuse first, the READ_ONLY alias's session sends no write.
            from zklocks.client.pools import connections

            session = connections["monitor"].session()
            client = session.client
            top = f"/zklocks-reader-{uuid.uuid4().hex[:10]}"  # below "/", open to all
            for write in (
                lambda: client.create(top, acl=session.acl, makepath=True),
                lambda: client.ensure_path(f"{top}/a/b"),
                lambda: client.set(namespace, b"x"),
                lambda: client.delete(f"{namespace}/made-first"),
                lambda: transaction_creating(client, top),
            ):
                with pytest.raises(ZkConfigError, match="READ_ONLY"):
                    write()
            assert client.exists(top) is None and client.exists(f"{namespace}/made-first") is not None
    finally:
        peer.stop()
        peer.close()


def transaction_creating(client, path: str):
    transaction = client.transaction()
    transaction.create(path)
    return transaction.commit()

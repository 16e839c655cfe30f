"""The ACL audit of `manage.py zklocks_check` and `check --deploy` against a real server: what ZooKeeper 3.8 hides,
holder nodes, a second password of the same user, the namespace's parents, and a limit that is never silent."""

import io
import uuid

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions, make_digest_acl, make_digest_acl_credential

from tests.admin_cli.test_zklocks_check import RIGHT, settings_for
from tests.support.helpers import raw_client, run_zklocks_check
from tests.support.threads import hold
from zklocks import zk_lock
from zklocks.client.pools import close_all
from zklocks.ops import acl_audit, read_model

WORLD_READ = ACL(Permissions.READ, Id("world", "anyone"))


@pytest.fixture
def ns():
    return f"/zklocks-audit-{uuid.uuid4().hex[:10]}/locks"


@pytest.fixture(autouse=True)
def _close():
    yield
    close_all()


@pytest.fixture
def owner(zk_server):
    client = raw_client(zk_server.hosts, auth_data=[RIGHT])
    yield client
    client.stop()


def deploy_ids():
    found = checks.run_checks(include_deployment_checks=True)
    return [m for m in found if m.id and m.id.startswith("zklocks.") and not m.is_silenced()]


def test_what_zookeeper_shows_of_digest_ids(zk_server, owner):
    """The facts the audit relies on (ZooKeeper 3.8): full digest ids to a client with ADMIN, "user:x" to one with
    READ only, NoAuth to one with neither."""
    base = f"/zklocks-facts-{uuid.uuid4().hex[:8]}"
    owner.create(base, acl=[make_digest_acl("app", "s3cret", all=True), WORLD_READ])
    owner.create(base + "/no-admin", acl=[make_digest_acl("app", "s3cret", read=True, write=True), WORLD_READ])
    owner.create(base + "/no-read", acl=[make_digest_acl("app", "other", all=True)])
    anonymous = raw_client(zk_server.hosts)
    try:
        full = make_digest_acl_credential("app", "s3cret")
        assert [e.id.id for e in owner.get_acls(base)[0]] == [full, "anyone"]
        assert [e.id.id for e in anonymous.get_acls(base)[0]] == ["app:x", "anyone"]
        assert [e.id.id for e in owner.get_acls(base + "/no-admin")[0]] == ["app:x", "anyone"]
        with pytest.raises(NoAuthError):
            owner.get_acls(base + "/no-read")
    finally:
        anonymous.stop()


def test_a_weakened_holder_node_is_reported(zk_server, ns, owner):
    with settings_for(zk_server.hosts, ns, AUTH=[RIGHT]):
        holder = hold("orders:1", "web-1")
        try:
            node = read_model.lock_info("default", "orders:1")[0].holder.node
            path = f"{ns}/orders:1/{node}"
            owner.set_acls(
                path, [make_digest_acl("app", "s3cret", all=True), ACL(Permissions.ALL, Id("world", "anyone"))]
            )
            lines, failed = run_zklocks_check()
            assert (
                f"default: FAILED {path}: weaker ACL than configured: world:anyone may WRITE, CREATE, DELETE, ADMIN"
                in lines
            )
            assert failed == "zklocks_check: 1 problem(s) found", lines
            (warning,) = deploy_ids()
            assert warning.id == "zklocks.W002" and path in warning.msg
        finally:
            holder.release()


def test_a_second_password_of_the_same_user_is_no_longer_hidden(zk_server, ns, owner):
    """A lock node whose ACL someone changed to two entries of user 'app', neither with ADMIN: ZooKeeper masks
    both, so reading cannot tell ours from the other; but the configured ACL gives this identity ADMIN, so the
    mask itself proves the node is not as configured."""
    with settings_for(zk_server.hosts, ns, AUTH=[RIGHT]):
        with zk_lock("orders:2"):
            pass
        rights = dict(read=True, write=True, create=True, delete=True)
        acl = [make_digest_acl("app", "s3cret", **rights), make_digest_acl("app", "intruder", **rights), WORLD_READ]
        owner.set_acls(f"{ns}/orders:2", acl)
        lines, failed = run_zklocks_check()
        assert failed == "zklocks_check: 1 problem(s) found", lines
        assert (
            f"default: FAILED {ns}/orders:2: this identity lacks the ADMIN the configured ACL gives it, so ZooKeeper "
            "shows the digest ids without their password hash (app:x): an entry of user 'app' may be another "
            "password's"
        ) in lines
        assert [m.id for m in deploy_ids()] == ["zklocks.W006"]


def test_an_acl_without_admin_says_what_zookeeper_hides_and_proves_by_writing(zk_server, ns):
    rights = dict(read=True, write=True, create=True, delete=True)
    acl = [make_digest_acl("app", "s3cret", **rights)]
    with settings_for(zk_server.hosts, ns, AUTH=[RIGHT], ACL=acl):
        with zk_lock("orders:3"):
            pass
        lines, failed = run_zklocks_check()
        assert failed is None, lines
        assert (
            "default: note ZooKeeper shows digest ids without their password hash ('user:x') to a client without "
            "ADMIN, which the configured ACL does not give: on 2 node(s) an entry of user 'app' cannot be told "
            f"from another password of that user by reading; the write probe below proves this identity's CREATE "
            f"and DELETE in {ns} only"
        ) in lines
        assert lines[-1] == f"default: ok created and deleted a node in {ns}"


def test_an_open_parent_lets_anyone_replace_the_namespace_and_the_audit_says_so(zk_server, ns, owner):
    parent = ns.rsplit("/", 1)[0]
    owner.create(parent)  # ZooKeeper's open ACL, as "/" has
    with settings_for(zk_server.hosts, ns, AUTH=[RIGHT]):
        with zk_lock("orders:4"):
            pass
        if owner.exists(f"{ns}/orders:4"):
            owner.delete(f"{ns}/orders:4", recursive=True)  # the reaper's work: an empty namespace
        lines, failed = run_zklocks_check()
        assert failed == "zklocks_check: 1 problem(s) found", lines
        assert (
            f"default: FAILED {parent}: a parent of the namespace: world:anyone may CREATE, DELETE, ADMIN" in lines[3]
        )
        assert [m.id for m in deploy_ids()] == ["zklocks.W005"]
        # What it warns of: an anonymous client deletes the namespace and makes it again, open to everyone.
        anonymous = raw_client(zk_server.hosts)
        try:
            anonymous.delete(ns)
            anonymous.create(ns)
            anonymous.create(f"{ns}/orders:4/squatter-lock-", ephemeral=True, sequence=True, makepath=True)
        finally:
            anonymous.stop()
    missing = f"/zklocks-audit-{uuid.uuid4().hex[:10]}/locks"
    with settings_for(zk_server.hosts, missing, AUTH=[RIGHT]):
        lines, failed = run_zklocks_check()
        assert (
            "default: FAILED /: a parent of the namespace: world:anyone may CREATE, ADMIN there: they can create "
            f"{missing} before this alias does, with an ACL of their own"
        ) in lines
        assert failed == "zklocks_check: 1 problem(s) found"


def test_a_truncated_audit_says_so_and_fails_check_deploy(zk_server, ns, monkeypatch):
    with settings_for(zk_server.hosts, ns, AUTH=[RIGHT]):
        for i in range(5):
            with zk_lock(f"orders:{i}"):
                pass
        client = raw_client(zk_server.hosts, auth_data=[RIGHT])
        try:
            client.set_acls(ns.rsplit("/", 1)[0], [make_digest_acl("app", "s3cret", all=True)])
        finally:
            client.stop()
        assert deploy_ids() == []
        monkeypatch.setattr(acl_audit, "DEPLOY_LIMIT", 3)
        (error,) = deploy_ids()
        assert error.id == "zklocks.E018" and error.level == checks.ERROR
        assert error.msg == (
            f"ZKLOCKS['default']: the ACL audit stopped after 3 node(s) below {ns}; 2 or more were not checked."
        )
        with pytest.raises(SystemCheckError, match="zklocks.E018"):
            call_command("check", "--deploy", stdout=io.StringIO(), stderr=io.StringIO())
        lines, failed = run_zklocks_check("--limit", "2")
        assert failed is None
        assert f"default: note the audit stopped at --limit 2: 3 or more node(s) below {ns} were not checked" in lines
        with pytest.raises(CommandError):
            call_command("zklocks_check", "--alias", "nope", stdout=io.StringIO())


def test_a_node_the_alias_may_not_read_is_a_finding_and_the_audit_goes_on(zk_server, ns, owner):
    """A lock node that denies this alias READ and ADMIN, made by a peer, beside a weakened one: both reported (before:
    the first one ended the whole audit with "ZooKeeper refused ... (NoAuth)")."""
    with settings_for(zk_server.hosts, ns, AUTH=[RIGHT]):
        holder = hold("orders:1", "web-1")
        try:
            owner.create(f"{ns}/walled", b"", acl=[make_digest_acl("someone", "else", all=True)])
            node = read_model.lock_info("default", "orders:1")[0].holder.node
            path = f"{ns}/orders:1/{node}"
            owner.set_acls(
                path, [make_digest_acl("app", "s3cret", all=True), ACL(Permissions.ALL, Id("world", "anyone"))]
            )
            lines, failed = run_zklocks_check()
            walled = [line for line in lines if f"{ns}/walled" in line]
            assert walled and "(NoAuth)" in walled[0], lines
            assert any(path in line and "weaker ACL" in line for line in lines), lines
            assert failed == "zklocks_check: 2 problem(s) found", lines
        finally:
            holder.release()

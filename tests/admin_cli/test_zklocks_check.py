"""``manage.py zklocks_check`` and the deploy system checks against a real server: connectivity, wrong
credentials, namespaces created earlier with weaker ACLs, and an unreachable ensemble (never a hang)."""

import os
import subprocess
import sys
import time
import uuid

import pytest
from django.core import checks
from django.core.checks import Error, Warning
from django.test import override_settings
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from tests.support.helpers import ROOT, raw_client, run_zklocks_check
from zklocks import zk_lock, zk_semaphore
from zklocks.client.pools import close_all
from zklocks.testing import free_port

RIGHT = ("digest", "app:s3cret")
WRONG = ("digest", "app:guess")


@pytest.fixture
def ns():
    return f"/zklocks-check-{uuid.uuid4().hex[:10]}/locks"  # own root: ancestors get the creator's ACL


@pytest.fixture(autouse=True)
def _close():
    yield
    close_all()


def settings_for(hosts, namespace, **extra):
    return override_settings(
        ZKLOCKS={
            "default": {
                "HOSTS": hosts,
                "NAMESPACE": namespace,
                "SESSION_TIMEOUT": 2.0,
                "CONNECT_TIMEOUT": 2.0,
                "REAP_INTERVAL": 0,
                **extra,
            }
        }
    )


def deploy_messages():
    """What `manage.py check --deploy` shows of zklocks (silenced ids left out, as the command does)."""
    found = checks.run_checks(include_deployment_checks=True)
    return [m for m in found if m.id and m.id.startswith("zklocks.") and not m.is_silenced()]


def make_locks(hosts, namespace, auth=None):
    """A namespace with two lock nodes and a semaphore, created by the given identity ("open": none, the default:
    the one derived from SECRET_KEY); then all released."""
    extra = {"AUTH": auth if auth == "open" else [auth]} if auth else {}
    with settings_for(hosts, namespace, **extra):
        with zk_lock("reports:daily"), zk_lock("a/b"), zk_semaphore("pool", 2):
            pass
        close_all()


PARENT_OPEN = (
    "a parent of the namespace: world:anyone may CREATE, DELETE, ADMIN there: they can delete {ns} whenever it has "
    "no lock nodes and create it again with an ACL of their own"
)


def parent_warning(parent, ns):
    return Warning(
        f"ZKLOCKS['default']: {parent} (above the namespace {ns}): world:anyone may CREATE, DELETE, ADMIN there: "
        f"they can delete {ns} whenever it has no lock nodes and create it again with an ACL of their own.",
        hint="Give that node an ACL that grants CREATE, DELETE and ADMIN only to this identity (setAcl), or choose "
        "a NAMESPACE below a node you own, e.g. one zklocks creates: ancestors it creates get the configured ACL.",
        id="zklocks.W005",
    )


def test_a_healthy_alias_passes(zk_server, ns):
    make_locks(zk_server.hosts, ns, auth=RIGHT)
    with settings_for(zk_server.hosts, ns, AUTH=[RIGHT]):
        lines, failed = run_zklocks_check()
        assert failed is None, lines
        assert lines == [
            f"default: ok connected to {zk_server.hosts} (session timeout 2s)",
            "default: ok tickTime 200 ms, session 2s on 1 server(s): the lease waits a whole tick for the leader "
            "(half the session, 1s)",
            "default: ok identity: digest user(s) 'app'",
            f"default: ok ACLs as configured on {ns} and 4 node(s) below it",  # 3 lock nodes and the mutex
            f"default: ok created and deleted a node in {ns}",
        ]
        assert deploy_messages() == []


def test_a_namespace_created_earlier_without_auth_is_reported_and_can_be_fixed(zk_server, ns):
    make_locks(zk_server.hosts, ns, auth="open")  # before AUTH was configured: ZooKeeper's open ACL
    with settings_for(zk_server.hosts, ns, AUTH=[RIGHT]):
        lines, failed = run_zklocks_check()
        assert failed == "zklocks_check: 6 problem(s) found"
        parent = ns.rsplit("/", 1)[0]
        assert lines[3] == f"default: FAILED {parent}: {PARENT_OPEN.format(ns=ns)}"
        weak = "weaker ACL than configured: world:anyone may WRITE, CREATE, DELETE, ADMIN"
        assert f"default: FAILED {ns}: {weak}" in lines
        assert f"default: FAILED {ns}/reports:daily: {weak}" in lines
        assert f"default: FAILED {ns}/pool/__mutex__: {weak}" in lines
        assert deploy_messages() == [
            Warning(
                f"ZKLOCKS['default']: {ns} has a weaker ACL than configured: world:anyone may WRITE, CREATE, DELETE, "
                "ADMIN (and 4 more node(s) below it).",
                hint="Nodes keep the ACL they were created with, e.g. before AUTH was set. Run "
                "`manage.py zklocks_check --fix-acls` to give them the configured ACL.",
                id="zklocks.W002",
            ),
            parent_warning(parent, ns),
        ]

        # --fix-acls fixes the nodes of the namespace, never a parent (other projects may share it).
        lines, failed = run_zklocks_check("--fix-acls")
        assert failed == "zklocks_check: 1 problem(s) found", lines
        assert f"default: ok fixed the ACL of {ns}" in lines
        assert f"default: FAILED {parent}: {PARENT_OPEN.format(ns=ns)}" in lines
        assert deploy_messages() == [parent_warning(parent, ns)]
        client = raw_client(zk_server.hosts, auth_data=[RIGHT])
        try:
            client.set_acls(parent, [make_digest_acl("app", "s3cret", all=True)])
        finally:
            client.stop()
        lines, failed = run_zklocks_check()
        assert failed is None, lines
        assert f"default: ok ACLs as configured on {ns} and 4 node(s) below it" in lines
        assert deploy_messages() == []
    client = raw_client(zk_server.hosts)
    try:
        with pytest.raises(NoAuthError):
            client.create(f"{ns}/reports:daily/intruder__lock__", ephemeral=True, sequence=True)
    finally:
        client.stop()


def test_a_wrong_password_is_caught_before_the_first_lock(zk_server, ns):
    make_locks(zk_server.hosts, ns, auth=RIGHT)
    with settings_for(zk_server.hosts, ns, AUTH=[WRONG]):
        lines, failed = run_zklocks_check()
        assert failed == "zklocks_check: 7 problem(s) found"
        # The parent's entry for app (made by the right password) is masked and has ADMIN: not this identity.
        assert (
            f"default: FAILED {ns.rsplit('/', 1)[0]}: a parent of the namespace: digest:app (another password) "
            f"may CREATE, DELETE, ADMIN there: they can delete {ns} whenever it has no lock nodes and create it again "
            "with an ACL of their own"
        ) in lines
        assert (
            f"default: FAILED {ns}: the configured identity may not CREATE, DELETE (every lock would fail with NoAuth)"
        ) in lines
        assert lines[-1] == (
            f"default: FAILED zklocks alias 'default': ZooKeeper refused to create and delete a node in {ns} "
            "(NoAuth). Check the AUTH credentials: ZooKeeper accepts any digest password at connect time."
        )
        assert not any("weaker" in line for line in lines)  # the right identity's entry is no weakness
        assert [m.id for m in deploy_messages()] == ["zklocks.E015", "zklocks.W005"]
        assert deploy_messages()[:1] == [
            Error(
                f"ZKLOCKS['default']: in {ns}, the configured identity may not CREATE, DELETE (and 4 more node(s)); "
                "every lock of this alias will fail with NoAuth.",
                hint="ZooKeeper accepts any digest password at connect time and refuses later: check the password in "
                "AUTH, or grant this identity CREATE, DELETE and READ on the namespace.",
                id="zklocks.E015",
            )
        ]


def test_unreachable_zookeeper_fails_fast_and_the_deploy_check_says_so(ns):
    hosts = f"127.0.0.1:{free_port()}"
    with settings_for(hosts, ns, CONNECT_TIMEOUT=1.0):
        started = time.monotonic()
        lines, failed = run_zklocks_check()
        assert time.monotonic() - started < 2.0
        assert failed == "zklocks_check: 1 problem(s) found"
        assert lines == [
            f"default: FAILED zklocks alias 'default': ZooKeeper at {hosts} is unavailable (no session "
            f"within CONNECT_TIMEOUT=1s: connection refused by {hosts})"
        ]
        started = time.monotonic()
        # Django keeps its checks in a set: their messages come in no fixed order
        assert sorted(deploy_messages(), key=lambda m: m.id) == [
            Warning(
                f"ZKLOCKS['default']: could not check the ACLs of {ns}: zklocks alias 'default': ZooKeeper at {hosts} "
                f"is unavailable (no session within CONNECT_TIMEOUT=1s: connection refused by {hosts})",
                hint="Run `manage.py zklocks_check` once ZooKeeper is reachable with these settings.",
                id="zklocks.W003",
            ),
        ]
        assert time.monotonic() - started < 2.0
        # The network check is a deploy check: a plain `manage.py check` (and runserver, migrate...) skips it.
        started = time.monotonic()
        assert [m for m in checks.run_checks() if m.id and m.id.startswith("zklocks.")] == []
        assert time.monotonic() - started < 0.5


def test_a_new_namespace_an_alias_without_auth_and_an_open_one(zk_server, ns):
    with settings_for(zk_server.hosts, ns, AUTH=[RIGHT]):
        lines, failed = run_zklocks_check()
        # ZooKeeper's "/" is open to everyone: anyone may make the namespace before the alias does.
        assert failed == "zklocks_check: 1 problem(s) found"
        assert lines[-2] == (
            "default: FAILED /: a parent of the namespace: world:anyone may CREATE, ADMIN there: they can create "
            f"{ns} before this alias does, with an ACL of their own"
        )
        assert lines[-1] == f"default: ok {ns} does not exist yet; it is created with the configured ACL on first use"
    derived = ns.replace("/locks", "-derived/locks")  # a root of its own: its parent gets the derived ACL
    make_locks(zk_server.hosts, derived)  # no AUTH: the identity derived from SECRET_KEY
    with settings_for(zk_server.hosts, derived):
        lines, failed = run_zklocks_check()
        assert failed is None, lines
        assert (
            "default: ok identity: derived from SECRET_KEY (manage.py zklocks_credential prints it for other "
            "clients)" in lines
        )
        assert deploy_messages() == []
    make_locks(zk_server.hosts, ns, auth="open")
    with settings_for(zk_server.hosts, ns, AUTH="open"):
        lines, failed = run_zklocks_check()
        assert failed is None
        assert 'default: note AUTH is "open": any client may create and delete lock nodes' in lines
        assert [m.id for m in deploy_messages()] == ["zklocks.W007"]  # an open alias, read from settings


def test_unknown_alias_is_a_failure(zk_server, ns):
    with settings_for(zk_server.hosts, ns):
        lines, failed = run_zklocks_check("--alias", "reports")
        assert failed == "zklocks_check: 1 problem(s) found"
        assert lines == ["reports: FAILED unknown zklocks alias 'reports' (configured: 'default')"]


@pytest.mark.parametrize("reachable", [True, False])
def test_exit_status_of_the_real_command(zk_server, ns, reachable):
    make_locks(zk_server.hosts, ns)  # by the identity the command's process derives from the same SECRET_KEY
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=str(ROOT),
        ZKLOCKS_HOSTS=zk_server.hosts if reachable else f"127.0.0.1:{free_port()}",
        ZKLOCKS_NAMESPACE=ns,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "django", "zklocks_check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    if reachable:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "default: ok connected to" in proc.stdout
    else:
        assert proc.returncode == 1
        assert "is unavailable" in proc.stdout and "CommandError: zklocks_check: 1 problem(s) found" in proc.stderr

"""Per-alias digest AUTH and ACLs on a real server: every node zklocks creates is closed to other identities,
a wrong password is a clear error naming the alias, and weaker ACLs left from earlier are reported."""

import time
import uuid

import pytest
from django.test import override_settings
from kazoo.exceptions import NoAuthError
from kazoo.recipe.lock import Lock as KazooLock
from kazoo.security import ACL, Id, Permissions, make_digest_acl

from tests.support.helpers import raw_client
from zklocks import LockNotAcquired, ZkAuthError, lock_path, zk_lock, zk_multi_lock, zk_semaphore
from zklocks.client.pools import close_all

RIGHT = ("digest", "app:s3cret")
WRONG = ("digest", "app:guess")
APP_ALL = make_digest_acl("app", "s3cret", all=True)
WORLD_READ = ACL(Permissions.READ, Id("world", "anyone"))


@pytest.fixture
def namespace():
    return f"/zklocks-sec/{uuid.uuid4().hex[:10]}"


@pytest.fixture
def secured(zk_server, namespace):
    """'default' has the right password, 'wrong' a wrong one, 'open' AUTH="open"; one namespace."""

    def alias(**extra):
        return {
            "HOSTS": zk_server.hosts,
            "NAMESPACE": namespace,
            "SESSION_TIMEOUT": 2.0,
            "CONNECT_TIMEOUT": 2.0,
            "REAP_INTERVAL": 0,
            **extra,
        }

    def configure(**default_extra):
        override = override_settings(
            ZKLOCKS={
                "default": alias(AUTH=[RIGHT], **default_extra),
                "wrong": alias(AUTH=[WRONG]),
                "open": alias(AUTH="open"),
            }
        )
        override.enable()
        overrides.append(override)

    overrides: list = []
    configure()
    yield configure
    for override in reversed(overrides):
        override.disable()
    close_all()


def anonymous(hosts, auth=None):
    return raw_client(hosts, auth_data=auth)


def acl_of(client, path):
    return sorted((a.perms, a.id.scheme, a.id.id) for a in client.get_acls(path)[0])


def as_set(acl):
    return sorted((a.perms, a.id.scheme, a.id.id) for a in acl)


def test_namespace_lock_nodes_contenders_and_semaphore_nodes_get_the_configured_acl(zk_server, secured, namespace):
    with (
        zk_lock("reports:daily") as lock,
        zk_lock("catalog", shared=True) as reader,
        zk_semaphore("renderers", 2) as lease,
    ):
        client = anonymous(zk_server.hosts, auth=[RIGHT])  # others see the digest masked as "app:x"
        try:
            paths = [
                namespace.rsplit("/", 1)[0],
                namespace,
                lock.path,
                lock_path("catalog"),
                lock_path("renderers"),
                f"{lock_path('renderers')}/__mutex__",
            ]
            paths += [
                p + "/" + c
                for p in (lock_path("reports:daily"), lock_path("catalog"), lock_path("renderers"))
                for c in client.get_children(p)
                if "__" in c and c != "__mutex__"
            ]
            assert len(paths) == 9
            for path in paths:
                assert acl_of(client, path) == as_set([APP_ALL, WORLD_READ]), path
        finally:
            client.stop()
        assert reader.token and lease.token


def test_read_acl_auth_hides_lock_nodes_from_other_identities(zk_server, secured):
    secured(READ_ACL="auth")
    with zk_lock("private"):
        client = anonymous(zk_server.hosts)
        owner = anonymous(zk_server.hosts, auth=[RIGHT])
        try:
            assert acl_of(owner, lock_path("private")) == as_set([APP_ALL])
            for read in (client.get_children, client.get, client.get_acls):
                with pytest.raises(NoAuthError):
                    read(lock_path("private"))
        finally:
            client.stop()
            owner.stop()


@pytest.mark.parametrize("who", ["anonymous", "wrong password"])
def test_a_client_without_the_credentials_cannot_enqueue_delete_or_change_lock_nodes(zk_server, secured, who):
    with zk_lock("guarded") as lock:
        token = lock.token
        node = f"{lock_path('guarded')}/{lock._hold().contender.name}"
        client = anonymous(zk_server.hosts, auth=[WRONG] if who == "wrong password" else None)
        try:
            attempts = {
                "enqueue a contender": lambda: client.create(
                    f"{lock_path('guarded')}/{uuid.uuid4().hex}__lock__", ephemeral=True, sequence=True
                ),
                "kazoo Lock on the same path": lambda: KazooLock(client, lock_path("guarded")).acquire(timeout=2),
                "delete the holder's node": lambda: client.delete(node),
                "overwrite the holder's data": lambda: client.set(node, b"mine"),
                "change the holder's ACL": lambda: client.set_acls(node, [ACL(Permissions.ALL, Id("world", "anyone"))]),
                "change the lock node's ACL": lambda: client.set_acls(lock_path("guarded"), [WORLD_READ]),
                "create another lock node": lambda: client.create(lock_path("intruder")),
                "change the namespace's data": lambda: client.set(lock_path("guarded").rsplit("/", 1)[0], b"x"),
            }
            for what, attempt in attempts.items():
                with pytest.raises(NoAuthError):  # noqa: PT012 the fail names the attempt that was let through
                    attempt()
                    pytest.fail(f"{who} could {what}")
            assert client.get_children(lock_path("guarded")) == [lock._hold().contender.name]  # READ is world's
        finally:
            client.stop()
        lock.ensure_held()
        assert lock.token == token
    # An empty lock node cannot be deleted by them either.
    client = anonymous(zk_server.hosts)
    try:
        with pytest.raises(NoAuthError):
            client.delete(lock_path("guarded"))
    finally:
        client.stop()


WRONG_PASSWORD_CASES = {
    "existing lock": lambda: zk_lock("taken", using="wrong").acquire(timeout=2),
    "new lock (creates its parent)": lambda: zk_lock("brand-new", using="wrong").acquire(timeout=2),
    "shared lock": lambda: zk_lock("taken", shared=True, using="wrong").acquire(timeout=2),
    "non-blocking acquire": lambda: zk_lock("taken", blocking=False, using="wrong").acquire(),
    "semaphore": lambda: zk_semaphore("pool", 3, using="wrong").acquire(timeout=2),
    "multi-lock": lambda: zk_multi_lock(["taken", "other"], using="wrong").acquire(timeout=2),
}


@pytest.mark.parametrize("case", list(WRONG_PASSWORD_CASES))
def test_a_wrong_password_is_a_clear_error_naming_the_alias(secured, case):
    with zk_lock("taken"):
        pass  # the namespace and lock node now exist with the right identity's ACL
    started = time.monotonic()
    with pytest.raises(ZkAuthError, match=r"alias 'wrong'.*NoAuth.*AUTH credentials") as info:
        WRONG_PASSWORD_CASES[case]()
    assert not isinstance(info.value, LockNotAcquired)  # refused rights are never mistaken for contention
    assert time.monotonic() - started < 2.0


def test_a_wrong_password_below_a_protected_parent_fails_in_the_path_creation(zk_server, secured, namespace):
    """The namespace does not exist yet, but its parent belongs to the right identity: the makepath /
    ensure_path creation of the namespace is refused, and that too is a ZkAuthError naming the alias."""
    with zk_lock("first"):
        pass
    deeper = f"{namespace}/team-b"
    with override_settings(
        ZKLOCKS={"default": {"HOSTS": zk_server.hosts, "NAMESPACE": deeper, "AUTH": [WRONG], "REAP_INTERVAL": 0}}
    ):
        with pytest.raises(ZkAuthError, match="alias 'default'"):
            zk_lock("x").acquire(timeout=2)
        with pytest.raises(ZkAuthError, match="alias 'default'"):
            zk_semaphore("s", 2).acquire(timeout=2)
    client = anonymous(zk_server.hosts)
    try:
        assert client.exists(deeper) is None
    finally:
        client.stop()


def test_a_rejected_auth_scheme_is_a_clear_error_naming_the_alias(zk_server, namespace):
    with override_settings(
        ZKLOCKS={
            "default": {
                "HOSTS": zk_server.hosts,
                "NAMESPACE": namespace,
                "AUTH": [("no-such-scheme", "x")],
                "CONNECT_TIMEOUT": 3.0,
            }
        }
    ):
        for _ in range(5):
            started = time.monotonic()
            with pytest.raises(ZkAuthError, match="alias 'default': ZooKeeper rejected the AUTH credentials"):
                zk_lock("x", timeout=None).acquire()
            assert time.monotonic() - started < 1.5  # neither a hang nor a wait for CONNECT_TIMEOUT
    close_all()


def test_holder_with_the_right_password_is_undisturbed_by_a_wrong_one(secured):
    with zk_lock("busy") as lock:
        with pytest.raises(ZkAuthError):
            zk_lock("busy", using="wrong").acquire(timeout=1)
        lock.ensure_held()
    with zk_lock("busy", blocking=False) as again:
        assert again.is_held

"""Bad input and misconfiguration, each against a real server where it matters: a clear, specific error (or the
safe behaviour), and nothing lost or left behind. Pure validation is in test_names.py and
admin_cli/test_system_checks.py."""

import threading
import time

import pytest
from django.core import checks
from django.test import override_settings

from tests.support.helpers import raw_client, tree
from tests.support.threads import in_thread
from zklocks import (
    LockNotAcquired,
    SemaphoreMismatch,
    ZkConfigError,
    ZkUnavailable,
    lock_path,
    zk_lock,
    zk_multi_lock,
    zk_rw_lock,
    zk_semaphore,
)
from zklocks.client.pools import close_all
from zklocks.conf import alias_config
from zklocks.names import decode_name, encode_name
from zklocks.testing import ZkEnsemble, free_port

TRICKY = [
    "..",
    ".",
    "/",
    "/leading",
    "trailing/",
    "a/b",
    "a/../../../escape",
    "a%2Fb",
    "a%252Fb",
    "%",
    "100%",
    "%41",
    "A",
    "a",
    "ünïcødé ✓",
    "日本語",
    "<script>alert(1)</script>",
    "a b",
    "zookeeper",
    "x" * 200,
]


# -- names --


@pytest.mark.zk
def test_tricky_names_each_get_their_own_node_inside_the_namespace_and_read_back_verbatim(zk_server):
    namespace = alias_config().namespace
    handles = [zk_lock(name, blocking=False) for name in TRICKY]
    try:
        # All held at once: had two names shared a node, the second non-blocking acquire would have failed.
        assert [h.acquire() for h in handles] == [True] * len(TRICKY)
        client = raw_client(zk_server.hosts)
        try:
            nodes = client.get_children(namespace)
            assert sorted(nodes) == sorted(encode_name(n) for n in TRICKY)
            assert sorted(decode_name(node) for node in nodes) == sorted(TRICKY)  # shown back verbatim
            for name, handle in zip(TRICKY, handles, strict=True):
                assert handle.path == lock_path(name) == f"{namespace}/{encode_name(name)}"
                assert len(client.get_children(handle.path)) == 1
            # Nothing deeper than lock node / contender, and nothing escaped next to the namespace.
            assert all(p.count("/") == namespace.count("/") + 2 for p in tree(client, namespace) if "__" in p)
            assert "escape" not in client.get_children(namespace.rsplit("/", 1)[0])
            assert client.exists("/escape") is None
        finally:
            client.stop()
        # Each name excludes only itself.
        assert in_thread(lambda: zk_lock("a/b", blocking=False).acquire()) is False
        assert in_thread(lambda: zk_lock("a%2Fb", blocking=False).acquire()) is False
    finally:
        for h in handles:
            h.release()


BAD_NAMES = [
    ("", "empty"),
    ("x" * 201, "201 characters long; the limit is 200"),
    ("a\nb", "control"),
    ("nul\x00", "control"),
    ("tab\t", "control"),
    ("del\x7f", "control"),
    ("c1\x85", "control"),
    (None, "must be a str"),
    (42, "must be a str"),
    (b"bytes", "must be a str"),
]


@pytest.mark.zk
@pytest.mark.parametrize("bad,reason", BAD_NAMES)
def test_invalid_names_are_refused_by_every_entry_point_before_touching_zookeeper(zk_server, bad, reason):
    uses = {
        "zk_lock": lambda: zk_lock(bad),
        "shared": lambda: zk_lock(bad, shared=True),
        "zk_semaphore": lambda: zk_semaphore(bad, 2),
        "zk_multi_lock": lambda: zk_multi_lock(["fine", bad] if isinstance(bad, str) else ["fine", (bad, "shared")]),
        "lock_path": lambda: lock_path(bad),
    }
    for what, use in uses.items():
        with pytest.raises(ValueError, match=reason):  # noqa: PT012 the fail names the use that did not raise
            use()
            pytest.fail(what)
    client = raw_client(zk_server.hosts)
    try:
        assert client.exists(alias_config().namespace) is None  # nothing was created
    finally:
        client.stop()


@pytest.mark.zk
def test_a_template_that_renders_an_invalid_name_fails_before_the_function_runs(zk_server):
    ran = []

    @zk_lock("job:{key}")
    def job(key):
        ran.append(key)

    with pytest.raises(ValueError, match="control character"):
        job("a\nb")
    with pytest.raises(ValueError, match="limit is 200"):
        job("k" * 200)
    assert ran == []
    job("ok")
    assert ran == ["ok"]


# -- templates --


@pytest.mark.zk
@pytest.mark.parametrize(
    "template,call,match",
    [
        (
            "order:{invoice_id.number}",
            lambda f: f(7),
            r"cannot fill lock name template 'order:\{invoice_id.number\}': 'int' object has no attribute 'number'",
        ),
        ("order:{invoice_id[3]}", lambda f: f([1]), "cannot fill lock name template .*: list index out of range"),
        ("order:{invoice_id:d}", lambda f: f("x"), "cannot fill lock name template 'order:{invoice_id:d}'"),
    ],
)
def test_templates_referencing_missing_arguments_name_the_function(template, call, match):
    ran = []

    @zk_lock(template)
    def ship(invoice_id):
        ran.append(invoice_id)

    with pytest.raises(ValueError, match=match) as info:
        call(ship)
    assert "ship" in str(info.value)
    assert ran == []


@pytest.mark.parametrize(
    "template,match",
    [
        (
            "order:{order_id}",
            r"ship: lock name template 'order:\{order_id\}' refers to 'order_id', which is not an "
            r"argument of .*ship\(invoice_id\)",
        ),
        ("order:{0}", r"ship: lock name template 'order:\{0\}' uses a positional field"),
        ("order:{}", r"ship: lock name template 'order:\{\}' uses a positional field"),
    ],
)
def test_template_typos_are_refused_when_decorating(template, match):
    with pytest.raises(ValueError, match=match):

        @zk_lock(template)
        def ship(invoice_id):
            pass

    @zk_lock("order:{anything}")  # **kwargs may bring any name: checked at call time only
    def flexible(**kwargs):
        pass


def test_a_malformed_template_is_refused_when_decorating():
    with pytest.raises(
        ValueError,
        match=r"ship: lock name template 'order:\{invoice_id' is malformed \(expected "
        r"'\}' before end of string\); write \{\{ and \}\} for literal braces",
    ):

        @zk_lock("order:{invoice_id")
        def ship(invoice_id):
            pass


@pytest.mark.zk
def test_calling_a_decorated_function_with_wrong_arguments_is_a_type_error_naming_it():
    @zk_lock("order:{invoice_id}")
    def ship(invoice_id):
        pass

    with pytest.raises(TypeError, match=r"ship: missing a required argument: 'invoice_id'"):
        ship()
    with pytest.raises(TypeError, match=r"ship: got an unexpected keyword argument 'nope'"):
        ship(1, nope=2)


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: zk_lock("a", timout=3),
            r"zk_lock\(\) got an unexpected keyword argument 'timout'; did you mean 'timeout'\?",
        ),
        (lambda: zk_lock("a", reentrant=False), r"zk_lock\(\) got an unexpected keyword argument 'reentrant'"),
        (lambda: zk_rw_lock("a", on_loss="cancel"), r"zk_rw_lock\(\) .* 'on_loss'; did you mean 'on_lost'\?"),
        (lambda: zk_semaphore("a", 2, lock_delay=1), r"zk_semaphore\(\) .* 'lock_delay' \(options: timeout, "),
        (lambda: zk_multi_lock(["a"], using_="x"), r"zk_multi_lock\(\) .* 'using_'; did you mean 'using'\?"),
        (lambda: zk_lock("a", timeout=-1), r"timeout must be None or a number >= 0, not -1"),
        (lambda: zk_multi_lock(["a"], on_lost="kill"), r"on_lost must be one of 'notify', 'cancel', not 'kill'"),
        (lambda: zk_semaphore("a", 2, max_hold=0), r"max_hold must be None or a number of seconds > 0, not 0"),
    ],
)
def test_every_handle_checks_its_options_alike_and_names_the_closest_one(make, match):
    # The options are declared once (handles/options.py): every kind refuses the same mistakes the same way.
    with pytest.raises((TypeError, ValueError), match=match):
        make()


# -- settings --


def ok(**extra):
    return {"HOSTS": "127.0.0.1:2181", "NAMESPACE": "/zk", **extra}


@pytest.mark.parametrize(
    "alias,match,check_id",
    [
        ({"HOSTS": ""}, "HOSTS '': is empty", "zklocks.E003"),
        ({"HOSTS": []}, r"HOSTS \[\]: is empty", "zklocks.E003"),
        ({"HOSTS": "zk1:99999"}, "port 99999 of 'zk1:99999' is not between 1 and 65535", "zklocks.E003"),
        ({"HOSTS": "zk1:0"}, "port 0 of 'zk1:0' is not between 1 and 65535", "zklocks.E003"),
        (ok(NAMESPACE="zklocks"), "NAMESPACE 'zklocks' is not a valid ZooKeeper path", "zklocks.E004"),
        (ok(NAMESPACE="/zklocks/"), "NAMESPACE '/zklocks/' is not a valid ZooKeeper path", "zklocks.E004"),
        (ok(SESSION_TIMEOUT="10"), "SESSION_TIMEOUT must be a positive number of seconds, not '10'", "zklocks.E005"),
        (ok(CONNECT_TIMEOUT=-1), "CONNECT_TIMEOUT must be a positive number of seconds, not -1", "zklocks.E006"),
        (ok(POOL_SIZE=True), "POOL_SIZE must be an integer >= 1, not True", "zklocks.E007"),
        (ok(POOL_SIZE=2.5), "POOL_SIZE must be an integer >= 1, not 2.5", "zklocks.E007"),
        (ok(AUTH=("digest", "u:p")), r"AUTH must be a list of \(scheme, credential\) pairs", "zklocks.E008"),
        (ok(AUTH=[("digest", "no-colon")]), "a digest credential must be 'user:password'", "zklocks.E008"),
        (ok(OPTIONS={"use_sll": True}), "OPTIONS use_sll: not a KazooClient argument", "zklocks.E013"),
        (ok(OPTIONS={"hosts": "x:1"}), "OPTIONS hosts: set by zklocks itself", "zklocks.E013"),
        (ok(ACL="open"), "ACL must be a non-empty list of kazoo.security.ACL", "zklocks.E014"),
        (ok(READ_ACL="everyone"), "READ_ACL must be 'world' or 'auth', not 'everyone'", "zklocks.E010"),
        (ok(REAP_INTERVAL=-5), "REAP_INTERVAL must be >= 0 seconds, not -5", "zklocks.E011"),
        ("127.0.0.1:2181", "must be a dict of options", "zklocks.E002"),
    ],
)
def test_a_misconfigured_alias_is_a_clear_error_on_use_and_a_system_check(alias, match, check_id):
    with override_settings(ZKLOCKS={"default": alias}):
        uses = [
            lambda: zk_lock("x").acquire(),
            lambda: zk_semaphore("x", 2).acquire(timeout=1),
            lambda: zk_multi_lock(["x", "y"]).acquire(),
            lambda: lock_path("x"),
        ]
        for use in uses:
            with pytest.raises(ZkConfigError, match=match) as info:
                use()
            assert "ZKLOCKS['default']" in str(info.value)
        found = [m for m in checks.run_checks() if m.id == check_id]
        assert len(found) == 1 and found[0].msg.startswith("ZKLOCKS['default']") and match.split(" ")[0] in found[0].msg


@pytest.mark.parametrize(
    "use",
    [
        lambda: zk_lock("x", using="reports").acquire(),
        lambda: zk_semaphore("x", 2, using="reports").acquire(),
        lambda: zk_multi_lock(["x"], using="reports").acquire(),
        lambda: lock_path("x", using="reports"),
    ],
)
def test_an_unknown_alias_is_a_clear_error(use):
    with override_settings(ZKLOCKS={"default": ok(), "other": ok()}):
        with pytest.raises(ZkConfigError, match=r"unknown zklocks alias 'reports' \(configured: 'default', 'other'\)"):
            use()


# -- ZooKeeper refusing, unreachable, slow --


def use_hosts(hosts, **extra):
    return override_settings(
        ZKLOCKS={
            "default": {
                "HOSTS": hosts,
                "NAMESPACE": "/bad-input",
                "SESSION_TIMEOUT": 2.0,
                "CONNECT_TIMEOUT": 1.0,
                "REAP_INTERVAL": 0,
                **extra,
            }
        }
    )


def unavailable_within(limit, **kwargs):
    started = time.monotonic()
    with pytest.raises(ZkUnavailable, match="zklocks alias 'default'") as info:
        zk_lock("x", **kwargs).acquire()
    assert time.monotonic() - started < limit
    assert not isinstance(info.value, LockNotAcquired)  # an outage is never contention
    close_all()
    return info.value


def test_a_host_that_does_not_resolve_is_unavailable_within_connect_timeout():
    with use_hosts("no-such-host.invalid:2181"):
        unavailable_within(2.5, timeout=None)


def test_an_ensemble_without_quorum_refuses_sessions_and_is_unavailable():
    ensemble = ZkEnsemble(3, tick_time=200)
    try:
        ensemble.start()
        ensemble.wait_quorum()
        survivor = ensemble.servers[0]
        for s in ensemble.servers[1:]:
            s.kill()
        # The survivor accepts TCP connections but serves no session without a quorum.
        with use_hosts(survivor.hosts):
            unavailable_within(2.5, timeout=None)
            unavailable_within(2.5, blocking=False)
    finally:
        ensemble.cleanup()


def test_a_frozen_server_is_unavailable_within_connect_timeout(own_zk):
    own_zk.pause()
    try:
        with use_hosts(own_zk.hosts):
            unavailable_within(2.0, timeout=None)
    finally:
        own_zk.resume()


def test_a_server_frozen_under_a_waiter_ends_its_wait_with_zkunavailable_not_a_hang(own_zk):
    with use_hosts(own_zk.hosts, POOL_SIZE=2):
        holder = zk_lock("slow")
        holder.acquire()
        outcome = {}

        def waiter():
            started = time.monotonic()
            try:
                zk_lock("slow", timeout=None).acquire()
                outcome["result"] = "acquired"
            except Exception as exc:  # noqa: BLE001
                outcome["result"] = exc
            outcome["took"] = time.monotonic() - started

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        own_zk.pause()
        paused = time.monotonic()
        gave_up = {}

        def watch_holder():  # when the holder's is_held turns False, measured apart from the waiter's end
            while time.monotonic() - paused < 5.0:
                if not holder.is_held:
                    gave_up["after"] = time.monotonic() - paused
                    return
                time.sleep(0.01)

        watcher = threading.Thread(target=watch_holder)
        watcher.start()
        try:
            t.join(2.0 + 2 * 1.0 + 3.0)  # session timeout + CONNECT_TIMEOUT twice + slack
            assert not t.is_alive(), "the waiter hangs on a frozen server"
            assert isinstance(outcome["result"], ZkUnavailable), outcome
            watcher.join(6.0)
            assert gave_up.get("after", 99.0) < 2.0 + 0.2, gave_up  # the holder gives up within its lease
        finally:
            own_zk.resume()
            holder.release()  # a failure here must not leave this thread holding 'slow' for the next tests
        holder.release()
    close_all()


def test_a_closed_port_is_unavailable_for_every_kind():
    with use_hosts(f"127.0.0.1:{free_port()}"):
        for use in (
            lambda: zk_semaphore("s", 2, timeout=5).acquire(),
            lambda: zk_multi_lock(["a", "b"]).acquire(),
            lambda: zk_lock("r", shared=True, blocking=False).acquire(),
        ):
            started = time.monotonic()
            with pytest.raises(ZkUnavailable):
                use()
            assert time.monotonic() - started < 2.0
        close_all()


# -- semaphores that disagree --


@pytest.mark.zk
def test_semaphore_disagreement_is_refused_and_leaves_nothing_behind(zk_server):
    with zk_semaphore("renderers", 3) as lease:
        for asked in (2, 4, 1):
            with pytest.raises(
                SemaphoreMismatch, match=f"max_leases=3 in ZooKeeper but this contender asked for {asked}"
            ):
                in_thread(lambda asked=asked: zk_semaphore("renderers", asked).acquire(timeout=2))
        client = raw_client(zk_server.hosts)
        try:
            kids = client.get_children(lock_path("renderers"))
            assert sorted(k.split("__")[1] for k in kids) == ["lease", "mutex"]
            assert client.get_children(f"{lock_path('renderers')}/__mutex__") == []
        finally:
            client.stop()
        assert lease.is_held
        assert in_thread(lambda: zk_semaphore("renderers", 3).acquire(timeout=2)) is True


@pytest.mark.zk
@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3", None])
def test_semaphore_max_leases_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="max_leases must be an integer >= 1"):
        zk_semaphore("s", bad)


@pytest.mark.zk
def test_a_name_is_either_a_lock_or_a_semaphore(zk_server):
    with zk_lock("kind"):
        with pytest.raises(SemaphoreMismatch, match="'kind' is in use as a plain lock, not a semaphore"):
            in_thread(lambda: zk_semaphore("kind", 2).acquire(timeout=2))
    with zk_semaphore("leases", 2):
        for shared in (False, True):
            with pytest.raises(SemaphoreMismatch, match="'leases' is in use as a semaphore, not a plain lock"):
                in_thread(lambda shared=shared: zk_lock("leases", shared=shared, timeout=2).acquire())
        client = raw_client(zk_server.hosts)
        try:
            assert not [k for k in client.get_children(lock_path("leases")) if "lock__" in k]  # refused node gone
        finally:
            client.stop()

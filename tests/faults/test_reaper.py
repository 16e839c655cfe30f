"""Empty lock nodes are reaped off the hot path: a background sweep and `manage.py zklocks_reap`."""

import io
import time

import pytest
from django.core.management import call_command

from tests.support.helpers import raw_client, wait_until
from zklocks import zk_lock, zk_semaphore
from zklocks.conf import alias_config

pytestmark = pytest.mark.zk


def lock_nodes(client):
    ns = alias_config().namespace
    return sorted(client.get_children(ns)) if client.exists(ns) else []


def test_management_command_reaps_empty_lock_nodes_but_not_busy_ones(zk_server):
    for i in range(5):
        with zk_lock(f"tmp:{i}"):
            pass
    with zk_semaphore("sem", 2):
        pass
    client = raw_client(zk_server.hosts)
    try:
        wait_until(lambda: len(lock_nodes(client)) == 6, timeout=3)
        with zk_lock("busy"):
            out = io.StringIO()
            call_command("zklocks_reap", stdout=out)
            assert "removed 6 empty lock node(s)" in out.getvalue()
            assert lock_nodes(client) == ["busy"]
        # The next acquire re-creates a reaped node; tokens still increase (czxid, not sequence numbers).
        with zk_lock("tmp:0") as again:
            assert again.token > 0
    finally:
        client.stop()


def test_background_sweep_keeps_the_namespace_bounded(zk_server, zklocks_settings):
    zklocks_settings(REAP_INTERVAL=0.3)
    client = raw_client(zk_server.hosts)
    try:
        for i in range(20):
            with zk_lock(f"churn:{i}"):
                pass
        wait_until(lambda: lock_nodes(client) == [], timeout=5)
        with zk_lock("held"):
            time.sleep(0.8)
            assert lock_nodes(client) == ["held"]
    finally:
        client.stop()


@pytest.mark.parametrize(
    "handle, layout",
    [
        (lambda name: zk_lock(name), "kazoo"),
        (lambda name: zk_semaphore(name, 2), "kazoo"),
        (lambda name: zk_semaphore(name, 2), "curator"),  # its leases live in internal children
    ],
    ids=["lock", "semaphore", "curator semaphore"],
)
def test_background_sweep_keeps_a_node_in_use_between_sweeps(zk_server, zklocks_settings, handle, layout):
    # Deleting a node between two acquires costs the next one a write and two round trips to re-create it: the
    # sweep deletes only nodes that saw no contender since the previous sweep.
    zklocks_settings(REAP_INTERVAL=1.0, LAYOUT=layout)
    client = raw_client(zk_server.hosts)
    try:
        for name in ("hot", "cold"):
            with handle(name):
                pass
        path = handle("hot").path
        first = client.exists(path).czxid
        ended = time.monotonic() + 4.5  # four sweeps or so; a use every 50 ms, 20 between two sweeps
        while time.monotonic() < ended:
            with handle("hot"):
                pass
            time.sleep(0.05)
        assert client.exists(path).czxid == first, "the node in use was deleted and re-created"
        assert lock_nodes(client) == ["hot"]  # the idle one went meanwhile
        wait_until(lambda: lock_nodes(client) == [], timeout=5)  # idle now: it goes too
    finally:
        client.stop()


def test_the_reaper_never_deletes_an_ephemeral_node(zk_server):
    """Another alias's contenders nested in this namespace (a misconfiguration) are ephemeral nodes without
    children: they look like empty lock nodes, and once were deleted as such (their holder lost its lock)."""
    from kazoo.exceptions import NodeExistsError

    with zk_lock("kept"):
        pass
    ns = alias_config().namespace
    client = raw_client(zk_server.hosts)
    try:
        nested = client.create(f"{ns}/contender-", b"", ephemeral=True, sequence=True)
        with pytest.raises(NodeExistsError):
            client.create(f"{ns}/kept", b"")
        inside = client.create(f"{ns}/kept/leases", b"", ephemeral=True)  # named like a semaphore's child
        call_command("zklocks_reap", stdout=io.StringIO())
        assert client.exists(nested) and client.exists(inside)
        client.delete(inside)
        call_command("zklocks_reap", stdout=io.StringIO())
        assert client.exists(nested) and not client.exists(f"{ns}/kept")  # the empty lock node went
    finally:
        client.stop()
        client.close()


def test_nested_namespaces_are_refused_when_a_session_would_start(zk_server, zklocks_settings, settings):
    """gunicorn and Celery run no system check: the pool refuses the inner alias of E042 itself (the outer one
    works on), unless zklocks.E042 is silenced."""
    from zklocks import ZkConfigError

    default = zklocks_settings()
    zklocks_settings(EXTRA_ALIASES={"inner": {**default, "NAMESPACE": default["NAMESPACE"] + "/inner"}})
    with pytest.raises(ZkConfigError, match=r"zklocks\.E042"):
        zk_lock("a", using="inner").acquire()
    with zk_lock("a"):
        pass
    settings.SILENCED_SYSTEM_CHECKS = ["zklocks.E042"]
    with zk_lock("b", using="inner"):
        pass


def test_the_reaper_keeps_a_lock_delay_it_would_erase(zk_server, zklocks_settings):
    """An empty lock node with the guard of a holder that left without releasing (force-released, nobody queued):
    deleting it would let the next newcomer hold at once. The sweep turns the guard into a delay record instead,
    and deletes the node once that delay is long over."""
    from zklocks.ops.force_release import force_release

    holder = zk_lock("guarded", lock_delay=2.0)
    assert holder.acquire()
    force_release("default", "guarded")
    holder.release()
    call_command("zklocks_reap", stdout=io.StringIO())
    client = raw_client(zk_server.hosts)
    try:
        ns = alias_config().namespace
        assert b'"lock_delay"' in client.get(f"{ns}/guarded")[0]  # kept, as a delay record
        started = time.monotonic()
        with zk_lock("guarded", lock_delay=2.0, timeout=10):
            assert time.monotonic() - started >= 1.5  # the newcomer waited the delay out
    finally:
        client.stop()
        client.close()


def test_nested_namespaces_are_refused_whatever_name_the_hosts_go_by(zk_server, zklocks_settings):
    """The outer alias names the server by its address, the inner one by a host name that resolves to it: the
    pool still refuses the inner alias (the hosts are compared as the resolver answers, not as spelled)."""
    import socket

    from zklocks import ZkConfigError
    from zklocks.client.pools import connections

    name = socket.gethostname()
    try:
        address = socket.getaddrinfo(name, None)[0][4][0]
    except OSError:  # a machine whose own name does not resolve: the address in another spelling instead
        name, address = "0x7f000001", "127.0.0.1"
    port = zk_server.hosts.rsplit(":", 1)[1]
    default = zklocks_settings(HOSTS=f"{address}:{port}")
    inner = {**default, "HOSTS": f"{name.upper()}:{port}", "NAMESPACE": default["NAMESPACE"] + "/inner"}
    zklocks_settings(HOSTS=f"{address}:{port}", EXTRA_ALIASES={"inner": inner})
    with pytest.raises(ZkConfigError, match=r"zklocks\.E042"):
        connections["inner"]

"""The hot path's request budget and the asynchronous release, counted on the server (not timed)."""

import subprocess
import sys
import threading
import time

import pytest
from django.test import override_settings

from tests.support.helpers import ROOT, raw_client, wait_until
from tests.support.threads import HeldInThread
from zklocks import lock_path, zk_lock
from zklocks.client.kazoo_adapter.calls import Outcome, delete_request, send
from zklocks.testing import ZkServer, mntr
from zklocks.testing.proxy import TcpProxy

pytestmark = pytest.mark.zk


@pytest.fixture(scope="module")
def quiet_zk():
    server = ZkServer(tick_time=2000)  # long session timeouts: few pings to blur the counts
    server.start()
    yield server
    server.cleanup()


def quiet_alias(server, namespace: str, auth: list):
    """The default alias on ``server``: long sessions, no reaper, ``auth`` (an open alias when empty)."""
    return override_settings(
        ZKLOCKS={
            "default": {
                "HOSTS": server.hosts,
                "NAMESPACE": namespace,
                "SESSION_TIMEOUT": 30.0,
                "REAP_INTERVAL": 0,
                "AUTH": auth,
            }
        }
    )


def packets(server):
    return int(mntr(server.port)["zk_packets_received"])


def per_call(server, fn, n=200):
    fn()
    time.sleep(0.1)
    before = packets(server)
    for _ in range(n):
        fn()
    time.sleep(0.2)
    return (packets(server) - before - 1) / n  # -1: the mntr request itself


@pytest.mark.parametrize(
    ("auth", "budget"),
    [
        # create + get_children (pipelined) + delete: only our identity may touch our nodes
        ([("digest", "app:fast")], 3.05),
        # ... + the holder's watch on its own node from the grant: anyone may write or delete it
        ([], 4.05),
    ],
    ids=["auth", "open"],
)
def test_uncontended_cycle_costs_three_requests_or_four_without_auth(quiet_zk, auth, budget):
    with quiet_alias(quiet_zk, f"/fast-{len(auth)}", auth):
        lock = zk_lock("hot")

        def cycle():
            lock.acquire()
            lock.release()

        assert per_call(quiet_zk, cycle) <= budget


def test_uncontended_cycle_leaves_kazoo_callback_threads_idle(quiet_zk):
    """The create, the check and the release are answered by the connection thread: kazoo's callback threads get
    no work from a cycle on a guarded alias (each hop there is a thread wake-up per cycle). An open alias's watch on
    the holder's own node goes through kazoo's methods: that hook bought nothing measurable (docs/benchmarks.md,
    "Speed-only hooks")."""
    auth = [("digest", "app:fast")]
    from zklocks.client.pools import connections

    with quiet_alias(quiet_zk, f"/idle-{len(auth)}", auth):

        def cycle():
            with zk_lock("quiet") as lock:
                lock.ensure_held()

        cycle()
        handler = connections["default"].session().client.handler
        queued = []
        for queue_ in (handler.callback_queue, handler.completion_queue):
            put = queue_.put

            def counting_put(item, *args, _put=put, **kwargs):
                queued.append(item)
                return _put(item, *args, **kwargs)

            queue_.put = counting_put
        try:
            for _ in range(50):
                cycle()
        finally:
            for queue_ in (handler.callback_queue, handler.completion_queue):
                del queue_.put
        assert len(queued) <= 2, f"{len(queued)} callbacks for 50 cycles"  # a lease renewal's, at most


def test_failed_try_lock_on_a_busy_lock_costs_one_round_trip(quiet_zk):
    """A try-lock that found the lock busy settles the next try with a sync and a listing, pipelined: one round
    trip, two requests (the sync keeps a server cut off from the quorum from answering from its stale copy)."""
    with override_settings(
        ZKLOCKS={
            "default": {"HOSTS": quiet_zk.hosts, "NAMESPACE": "/fast", "SESSION_TIMEOUT": 30.0, "REAP_INTERVAL": 0}
        }
    ):
        other = raw_client(quiet_zk.hosts)
        from kazoo.recipe.lock import Lock

        held = Lock(other, lock_path("busy"))
        held.acquire()
        try:
            attempt = zk_lock("busy", blocking=False)
            assert attempt.acquire() is False  # the first failure learns that the lock is busy
            assert per_call(quiet_zk, lambda: attempt.acquire()) <= 2.05
            held.release()
            assert attempt.acquire() is True  # a free lock is still taken at once
            attempt.release(wait=True)
        finally:
            other.stop()


def test_release_wait_true_means_the_node_is_gone_for_everyone(zk_server):
    client = raw_client(zk_server.hosts)
    try:
        for _ in range(20):
            lock = zk_lock("waited")
            lock.acquire()
            lock.release(wait=True)
            assert client.get_children(lock.path) == []
    finally:
        client.stop()


def test_asynchronous_release_is_seen_by_our_next_request_and_soon_by_others(zk_server):
    client = raw_client(zk_server.hosts)
    try:
        lock = zk_lock("async-release")
        tokens = []
        for _ in range(20):
            lock.acquire()
            tokens.append(lock.token)
            lock.release()
        assert tokens == sorted(set(tokens))  # each acquire saw the previous node gone (FIFO per session)
        wait_until(lambda: client.get_children(lock.path) == [], timeout=2)
    finally:
        client.stop()


@pytest.mark.parametrize("hold", [False, True])
def test_normal_exit_leaves_no_node_for_the_session_timeout(zk_server, hold):
    ns = "/exit-test"
    script = (
        "from tests.support.workers import setup\n"
        f"setup({zk_server.hosts!r}, {ns!r}, 30.0)\n"
        "from zklocks import zk_lock\n"
        "lock = zk_lock('leaving')\n"
        "lock.acquire()\n" + ("" if hold else "lock.release()\n")
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 0
    client = raw_client(zk_server.hosts)
    try:
        # Gone at once (session closed at exit), not after the 30 s session timeout.
        assert client.get_children(f"{ns}/leaving") == []
    finally:
        client.stop()


def acquire_after_waiting(handle) -> None:
    """Acquire ``handle`` behind a holder in another thread, which lets go 0.2 s later: a holder that waited marks
    its release for the waiter behind it (recipes/node.py, _send_delete)."""
    ahead = HeldInThread(zk_lock(handle.name))
    timer = threading.Timer(0.2, ahead.release)
    timer.start()
    assert handle.acquire(timeout=10)
    timer.join(30)


def test_a_contended_release_on_a_cut_link_returns_at_once_and_the_node_goes_after(zk_server):
    # The link stops carrying anything, with the session still taken for connected: the release (of a hold a waiter
    # would watch: a marked release) never waits for an answer, and the node goes once the link is back.
    link = TcpProxy("127.0.0.1", zk_server.port).start()
    client = raw_client(zk_server.hosts)
    try:
        with override_settings(ZKLOCKS={"default": {"HOSTS": link.hosts, "SESSION_TIMEOUT": 30.0}}):
            handle = zk_lock("prompt-cut")
            acquire_after_waiting(handle)
            link.partition()
            started = time.monotonic()
            handle.release()
            assert time.monotonic() - started < 1.0
            link.heal()
            assert wait_until(lambda: client.get_children(handle.path) == [], timeout=20)
    finally:
        client.stop()
        link.stop()


def test_an_outcome_handler_that_raises_is_logged_by_name_and_the_connection_goes_on(zk_server, caplog):
    """calls.Outcome guards kazoo's connection thread: an exception there would end kazoo's loop and the client."""
    client = raw_client(zk_server.hosts)
    answered = threading.Event()

    def broken_handler(value):
        answered.set()
        raise RuntimeError("handler bug")

    try:
        path = client.create("/outcome-guard-", b"", sequence=True)
        send(client, delete_request(path), Outcome(broken_handler, broken_handler))
        assert answered.wait(5)
        assert client.exists(path) is None  # the client still answers, on the same session
        assert client.connected
        assert any("broken_handler" in r.getMessage() and r.exc_info for r in caplog.records), caplog.text
    finally:
        client.stop()

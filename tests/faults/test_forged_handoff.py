"""No forged handoff: a waiter holds only on evidence that the releasing holder alone can produce, and a holder
whose node is written or deleted by anyone else reports LockLost at once (docs/security.md)."""

import threading
import time

import pytest
from django.conf import settings
from kazoo.security import ACL, Id, Permissions, make_digest_acl

from tests.support.helpers import raw_client, wait_until, zk_settings
from tests.support.threads import HeldInThread
from zklocks import LockLost, zk_lock, zk_semaphore
from zklocks.client.pools import close_all

pytestmark = [pytest.mark.zk, pytest.mark.timeout(60)]

CREDENTIAL = "app:forge-proof"


@pytest.fixture(params=["open", "auth", "ip"])
def config(request, zk_server):
    """open: AUTH="open". auth: a digest identity of the alias's own. ip: the same, plus an ACL entry that lets the
    loopback range write, which a forger on this host is in: not guarded (kazoo_options.outside_writers)."""
    extra: dict = {"AUTH": [("digest", CREDENTIAL)]} if request.param != "open" else {"AUTH": "open"}
    if request.param == "ip":
        loopback = ACL(Permissions.ALL, Id("ip", "127.0.0.0/8"))
        extra["ACL"] = [make_digest_acl(*CREDENTIAL.split(":"), all=True), loopback]
    with zk_settings(zk_server.hosts, f"/forged-{request.param}", SESSION_TIMEOUT=4.0, **extra):
        try:
            yield request.param
        finally:
            close_all()


def holder_node(client, lock) -> str:
    children = sorted(client.get_children(lock.path), key=lambda c: c[-10:])
    return f"{lock.path}/{children[0]}"


def test_a_forged_write_hands_nothing_to_the_waiter(config, zk_server):
    holder_lock = zk_lock("forge-write")
    holder = HeldInThread(holder_lock)
    assert holder.acquired
    waiter = HeldInThread(zk_lock("forge-write", timeout=20), wait_for_acquire=False)
    forger = raw_client(zk_server.hosts, anonymous=True)
    try:
        assert wait_until(lambda: len(forger.get_children(holder_lock.path)) == 2, timeout=5)
        node = holder_node(forger, holder_lock)
        forged_at = time.monotonic()
        try:
            forger.set(node, b"")  # what a release mark looks like to a watch: one data change
            refused = False
        except Exception:  # NoAuth under AUTH
            refused = True
        assert refused == (config == "auth")
        if not refused:
            # The holder hears of the foreign write at once, and says so.
            assert wait_until(lambda: not holder_lock.is_held, timeout=0.5)
            print(f"holder told {time.monotonic() - forged_at:.3f}s after the forged write")
        time.sleep(1.0)
        assert waiter.acquired is None, "the waiter took the lock on a forged write"
        assert holder_lock.is_held == refused
        holder.release()
        if not refused:
            assert isinstance(holder.lost, LockLost) and "changed" in str(holder.lost), holder.lost
        assert waiter.wait(10), waiter.error  # the real release hands over
    finally:
        waiter.release()
        forger.stop()
        forger.close()


def test_a_forged_delete_is_lost_by_the_holder_at_once(config, zk_server):
    holder_lock = zk_lock("forge-delete")
    holder = HeldInThread(holder_lock)
    assert holder.acquired
    forger = raw_client(zk_server.hosts, anonymous=True)
    try:
        node = holder_node(forger, holder_lock)
        forged_at = time.monotonic()
        try:
            forger.delete(node)
            refused = False
        except Exception:  # NoAuth under AUTH: only the identity may delete in the lock node
            refused = True
        assert refused == (config == "auth")
        if refused:
            time.sleep(0.5)
            assert holder_lock.is_held
        else:
            assert wait_until(lambda: not holder_lock.is_held, timeout=0.5)
            print(f"holder told {time.monotonic() - forged_at:.3f}s after the forged delete")
    finally:
        holder.release()
        forger.stop()
        forger.close()


def test_an_interop_contenders_open_node_proves_nothing(zk_server):
    """A guarded alias (the default identity), and a kazoo ``Lock`` contender of a peer that has the credential
    but leaves kazoo's open default ACL on its node. An anonymous forger writes that node a release mark, the
    contender then gives up: the zklocks waiter behind it must not take the lock from the holder ahead."""
    from kazoo.exceptions import LockTimeout
    from kazoo.recipe.lock import Lock

    from tests.support.helpers import project_auth
    from zklocks.recipes import node_data

    with zk_settings(zk_server.hosts, "/forged-interop", SESSION_TIMEOUT=4.0):
        # First a handoff between two threads of this process: the waiters' own session is then proven guarded,
        # which must vouch for no other session's node.
        first = HeldInThread(zk_lock("interop-warm-up"))
        second = HeldInThread(zk_lock("interop-warm-up", timeout=20), wait_for_acquire=False)
        time.sleep(0.3)
        first.release()
        assert second.wait(10), second.error
        second.release()
        holder_lock = zk_lock("interop")
        holder = HeldInThread(holder_lock)
        assert holder.acquired
        peer = raw_client(zk_server.hosts, anonymous=True, auth_data=project_auth())  # open default ACL
        forger = raw_client(zk_server.hosts, anonymous=True)
        waiter = None
        try:
            contender = Lock(peer, holder_lock.path)
            gave_up = []

            def contend():
                try:
                    gave_up.append(contender.acquire(timeout=2.0))
                except LockTimeout:
                    gave_up.append(False)

            thread = threading.Thread(target=contend)
            thread.start()
            assert wait_until(lambda: len(forger.get_children(holder_lock.path)) == 2, timeout=5)
            node = sorted(forger.get_children(holder_lock.path), key=lambda c: c[-10:])[1]
            # Forged before the waiter arrives, so that its first read of the node finds the release promise.
            forger.set(f"{holder_lock.path}/{node}", node_data.hold_record(node, 0.0) + b" " + node_data._PROMISE)
            waiter = HeldInThread(zk_lock("interop", timeout=20), wait_for_acquire=False)
            assert wait_until(lambda: len(forger.get_children(holder_lock.path)) == 3, timeout=5)
            time.sleep(0.2)
            forger.set(f"{holder_lock.path}/{node}", b"")  # what the release's transaction looks like to a watch
            thread.join(10)
            assert gave_up == [False]  # the contender timed out and deleted its node
            time.sleep(1.0)
            assert waiter.acquired is None, "the waiter took the lock on a forged mark"
            assert holder_lock.is_held
            holder.release()
            assert waiter.wait(10), waiter.error  # the real release hands over
        finally:
            if waiter is not None:
                waiter.release()
            holder.release()
            for client in (peer, forger):
                client.stop()
                client.close()
            close_all()


GET_ACL = 6  # ZooKeeper's opcode


def ping_pong(using: tuple[str, str], acl_reads_before_release=None) -> list[str]:
    """Two threads, on aliases ``using``, hand one lock back and forth ten times: every hold but the last has the
    other thread queued behind it before it is released. ``acl_reads_before_release(h)``, if given, is waited for
    before hold ``h`` is released. The holders, in order."""
    holders: list[str] = []
    turn = [threading.Event(), threading.Event()]
    reader = raw_client(settings.ZKLOCKS["default"]["HOSTS"], anonymous=True)

    def player(me: int) -> None:
        for i in range(5):
            lock = zk_lock("ping-pong", timeout=20, using=using[me])
            turn[me].wait(20)
            turn[me].clear()
            with lock:
                held = len(holders)
                holders.append(f"{me}")
                if (me, i) != (1, 4):  # the other one has a turn left: it queues behind this hold
                    turn[1 - me].set()
                    wait_until(lambda path=lock.path: len(reader.get_children(path)) == 2, timeout=10)
                    if acl_reads_before_release is not None:
                        acl_reads_before_release(held)

    try:
        threads = [threading.Thread(target=player, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        turn[0].set()
        for t in threads:
            t.join(60)
        return holders
    finally:
        reader.stop()
        reader.close()


def test_a_waiter_reads_no_acl_of_a_node_of_its_own_session(zk_server):
    """The guarded alias (the default identity): two threads of one process hand one lock back and forth ten times,
    each waiting behind the other's node, made by the same session. A node of the waiter's own session carries the
    alias's ACL, so none of the nine waits reads it (before: a read at the first wait, and again whenever the
    release beside it won the race and the read found the node gone). The lock node's ACL is read once, pipelined
    with the first create (before the lock node exists)."""
    from zklocks.testing.proxy import TcpProxy

    proxy = TcpProxy("127.0.0.1", zk_server.port).start()
    try:
        with zk_settings(proxy.hosts, "/forged-acl-own", SESSION_TIMEOUT=4.0):
            holders = ping_pong(("default", "default"))
            assert holders == ["0", "1"] * 5, holders  # all but the first waited behind the other's node
            assert proxy.requests[GET_ACL] == 1, proxy.requests
    finally:
        close_all()
        proxy.stop()


def test_a_waiter_reads_a_peer_sessions_acl_once_per_lock_node(zk_server):
    """Two aliases with the one project identity, so two sessions: two threads hand one lock back and forth ten
    times, each waiting behind the other session's node. That session's ACL is read at the first wait behind it
    only, not at each of the nine waits (before: 9); a write by anyone else still hands nothing over (the
    forged-write test above), and a peer's open node is still read and distrusted (the interop test below).

    Reads: the lock node's once per session (the first, before the lock node exists), then one per direction. A
    holder is released only once the read of its node was sent: otherwise the read may find the node already gone,
    which proves nothing, and it is rightly read again at the next wait."""
    from django.test import override_settings

    from zklocks.testing.proxy import TcpProxy

    proxy = TcpProxy("127.0.0.1", zk_server.port).start()
    try:
        with zk_settings(proxy.hosts, "/forged-acl-peer", SESSION_TIMEOUT=4.0):
            alias = dict(settings.ZKLOCKS["default"])
            with override_settings(ZKLOCKS={"default": alias, "peer": alias}):

                def acl_reads_before_release(hold: int) -> None:
                    # lock node: 2; the first waiter's read of the first holder's node: 3; the other direction: 4
                    wait_until(lambda: proxy.requests[GET_ACL] >= min(3 + hold, 4), timeout=10)

                holders = ping_pong(("default", "peer"), acl_reads_before_release)
                assert holders == ["0", "1"] * 5, holders
                assert proxy.requests[GET_ACL] == 4, proxy.requests
    finally:
        close_all()
        proxy.stop()


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_lock_node_open_to_anyone_under_a_guarded_alias_is_watched_as_an_open_alias(zk_server, caplog, kind):
    """The default guarded alias, but a lock node made with an open ACL (before an upgrade from an open alias, or by
    a peer without an ACL): ZooKeeper lets anyone delete in it, so an anonymous client can delete the holder's node
    and hand the lock to the waiter. The holder must hear of it at once, as on an open alias (before: after a
    second, when a guarded alias's holder first watches its node), and the acquire says why."""
    import logging

    from kazoo.security import OPEN_ACL_UNSAFE

    caplog.set_level(logging.WARNING)
    with zk_settings(zk_server.hosts, "/forged-open-lock-node", SESSION_TIMEOUT=4.0):
        holder_lock = zk_lock(f"opened-{kind}") if kind == "lock" else zk_semaphore(f"opened-{kind}", 1)
        owner = raw_client(zk_server.hosts, anonymous=True, auth_data=project_auth_data())
        forger = raw_client(zk_server.hosts, anonymous=True)
        try:
            owner.create(holder_lock.path, b"", acl=OPEN_ACL_UNSAFE, makepath=True)
            holder = HeldInThread(holder_lock)
            assert holder.acquired
            assert any("lets others delete in it" in r.getMessage() for r in caplog.records)
            forged_at = time.monotonic()
            held = [c for c in forger.get_children(holder_lock.path) if "__" in c and not c.startswith("__")]
            assert len(held) == 1, held
            forger.delete(f"{holder_lock.path}/{held[0]}")
            assert wait_until(lambda: not holder_lock.is_held, timeout=0.5)
            print(f"holder told {time.monotonic() - forged_at:.3f}s after the forged delete")
            holder.release()
            assert isinstance(holder.lost, LockLost) and "deleted" in str(holder.lost), holder.lost
        finally:
            for client in (owner, forger):
                client.stop()
                client.close()
            close_all()


def project_auth_data():
    from tests.support.helpers import project_auth

    return project_auth()

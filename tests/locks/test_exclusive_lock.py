"""The exclusive lock on a real ZooKeeper server: forms, try-lock, timeouts, reentrancy, tokens, fairness."""

import functools
import threading
import time

import pytest

from tests.support.helpers import raw_client, tree, wait_until
from tests.support.threads import HeldInThread, in_thread
from zklocks import LockLost, LockNotAcquired, LockOwnershipError, LockTimeout, ZkLocksError, lock_path, zk_lock
from zklocks.conf import alias_config
from zklocks.ops.read_model import snapshot

pytestmark = pytest.mark.zk


def test_context_manager_returns_handle_with_token(zk_server):
    with zk_lock("reports:daily", timeout=5) as lock:
        assert lock.is_held
        lock.ensure_held()
        assert isinstance(lock.token, int) and lock.token > 0
        client = raw_client(zk_server.hosts)
        try:
            children = client.get_children(lock_path("reports:daily"))
            assert len(children) == 1 and "__lock__" in children[0]
            _, stat = client.get(f"{lock_path('reports:daily')}/{children[0]}")
            assert stat.czxid == lock.token
        finally:
            client.stop()
    assert not lock.is_held


def test_lock_node_layout_and_holder_data(zk_server):
    import json
    import os

    with zk_lock("layout") as lock:
        client = raw_client(zk_server.hosts)
        try:
            (child,) = client.get_children(lock.path)
            guid, seq = child.split("__lock__")
            assert len(guid) == 32 and int(guid, 16) >= 0 and len(seq) == 10 and seq.isdigit()
            data, _ = client.get(f"{lock.path}/{child}")
            assert len(data) <= 1024
            payload = json.loads(data)
            assert payload["v"] == 1 and payload["pid"] == os.getpid() and payload["thread"] == "MainThread"
            assert {"host", "queued_at"} <= payload.keys()
        finally:
            client.stop()


def test_tokens_strictly_increase_over_holders():
    tokens = []
    for _ in range(5):
        with zk_lock("tok") as lock:
            tokens.append(lock.token)
    assert tokens == sorted(set(tokens))


def test_explicit_acquire_release_and_idempotent_release():
    lock = zk_lock("explicit")
    assert lock.acquire() is True
    assert lock.is_held
    lock.release()
    lock.release()  # idempotent
    assert not lock.is_held
    assert lock.acquire(blocking=False) is True
    lock.release()


def test_try_lock_fails_at_once_when_held_elsewhere():
    with zk_lock("busy"):
        started = time.monotonic()
        assert in_thread(lambda: zk_lock("busy", blocking=False).acquire()) is False
        with pytest.raises(LockNotAcquired):
            in_thread(lambda: zk_lock("busy", blocking=False).__enter__())
        assert time.monotonic() - started < 1.0


def test_release_by_a_thread_that_holds_nothing_frees_nothing_and_says_so():
    shared_handle = zk_lock("shared-handle", timeout=0.2)
    owner = HeldInThread(shared_handle)
    assert owner.acquired
    assert shared_handle.acquire() is False  # this thread timed out ...
    with pytest.raises(LockOwnershipError, match="shared-handle"):
        shared_handle.release()  # ... and releasing must not free the other thread's hold, nor pass in silence
    with pytest.raises(LockLost):
        shared_handle.ensure_held()  # nor may this thread pass for the holder
    assert zk_lock("shared-handle", blocking=False).acquire() is False
    owner.release()


@pytest.mark.parametrize("timeout", [0.3, 1.0])
def test_timeout_is_honoured_and_leaves_no_node(zk_server, timeout):
    with zk_lock("slow") as lock:
        started = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            in_thread(lambda: zk_lock("slow", timeout=timeout).__enter__())
        elapsed = time.monotonic() - started
        # Not before the timeout; after it, one round trip that confirms the lock is busy (generous: a loaded machine
        # may take a second more, and a wait that ignored the timeout would last the holder's whole hold).
        assert timeout <= elapsed < timeout + 2.0
        assert isinstance(info.value, LockNotAcquired) and isinstance(info.value, ZkLocksError)
        client = raw_client(zk_server.hosts)
        try:
            wait_until(lambda: len(client.get_children(lock.path)) == 1, timeout=3)
        finally:
            client.stop()


def test_reentrant_per_thread_outermost_release_frees(zk_server):
    outer = zk_lock("re")
    with outer as a:
        with zk_lock("re", timeout=0.1) as b:
            assert b.token == a.token
        assert outer.is_held  # inner exit did not free
        assert in_thread(lambda: zk_lock("re", blocking=False).acquire()) is False
    assert in_thread(lambda: zk_lock("re", blocking=False).acquire()) is True  # frees on the outermost exit


def test_a_lock_in_the_body_of_a_non_reentrant_hold_nests_instead_of_waiting_on_itself():
    from zklocks.handles.locks import ZkLock

    outer = ZkLock("task-key", reentrant=False)
    outer.acquire()
    try:
        started = time.monotonic()
        with zk_lock("task-key", timeout=2) as inner:
            assert inner.token == outer.token
        assert time.monotonic() - started < 1
        assert outer.is_held
    finally:
        outer.release()


def test_same_handle_reentered_by_one_thread():
    lock = zk_lock("same-handle")
    with lock:
        with lock:
            assert lock.is_held
        assert lock.is_held
    assert not lock.is_held


def test_decorator_fills_template_from_bound_arguments_and_keeps_metadata():
    seen = []

    @zk_lock("invoice:{invoice_id}", timeout=5)
    def pay(invoice_id, amount=10):
        """Pay an invoice."""
        seen.append((invoice_id, amount))
        assert in_thread(lambda: zk_lock(f"invoice:{invoice_id}", blocking=False).acquire()) is False
        other = HeldInThread(zk_lock("invoice:other", blocking=False))
        assert other.acquired is True
        other.release()
        return "paid"

    assert pay(7) == "paid" and pay(invoice_id=8, amount=3) == "paid"
    assert seen == [(7, 10), (8, 3)]
    assert pay.__name__ == "pay" and pay.__doc__ == "Pay an invoice." and pay.__wrapped__
    assert isinstance(functools.update_wrapper, object)


def test_decorator_template_errors_name_the_function():
    with pytest.raises(ValueError, match=r"ship.*order_id.*not an argument"):  # when decorating, not calling

        @zk_lock("order:{order_id}")
        def ship(invoice_id):
            pass

    @zk_lock("order:{n:d}")
    def ship2(n):
        pass

    with pytest.raises(ValueError, match="cannot fill lock name template"):
        ship2("x")


def test_fair_fifo_order_and_each_waiter_blocks():
    order = []
    holder = zk_lock("fifo")
    holder.acquire()
    threads = []
    for i in range(5):

        def contend(i=i):
            with zk_lock("fifo"):
                order.append(i)

        t = threading.Thread(target=contend)
        threads.append(t)
    for i, t in enumerate(threads):
        t.start()
        wait_until(lambda i=i: len(_children("fifo")) == i + 2, timeout=5)
    assert order == []
    holder.release()
    for t in threads:
        t.join(20)
    assert order == [0, 1, 2, 3, 4]


def _children(name):
    from zklocks.client.pools import connections

    return connections["default"].session().client.get_children(lock_path(name))


def test_no_nodes_left_behind(zk_server):
    for name in ["a", "b/c", "ünï"]:
        with zk_lock(name):
            pass
        handle = zk_lock(name, blocking=False)
        assert handle.acquire()
        handle.release()
    client = raw_client(zk_server.hosts)
    try:
        leftovers = [p for p in tree(client, alias_config().namespace) if "__" in p.rsplit("/", 1)[1]]
        assert leftovers == []
    finally:
        client.stop()


def test_invalid_name_is_value_error():
    for bad in ["", "x" * 201, "a\x01"]:
        with pytest.raises(ValueError, match="lock name"):
            zk_lock(bad)


def test_lone_surrogate_is_an_invalid_name():
    with pytest.raises(ValueError, match="surrogate"):
        zk_lock("bad\ud800")


def test_a_deleted_node_is_noticed_by_ensure_held_and_by_the_long_hold_watch(zk_server):
    import json

    from zklocks import LockLost, signals

    lost = []
    signals.lock_lost.connect(lambda sender, **kw: lost.append(kw), weak=False, dispatch_uid="t-deleted")
    client = raw_client(zk_server.hosts)
    try:
        quick = zk_lock("forced-quick")
        quick.acquire()
        (child,) = client.get_children(quick.path)
        client.delete(f"{quick.path}/{child}")
        with pytest.raises(LockLost, match="deleted"):
            quick.ensure_held()  # one read tells, whether or not the watch told first
        # Without AUTH anyone may delete our node: the holder watches it from the grant, and hears at once.
        assert wait_until(lambda: any(e["name"] == "forced-quick" and e["reason"] == "deleted" for e in lost), 1)
        quick.release()

        slow = zk_lock("forced-slow")
        slow.acquire()
        time.sleep(1.3)  # a long hold: its node is watched
        (child,) = client.get_children(slow.path)
        client.delete(f"{slow.path}/{child}")
        wait_until(lambda: not slow.is_held, timeout=3)
        wait_until(lambda: any(e["name"] == "forced-slow" and e["reason"] == "deleted" for e in lost), timeout=3)
        slow.release()

        # A holder that had to wait records acquired_at once its hold is long: in the lock node, since its own
        # node changes only at its release (the one behind it holds at that change).
        first = HeldInThread(zk_lock("waited-hold"))
        releaser = threading.Timer(0.3, first.release)
        releaser.start()
        second = HeldInThread(zk_lock("waited-hold", timeout=5))
        assert second.acquired
        path = first.handle.path
        # The first handed the lock over in this process as it sent its delete, which ZooKeeper may still apply.
        wait_until(lambda: len(client.get_children(path)) == 1, timeout=3)
        (child,) = client.get_children(path)
        wait_until(lambda: b"acquired_at" in client.get(path)[0], timeout=3)
        record = json.loads(client.get(path)[0])
        own, own_stat = client.get(f"{path}/{child}")
        assert record["holder"] == child and own_stat.version == 0 and b'"marks":"release"' in own
        assert record["acquired_at"] >= json.loads(own)["queued_at"]
        (info,) = [lock for lock in snapshot(["default"]).locks if lock.name == "waited-hold"]
        assert info.holders[0].acquired_at == record["acquired_at"]
        second.release()
    finally:
        signals.lock_lost.disconnect(dispatch_uid="t-deleted")
        client.stop()

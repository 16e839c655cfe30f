"""The one notification a handoff takes, and the writes that must not be mistaken for it.

A waiter behind an exclusive contender that carries the release-only promise (node_data.marks_release_only) is woken
by the first change of that node's data: the release transaction writes and deletes it at once. Under AUTH (only
the alias's identity may write) it holds at that notification; otherwise it looks once and holds only if the node
is gone (docs/security.md, "No forged handoff"). Every other write
(a node without the promise, as an older client's long hold; a reader's long hold) must not grant anything. The
blockers here are nodes a raw kazoo client creates in the queue, so each write and delete is injected by hand.
"""

import json
import time
import uuid

import pytest

from tests.support.helpers import wait_until
from tests.support.threads import HeldInThread
from zklocks import zk_lock
from zklocks.recipes.node_data import payload
from zklocks.testing import mntr

pytestmark = pytest.mark.zk

OLD = json.dumps({"v": 1, "host": "old", "pid": 1, "thread": "MainThread", "queued_at": 1.0}).encode()


def contender(kz, path: str, marker: str, data: bytes) -> str:
    """A node in the queue, created by hand in the kazoo layout."""
    kz.ensure_path(path)
    return kz.create(f"{path}/{uuid.uuid4().hex}{marker}", data, ephemeral=True, sequence=True)


def still_waiting(waiter: HeldInThread, seconds: float = 0.6) -> bool:
    time.sleep(seconds)
    return waiter.acquired is None


def release_transaction(kz, node: str) -> None:
    transaction = kz.transaction()
    transaction.set_data(node, b"released")
    transaction.delete(node)
    transaction.commit()


def test_the_release_transaction_of_a_promising_holder_grants_at_its_one_notification(kz, zk_server):
    handle = zk_lock("signal-promise")
    head = contender(kz, handle.path, "__lock__", payload())
    waiter = HeldInThread(handle, wait_for_acquire=False)
    wait_until(lambda: len(kz.get_children(handle.path)) == 2, timeout=5)
    assert still_waiting(waiter)
    watches = int(mntr(zk_server.port)["zk_watch_count"])
    release_transaction(kz, head)
    assert waiter.wait(10)

    # The waiter's watch fired once and was not set again: its one look at the node (without AUTH anyone may
    # write it, so only the node's absence proves the release) finds it gone, which sets no watch. The one new
    # watch is the new holder's on its own node (a foreign write or delete is a LockLost at once).
    assert int(mntr(zk_server.port)["zk_watch_count"]) <= watches
    waiter.release()


@pytest.mark.parametrize("marker", ["__lock__", "__rlock__"], ids=["older client's exclusive node", "reader"])
def test_a_write_that_leaves_the_node_grants_nothing(kz, marker):
    """An older client writes acquired_at into its exclusive node during a long hold; a reader of ours does
    too. The waiter behind must go on waiting until the node is deleted."""
    handle = zk_lock(f"signal-write-{marker.strip('_')}")
    head = contender(kz, handle.path, marker, OLD if marker == "__lock__" else payload())
    waiter = HeldInThread(handle, wait_for_acquire=False)
    wait_until(lambda: len(kz.get_children(handle.path)) == 2, timeout=5)
    kz.set(head, OLD[:-1] + b',"acquired_at":2.0}')
    assert still_waiting(waiter), "granted while the blocker still held"
    kz.set(head, OLD[:-1] + b',"acquired_at":3.0}')  # a second write: the watch was set again
    assert still_waiting(waiter)
    kz.delete(head)
    assert waiter.wait(10)
    waiter.release()


def test_a_promising_node_that_leaves_without_holding_sends_the_waiter_back_to_the_holder(kz):
    """Holder, then a waiter that times out (its node deleted without a write), then ours: ours must walk back
    to the holder and wait for it, not hold at the first delete."""
    handle = zk_lock("signal-walk-back")
    holder_node = contender(kz, handle.path, "__lock__", OLD)
    leaver = contender(kz, handle.path, "__lock__", payload())
    waiter = HeldInThread(handle, wait_for_acquire=False)
    wait_until(lambda: len(kz.get_children(handle.path)) == 3, timeout=5)
    kz.delete(leaver)
    assert still_waiting(waiter), "granted while an earlier node still held"
    kz.delete(holder_node)
    assert waiter.wait(10)
    waiter.release()


def test_a_long_hold_records_acquired_at_only_over_its_own_kind_of_record(kz):
    """The record goes into the lock node's data: never over data that means something else there."""
    for name, before in (("record-empty", b""), ("record-foreign", b'{"kind":"semaphore","max_leases":3}')):
        handle = zk_lock(name)
        kz.ensure_path(handle.path)
        kz.set(handle.path, before)
        head = contender(kz, handle.path, "__lock__", OLD)
        waiter = HeldInThread(handle, wait_for_acquire=False)
        wait_until(lambda handle=handle: len(kz.get_children(handle.path)) == 2, timeout=5)
        kz.delete(head)
        assert waiter.wait(10)
        if before:
            time.sleep(1.6)  # a long hold: the record is due, and must not replace the foreign data
            data = kz.get(handle.path)[0]
            assert data == before
        else:
            # due after a second of holding; on a loaded machine the write may come later
            data = wait_until(lambda handle=handle: kz.get(handle.path)[0], timeout=10)
            record = json.loads(data)
            assert record["holder"] == kz.get_children(handle.path)[0] and record["acquired_at"] > 1.0
        waiter.release()

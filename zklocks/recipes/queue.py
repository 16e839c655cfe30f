"""The fair lock queue of RECIPES §2 and §3, in the alias's node layout (layout.py).

Contenders are ephemeral-sequential children of the lock node, e.g. ``<guid>__lock__<seq>`` (exclusive) and
``<guid>__rlock__<seq>`` (shared) in kazoo's layout. An exclusive contender holds the lock when it is first in its
queue; a shared one when no exclusive contender is ahead of it. Each waiter watches exactly one node (its
blocker), so a release wakes one waiter. The guid is fresh for every acquire, so after a connection loss
during the create we find our own node instead of leaving an orphan (RECIPES §6).

This module knows kazoo and paths, nothing of Django.
"""

from __future__ import annotations

import functools
import logging
import shlex
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import (
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
)
from kazoo.protocol.states import EventType

from ..exceptions import (
    LockNotAcquired,
    LockTimeout,
    SemaphoreMismatch,
    SequenceExhausted,
    ZkAuthError,
)
from ..session import Session
from .calls import Deadline, DeadlinePassed, SessionGone, call, wait_result
from .layout import SEQUENCE_LIMIT, SEQUENCE_WARN, sequence_trusted
from .node import OwnNode, layout_of

log = logging.getLogger("zklocks")


class Contender(OwnNode):
    """One enqueued node of one acquire attempt on one session."""

    __slots__ = ("marker", "queued_at", "waited", "wakeups")

    def __init__(self, session: Session, parent: str, marker: str) -> None:
        super().__init__(session, parent, marker)
        self.marker = marker
        self.queued_at = time.time()
        self.waited = False
        self.wakeups = 0  # watch notifications this contender received while queued

    # -- enqueue --

    def enqueue(self, data: bytes, deadline: Deadline) -> list[str]:
        """Create our node and read the queue in one round trip; return the children."""
        client = self.session.client
        while True:
            if self.session.dead:
                raise SessionGone()
            created = client.create_async(
                self.prefix, data, acl=self.session.acl, ephemeral=True, sequence=True, include_data=True
            )
            self._pending_create = created
            listed = client.get_children_async(self.parent)
            try:
                path, stat = wait_result(created, self.session, deadline)
            except NoNodeError:
                self._pending_create = None
                self._ensure_parent(deadline)
                continue
            except (ConnectionLoss, OperationTimeoutError):
                self.session.wait_connected(deadline.at)
                try:
                    # sync first: we may have reconnected to a server that has not applied our create yet.
                    call(self.session, lambda: client.sync_async(self.parent), deadline)
                    children = call(self.session, lambda: client.get_children_async(self.parent), deadline)
                except NoNodeError:
                    children = []
                mine = self._find_own(children)
                if mine is None:
                    continue  # the create never reached the server: send it again
                self._adopt(mine, deadline)
                return children
            self._set_node(path, stat.czxid)  # first: an exception in between must still find the node
            self._pending_create = None
            try:
                return wait_result(listed, self.session, deadline)
            except (ConnectionLoss, OperationTimeoutError):
                return self.children(deadline)

    def _ensure_parent(self, deadline: Deadline) -> None:
        client = self.session.client
        try:
            call(
                self.session,
                lambda: client.create_async(self.parent, b"", acl=self.session.acl, makepath=True),
                deadline,
            )
        except NodeExistsError:
            pass

    # -- queue position --

    def children(self, deadline: Deadline) -> list[str]:
        client = self.session.client
        return call(self.session, lambda: client.get_children_async(self.parent), deadline)

    def blocker(self, children: list[str]) -> tuple[str | None, bool]:
        """(the child we wait for or None, whether it is the only contender ahead that keeps us waiting)."""
        layout = layout_of(self.session)
        contenders = layout.sort_contenders(children, self.marker)
        for _, _, child in contenders:
            if child != self.name and child.startswith(self.guid):
                # A create of ours that we could not see when we recovered from a connection loss: never
                # wait behind our own orphan.
                self.session.client.delete_async(f"{self.parent}/{child}")
                contenders = [c for c in contenders if c[2] != child]
        try:
            ahead = layout.blockers_ahead(contenders, self.name, self.marker)
        except KeyError:
            raise SessionGone() from None  # our ephemeral node is gone: the session was expired
        return (ahead[-1] if ahead else None), len(ahead) == 1

    def wait_for(self, blocker: str, deadline: Deadline) -> bool:
        """Block until ``blocker`` changes or the session state does; DeadlinePassed at the deadline.

        True when the blocker is known to be deleted (its watch said so, or it was gone already).
        """
        event = threading.Event()
        deleted: list[bool] = []
        client = self.session.client
        with self.session.waking(event):
            path = f"{self.parent}/{blocker}"

            def on_watch(watched) -> None:
                if watched.type == EventType.CHANGED:
                    # The blocker wrote its acquired_at: still there, so watch again without waking up.
                    client.get_async(path, watch=on_watch).rawlink(on_rearmed)
                else:
                    if watched.type == EventType.DELETED:
                        deleted.append(True)
                    self._woken(event)

            def on_rearmed(result) -> None:
                if result.exception is not None:
                    if isinstance(result.exception, NoNodeError):
                        deleted.append(True)
                    self._woken(event)  # gone (or the connection is): look again

            try:
                call(self.session, lambda: client.get_async(path, watch=on_watch), deadline)
            except NoNodeError:
                return True  # gone already
            # Wake at least every third of the lease so a silent loss of the session is noticed, and often
            # when an async caller may cancel.
            slice_ = self.session.timeout / 3 if deadline.cancel is None else 0.05
            while not event.is_set():
                if deadline.expired():
                    raise DeadlinePassed()
                remaining = deadline.remaining()
                event.wait(slice_ if remaining is None else min(remaining, slice_))
                if not self.session.is_alive():
                    raise SessionGone()
            if not self.session.is_alive():
                raise SessionGone()
            return bool(deleted)

    def _woken(self, event: threading.Event) -> None:
        self.wakeups += 1
        event.set()


def acquire(
    get_session: Callable[[], Session],
    parent: str,
    marker: str,
    data: bytes,
    *,
    blocking: bool,
    deadline: Deadline,
    name: str,
) -> Contender:
    """Enqueue and wait until held. LockNotAcquired / LockTimeout / ZkUnavailable otherwise.

    If the session ends while we wait, re-enqueue on a fresh session within our own deadline.
    """
    while True:
        session = get_session()
        layout = layout_of(session)
        if not blocking and parent in session.busy_hint:
            # This lock was busy at our last try: one read may settle it without a create and a delete.
            try:
                children = call(session, functools.partial(session.client.get_children_async, parent), deadline)
            except NoNodeError:
                children = []
            except SessionGone:
                continue
            if layout.blockers_ahead(layout.sort_contenders(children, marker), None, marker):
                raise LockNotAcquired(name=name)
            session.busy_hint.discard(parent)
        session.refresh_lease(deadline.at)  # a session idle for long must prove its lease again (lease.py)
        contender = Contender(session, parent, marker)
        try:
            children = contender.enqueue(data, deadline)
            if any(layout.is_semaphore_child(c) for c in children):
                # Lease holders are no contenders of this queue: granting it would ignore them.
                raise SemaphoreMismatch(f"{name!r} is in use as a semaphore, not a plain lock")
            seq = layout.sequence_of(contender.name or "")
            if seq is not None and not sequence_trusted(seq):
                # Our place in the queue is unknown: leave it, and start over on a fresh node if this one is
                # empty now.
                contender.delete_nowait()  # FIFO: the parent's delete below sees ours applied
                if _recycle(session, parent, deadline):
                    continue
                raise SequenceExhausted(
                    _exhausted_message(name, session.alias, parent), name=name, alias=session.alias, path=parent
                )
            far = seq is not None and seq < SEQUENCE_WARN
            if seq is not None and not far:
                _warn_near_limit(session.alias, parent, seq)
            while True:
                blocker, alone = contender.blocker(children)
                if blocker is None:
                    return contender
                if not blocking:
                    if len(session.busy_hint) > 10_000:
                        session.busy_hint.clear()
                    session.busy_hint.add(parent)
                    contender.delete_nowait()
                    raise LockNotAcquired(name=name)
                contender.waited = True
                if contender.wait_for(blocker, deadline) and alone and far:
                    # The only contender ahead of us is gone, and none can join ahead of us (sequence numbers
                    # only grow, far from their limit): the lock is ours without reading the queue again.
                    # Otherwise the blocker may have left because its session died while another contender
                    # still holds: look again.
                    return contender
                children = contender.children(deadline)
        except SessionGone:
            if deadline.expired():
                raise LockTimeout(
                    f"lock {name!r} not acquired in time (its session ended while waiting)", name=name
                ) from None
            continue
        except DeadlinePassed:
            contender.abandon()
            raise LockTimeout(f"lock {name!r} not acquired within the timeout", name=name) from None
        except SequenceExhausted:
            raise  # our node is deleted already
        except BaseException:
            contender.abandon()
            raise


def _recycle(session: Session, parent: str, deadline: Deadline) -> bool:
    """Delete an exhausted lock node if it is empty: the next create re-creates it with a fresh counter.

    ZooKeeper refuses (NotEmpty) while any child is left, so nobody's node is ever removed with it.
    """
    try:
        call(session, lambda: session.client.delete_async(parent), deadline)
    except NoNodeError:
        pass  # recycled by another contender (or the reaper) already
    except (NotEmptyError, ZkAuthError):
        return False
    log.warning("zklocks: recycled lock node %s of alias %r: its sequence numbers were used up", parent, session.alias)
    return True


def _exhausted_message(name: str, alias: str, parent: str) -> str:
    return (
        f"lock {name!r} (alias {alias!r}): ZooKeeper has used up the sequence numbers of lock node {parent} "
        f"(its child counter is stuck at 2**31-1), so its queue order cannot be trusted and zklocks does not "
        f"queue there. The node is recycled (deleted, and re-created with a fresh counter) at its next empty "
        f"moment: by the next contender that finds it empty, by the reaper (REAP_INTERVAL), or at once with "
        f"`manage.py zklocks_reap --alias {shlex.quote(alias)} --recycle {shlex.quote(name)}`, which waits for "
        f"that moment. Keep other clients of this node (e.g. kazoo's Lock) away until then."
    )


_warned: set[tuple[str, str]] = set()


def _warn_near_limit(alias: str, parent: str, seq: int) -> None:
    if (alias, parent) in _warned or len(_warned) > 10_000:
        return
    _warned.add((alias, parent))
    log.warning(
        "zklocks: lock node %s of alias %r has used %d of its %d sequence numbers; it must be empty for a "
        "moment to be recycled (manage.py zklocks_reap --recycle)",
        parent,
        alias,
        seq,
        SEQUENCE_LIMIT,
    )

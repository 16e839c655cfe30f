"""Semaphore with N leases, the shape of Curator's InterProcessSemaphoreV2: a fair mutex (queue.py) orders the
contenders, and only its holder looks at the leases (docs/design.md §7; the nodes: §12 and layout.py).
"""

from __future__ import annotations

import functools
import json
import threading

from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, OperationTimeoutError

from ..client.deadline import Deadline, DeadlinePassed
from ..client.interrupts import new_event
from ..client.session import Session
from ..exceptions import LockNotAcquired, LockTimeout, SemaphoreMismatch, ZkAuthError, ZkUnavailable
from . import queue
from .kazoo_calls import SessionGone, call, create_contender, wait_result
from .layout import Kind
from .node import SENDING, layout_of
from .queue import Contender, judge_parent


def marker_data(max_leases: int) -> bytes:
    return json.dumps({"v": 1, "kind": Kind.SEMAPHORE.value, "max_leases": max_leases}, separators=(",", ":")).encode()


def stored_max_leases(raw: bytes | None) -> int | None:
    try:
        data = json.loads(raw or b"")
    except (ValueError, RecursionError):  # anyone's data: nested deep enough, the parser gives up with RecursionError
        return None
    if isinstance(data, dict) and data.get("kind") == Kind.SEMAPHORE:
        return data.get("max_leases")
    return None


def _ensure_semaphore_node(session: Session, path: str, max_leases: int, deadline: Deadline, name: str) -> None:
    client = session.client
    try:
        call(
            session,
            lambda: client.create_async(path, marker_data(max_leases), acl=session.acl, makepath=True),
            deadline,
        )
        return
    except NodeExistsError:
        pass
    raw, stat = call(session, lambda: client.get_async(path), deadline)
    stored = stored_max_leases(raw)
    if stored is None:
        children = call(session, lambda: client.get_children_async(path), deadline)
        if layout_of(session).sort_contenders(children):
            raise SemaphoreMismatch(f"{name!r} is in use as a plain lock, not a semaphore")
        # A node without our marker: left by a lock of the same name, or re-created by a contender's mutex
        # right after the reaper removed it. Claim it; if someone else claimed it first, check theirs.
        try:
            call(session, lambda: client.set_async(path, marker_data(max_leases), version=stat.version), deadline)
            return
        except BadVersionError:
            raw, _ = call(session, lambda: client.get_async(path), deadline)
            stored = stored_max_leases(raw)
    if stored != max_leases:
        raise SemaphoreMismatch(
            f"semaphore {name!r} has max_leases={stored} in ZooKeeper but this contender asked for {max_leases}; "
            "every contender of a semaphore must agree"
        )


def acquire(
    get_session, path: str, max_leases: int, data: bytes, *, blocking: bool, deadline: Deadline, name: str, alias: str
) -> Contender:
    """Take one lease; returns a Contender standing for the lease node.

    Raises only zklocks errors: LockNotAcquired / LockTimeout / ZkUnavailable / ZkAuthError / SemaphoreMismatch,
    each naming the semaphore and the alias.
    """
    what = f"semaphore {name!r} (alias {alias!r})"
    try:
        return _acquire(get_session, path, max_leases, data, blocking, deadline, name, what)
    except DeadlinePassed:
        raise LockTimeout(f"{what}: no lease within the timeout", name=name) from None
    except (ZkUnavailable, ZkAuthError) as exc:
        if str(exc).startswith(what):
            raise
        raise type(exc)(f"{what}: {exc}") from exc


def _acquire(
    get_session, path: str, max_leases: int, data: bytes, blocking: bool, deadline: Deadline, name: str, what: str
) -> Contender:
    late_gone = 0
    last_session: Session | None = None  # the session of the last attempt
    while True:
        until = queue.fresh_session_bound(last_session, late_gone, deadline)
        if until is not None:
            session = queue.late_session(get_session, until)
        else:
            session = get_session()
        last_session = session
        layout = layout_of(session)
        try:
            _ensure_semaphore_node(session, path, max_leases, deadline, name)
            if not blocking:
                # All leases taken: fail at once, without queueing for the mutex behind a blocking waiter.
                listing = functools.partial(session.client.get_children_async, layout.leases_path(path))
                try:
                    children = call(session, listing, deadline)
                except NoNodeError:
                    children = []  # Curator's layout: no leases/ yet
                if len(layout.leases(children)) >= max_leases:
                    raise LockNotAcquired(f"{what}: all {max_leases} leases are held", name=name)
            # Non-blocking callers still wait for the (short) mutex turn, bounded by CONNECT_TIMEOUT.
            mutex_deadline = deadline if blocking else Deadline(session.cfg.connect_timeout)

            def same_session(session: Session = session, within: float | None = None) -> Session:
                if session.dead:
                    raise SessionGone()  # start over on a fresh session (below)
                return session

            try:
                mutex = queue.acquire(
                    same_session,
                    layout.mutex_path(path),
                    layout.exclusive,
                    data,
                    blocking=True,
                    deadline=mutex_deadline,
                    name=name,
                )
            except LockTimeout:
                raise LockTimeout(f"{what}: no lease within the timeout", name=name) from None
        except (SessionGone, NoNodeError):
            # Our session ended, or a reaper sweep removed the (empty) semaphore node between two of our
            # requests: start over (past the deadline once, see queue._gone_again).
            late_gone = queue.gone_again(late_gone, session, deadline)
            continue
        lease = None
        try:
            try:
                lease = _take_lease(session, path, max_leases, data, blocking, deadline, name, what)
            finally:
                # FIFO: our next request already sees the mutex released.
                mutex.delete_nowait(held=mutex.waited and layout_of(session).marks_release(mutex.marker))
        except SessionGone:
            late_gone = queue.gone_again(late_gone, session, deadline)
            continue
        except BaseException:
            # Interrupted (e.g. asynchronously) with the lease taken or the mutex not yet given back.
            mutex.abandon()
            if lease is not None:
                lease.abandon()
            raise
        return lease


def _take_lease(
    session: Session, path: str, max_leases: int, data: bytes, blocking: bool, deadline: Deadline, name: str, what: str
) -> Contender:
    layout = layout_of(session)
    # One guid for every create of this acquire.
    lease = Contender(session, layout.leases_path(path), layout.lease)
    try:
        return _create_lease(session, path, max_leases, data, blocking, deadline, name, what, lease)
    except BaseException:
        # Whatever interrupted us, even after the create: through the pending create, or by its guid after a
        # connection loss, the lease node must not stay.
        lease.abandon()
        raise


def _create_lease(
    session: Session,
    path: str,
    max_leases: int,
    data: bytes,
    blocking: bool,
    deadline: Deadline,
    name: str,
    what: str,
    lease: Contender,
) -> Contender:
    client = session.client
    layout = layout_of(session)
    while True:
        changed = new_event()
        with session.waking(changed):
            try:
                watch = _setter(changed)  # a late watch of an earlier round must not wake this one
                children = call(
                    session, functools.partial(client.get_children_async, lease.parent, watch=watch), deadline
                )
            except NoNodeError:
                if lease.parent != path:
                    _create_leases_node(session, lease.parent, deadline)
                    continue
                raise SessionGone() from None  # the semaphore node was deleted under us: start over
            if len(layout.leases(children)) < max_leases:
                lease._pending_create = SENDING  # found by its guid if a signal handler's exception cuts it short
                created = create_contender(client, lease.prefix, data, session.acl)
                lease._pending_create = created
                try:
                    try:
                        node, stat = wait_result(created, session, deadline)
                    except (ConnectionLoss, OperationTimeoutError):
                        # The create may or may not have been applied: find our lease by its guid.
                        if _recover_lease(lease, deadline):
                            lease.guarded = _leases_guarded(session, lease.parent, deadline)
                            return lease
                        lease._pending_create = None
                        continue  # it never reached the server: look at the leases again
                except NoNodeError:
                    raise SessionGone() from None  # the semaphore node was reaped under us: start over
                lease._set_node(node, stat.czxid)
                lease._pending_create = None
                lease.guarded = _leases_guarded(session, lease.parent, deadline)
                return lease
            if not blocking:
                raise LockNotAcquired(f"{what}: all {max_leases} leases are held", name=name)
            lease.waited = True
            while not changed.is_set():
                remaining = deadline.remaining()
                if deadline.expired():
                    if not deadline.cancelled():
                        # Only an answer backs "all leases are held": an outage raises ZkUnavailable instead.
                        call(session, functools.partial(client.sync_async, lease.parent), deadline)
                    raise LockTimeout(f"{what}: no lease within the timeout", name=name)
                slice_ = session.timeout / 3 if deadline.cancel is None else 0.05
                changed.wait(slice_ if remaining is None else min(slice_, remaining))
                if not session.is_alive():
                    raise SessionGone()
                if session.unresponsive:
                    raise session.unavailable("no answer from the server while waiting for a lease")


def _leases_guarded(session: Session, parent: str, deadline: Deadline) -> bool:
    """Whether only the alias may delete the leases (queue.judge_parent): read once per session and node."""
    known = queue.known_parent_guard(session, parent)
    if known is not None:
        return known
    try:
        acl, _ = call(session, lambda: session.client.get_acls_async(parent), deadline)
    except (NoNodeError, ZkAuthError, ZkUnavailable):
        return False
    return judge_parent(session, parent, acl)


def _recover_lease(lease: Contender, deadline: Deadline) -> bool:
    """After a connection loss during our lease create: True once our lease node is adopted, False if the
    create was never applied (docs/design.md §3, as the lock queue does)."""
    session, client = lease.session, lease.session.client
    session.wait_connected(deadline)
    # sync first: we may have reconnected to a server that has not applied our create yet.
    call(session, lambda: client.sync_async(lease.parent), deadline)
    children = call(session, lambda: client.get_children_async(lease.parent), deadline)
    mine = lease._find_own(children)
    if mine is None:
        return False
    lease._adopt(mine, deadline)
    return True


def _create_leases_node(session: Session, leases_path: str, deadline: Deadline) -> None:
    """Curator's layout keeps the leases in a child of the semaphore node, which Curator creates on demand."""
    try:
        call(session, lambda: session.client.create_async(leases_path, b"", acl=session.acl), deadline)
    except NodeExistsError:
        pass
    except NoNodeError:
        raise SessionGone() from None  # the semaphore node was deleted under us: start over


def _setter(event: threading.Event):
    return lambda _event: event.set()

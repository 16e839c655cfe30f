"""Waiting for kazoo's answers within a deadline (client/deadline.py), and the one translator from kazoo errors to
zklocks errors.

Every recipe waits through :func:`wait_result` or :func:`call`, and every other module that talks to ZooKeeper
turns a kazoo error into the error a user sees with :func:`translate`. Knows kazoo, nothing of Django.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import OPEN_ACL_UNSAFE

from ..client.deadline import Deadline, DeadlinePassed
from ..client.interrupts import unmasked
from ..client.kazoo_adapter.calls import children_request, create_contender_async, exists_request, send, sync_request
from ..exceptions import ZkAuthError, ZkLocksError, ZkUnavailable

if TYPE_CHECKING:
    from ..client.session import Session

NOAUTH_HINT = "Check the alias's AUTH credentials and the ACL of its NAMESPACE."


def create_contender(client, prefix: str, data: bytes, acl):
    """Send the create of an ephemeral sequential node and read back its stat: a result whose value is
    ``(path, stat)``.

    kazoo's ``create_async`` hands its answer to its callback thread before the caller sees it: a thread hop per
    acquire, behind whatever callbacks were queued before it. Without a chroot (whose prefix kazoo's callback
    strips), its inner create is answered by the connection thread itself. As with kazoo's, an error of the send
    is the result's; an exception raised by a signal handler reaches the caller (kazoo_adapter/hooks.py).
    """
    if client.chroot:
        return client.create_async(prefix, data, acl=acl, ephemeral=True, sequence=True, include_data=True)
    if acl is None:
        acl = client.default_acl or OPEN_ACL_UNSAFE
    try:
        return create_contender_async(client, prefix, data, acl)
    except KazooException as exc:  # the client is closed or its session ended: kazoo's create fails the result
        failed = client.handler.async_result()
        failed.set_exception(exc)
        return failed


def send_request(client, request):
    """Send one of kazoo's request records through the client's request path (with the session's hooks:
    kazoo_adapter/hooks.py); the result is answered by the connection thread. For paths that are clean already
    (built by names.py and the layouts) on a client without a chroot: kazoo's public methods would check and
    normalize them again on every call, which is most of their cost on the lock's path."""
    result = client.handler.async_result()
    send(client, request, result)
    return result


def synced_exists(client, path: str):
    """A ``sync`` then an ``exists`` of ``path``, pipelined; the result is the exists' (a stat, or None).

    The read reflects everything the leader had committed when it answered the sync. kazoo's ``sync_async``
    hands its answer to its callback thread, a hop per check that nobody here waits for: the record is sent
    directly instead (with a chroot, through kazoo's methods, which strip it).
    """
    if client.chroot:
        return _AfterSync(client.sync_async(path), client.exists_async(path))
    return _AfterSync(send_request(client, sync_request(path)), send_request(client, exists_request(path)))


def children_of(client, parent: str):
    """The children of ``parent`` (a result), read without a watch."""
    if client.chroot:
        return client.get_children_async(parent)
    return send_request(client, children_request(parent))


def synced_children(client, parent: str):
    """A ``sync`` then a listing of ``parent``, pipelined; the result is the listing's.

    For a verdict of contention drawn from a read alone: a server cut off from the quorum still answers reads
    from its stale copy for syncLimit ticks, but never a sync, so the verdict waits for the leader or becomes
    ZkUnavailable (as :func:`synced_exists`)."""
    if client.chroot:
        return _AfterSync(client.sync_async(parent), client.get_children_async(parent))
    return _AfterSync(send_request(client, sync_request(parent)), send_request(client, children_request(parent)))


class CheckedResult:
    """A kazoo async result whose answer is judged before the caller sees it: waiting and linking go to the
    wrapped result, and ``_unwrap`` (a subclass's) turns its answer into the value or the error."""

    __slots__ = ("_result",)

    def __init__(self, result) -> None:
        self._result = result

    def _unwrap(self):
        raise NotImplementedError

    def get(self, block: bool = True, timeout: float | None = None):
        self._result.get(block, timeout)
        return self._unwrap()

    def get_nowait(self):
        return self._unwrap()

    def rawlink(self, callback) -> None:
        self._result.rawlink(lambda _r: callback(self))

    def ready(self) -> bool:
        return self._result.ready()

    def wait(self, timeout: float | None = None) -> bool:
        return self._result.wait(timeout)

    @property
    def exception(self):
        try:
            self._unwrap()
        except Exception as exc:  # noqa: BLE001 the failure is the answer
            return exc
        return None


class _AfterSync(CheckedResult):
    """A read sent after a ``sync``, as one result: the read's answer, unless the sync failed. A server that
    refuses the sync (a read-only server answers NotReadOnly at once) still answers the read from its own copy,
    which must not pass for a synced read. One connection answers in order, so the sync's answer is in once the
    read's is."""

    __slots__ = ("_sync",)

    def __init__(self, sync, read) -> None:
        super().__init__(read)
        self._sync = sync

    def _unwrap(self):
        if self._sync.ready() and self._sync.exception is not None:
            raise self._sync.exception
        return self._result.get_nowait()


class SessionGone(Exception):
    """Our session is lost or closed: whatever we enqueued is gone with it."""


def translate(
    exc: BaseException,
    alias: str,
    action: str = "run the request",
    *,
    hint: str = NOAUTH_HINT,
    timeout: float | None = None,
) -> Exception:
    """The zklocks error to raise for a kazoo error ``exc`` met while trying to ``action`` on ``alias``.

    NoAuth and a rejected AUTH are ZkAuthError; silence, a lost connection and an ended session are ZkUnavailable;
    any other kazoo error is a ZkLocksError naming the action. Anything else comes back unchanged. (Recipes treat
    an ended session as SessionGone and start over before it ever gets here.)
    """
    prefix = f"zklocks alias {alias!r}: "
    if isinstance(exc, NoAuthError):
        return ZkAuthError(f"{prefix}ZooKeeper refused to {action} (NoAuth). {hint}")
    if isinstance(exc, AuthFailedError):
        return ZkAuthError(f"{prefix}ZooKeeper rejected the AUTH credentials (unknown scheme or malformed credential).")
    if isinstance(exc, KazooTimeoutError):
        within = f" within {timeout:g}s" if timeout is not None else ""
        return ZkUnavailable(f"{prefix}ZooKeeper did not answer{within} (trying to {action})")
    if isinstance(exc, (SessionExpiredError, ConnectionClosedError, ConnectionLoss)):
        return ZkUnavailable(
            f"{prefix}the ZooKeeper session or connection ended while trying to {action} ({type(exc).__name__})"
        )
    if isinstance(exc, KazooException):
        return ZkLocksError(f"{prefix}could not {action} ({type(exc).__name__})")
    return exc  # type: ignore[return-value]


def answer_limits(session: Session, deadline: Deadline) -> tuple[float, float]:
    """How long to wait for an answer: first until the caller's deadline (at most CONNECT_TIMEOUT), then, if the
    deadline passed with the connection up, for the rest of CONNECT_TIMEOUT.

    The caller's deadline never turns a missing answer into a timeout: a request that ZooKeeper has not answered
    says nothing about contention, so it ends either in its answer or in ZkUnavailable (see :func:`overdue`).
    """
    cap = session.cfg.connect_timeout
    remaining = deadline.remaining()
    first = cap if remaining is None else min(max(remaining, 0.0), cap)
    return first, cap - first


def overdue(session: Session, deadline: Deadline, *, finally_: bool) -> None:
    """No answer yet: raise what that means, or return to wait for the rest of CONNECT_TIMEOUT.

    ``finally_`` is True once the whole CONNECT_TIMEOUT has passed. A cancelled async caller gets DeadlinePassed
    (nobody reads its error); a dead session SessionGone; a deadline met while disconnected ZkUnavailable at once.
    """
    if deadline.final():
        raise DeadlinePassed()
    if session.dead:
        raise SessionGone()
    error = outage_error(session, deadline)
    if error is not None:
        raise error
    if finally_:
        raise translate(KazooTimeoutError(), session.alias, timeout=session.cfg.connect_timeout)
    if not session.connected:
        raise session.unavailable("the connection was down when the call's timeout ran out")


def silence_check(session: Session) -> float:
    """While an answer is awaited: how often to look whether the session was marked unresponsive."""
    return max(0.05, session.cfg.connect_timeout / 16)


def outage_error(session: Session, deadline: Deadline) -> ZkUnavailable | None:
    """What a call waiting on ``session`` raises now for an outage, if anything: the server was marked silent, or
    the connection is down past the call's outage bound."""
    if session.unresponsive:
        return session.unavailable("connected, but the server answers nothing")
    if outage_over(session, deadline):
        return session.not_reconnected()
    return None


def outage_over(session: Session, deadline: Deadline) -> bool:
    """The connection is down, and CONNECT_TIMEOUT has passed since the later of the call's start and the fault."""
    return not session.connected and time.monotonic() >= session.outage_bound(deadline.started)


def given_up(session: Session, end: float, deadline: Deadline) -> bool:
    """An answer awaited until ``end`` is given up: the session ended, it was marked unresponsive (Session._watch:
    a server silent since before the request was sent, a pause or a cut link that came while something waited),
    ``end`` came, or the outage outlasted CONNECT_TIMEOUT. CONNECT_TIMEOUT counts from the fault, not from this
    request."""
    return session.dead or session.unresponsive or time.monotonic() >= end or outage_over(session, deadline)


def answered(async_result, session: Session, limit: float, deadline: Deadline) -> bool:
    """Wait at most ``limit`` seconds for the answer; False sooner once it is given up (given_up)."""
    end = time.monotonic() + limit
    step = silence_check(session)
    try:
        while not async_result.wait(max(0.0, min(end - time.monotonic(), step))):
            if given_up(session, end, deadline):
                return False
    except RuntimeError as exc:
        raise unmasked(exc) from None  # a signal handler's exception, hidden by threading's Condition
    return True


def wait_result(async_result, session: Session, deadline: Deadline):
    """The value of a kazoo async result, bounded by CONNECT_TIMEOUT and by the session's life.

    An exception raised while we wait (a signal handler's: Celery's soft time limit, KeyboardInterrupt) reaches
    the caller: nothing here catches it.
    """
    first, rest = answer_limits(session, deadline)
    if not answered(async_result, session, first, deadline):
        overdue(session, deadline, finally_=rest <= 0)
        if not answered(async_result, session, rest, deadline):
            overdue(session, deadline, finally_=True)
    return outcome(async_result, session)


def outcome(async_result, session: Session):
    """The value of an answered kazoo async result, or its error: an ended session as SessionGone, a refused
    authentication as ZkAuthError, any other kazoo error as it is (the recipes handle those)."""
    try:
        return async_result.get_nowait()
    except (SessionExpiredError, ConnectionClosedError):
        raise SessionGone() from None
    except (NoAuthError, AuthFailedError) as exc:
        raise translate(exc, session.alias) from exc


def call(session: Session, make: Callable[[], object], deadline: Deadline):
    """Run an idempotent request, retrying through connection loss (bounded by CONNECT_TIMEOUT).

    A reconnect after the caller's deadline earns one more try, so that the call ends in an answer (which the
    recipe judges) or in ZkUnavailable, never in a timeout that no answer backs.
    """
    late_tries = 0
    while True:
        if session.dead:
            raise SessionGone()
        try:
            return wait_result(make(), session, deadline)
        except (ConnectionLoss, OperationTimeoutError):
            session.wait_connected(deadline)
            if deadline.final():
                raise DeadlinePassed() from None
            if deadline.expired():
                late_tries += 1
                if late_tries > 1:
                    raise session.unavailable("the connection kept dropping past the call's timeout") from None

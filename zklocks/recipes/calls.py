"""Deadlines, waiting for kazoo's answers, and the one translator from kazoo errors to zklocks errors.

Every recipe waits through :func:`wait_result` or :func:`call`, and every other module that talks to ZooKeeper
turns a kazoo error into the error a user sees with :func:`translate`. Knows kazoo, nothing of Django.
"""

from __future__ import annotations

import threading
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

from ..exceptions import ZkAuthError, ZkLocksError, ZkUnavailable

if TYPE_CHECKING:
    from ..session import Session

NOAUTH_HINT = "Check the alias's AUTH credentials and the ACL of its NAMESPACE."


class SessionGone(Exception):
    """Our session is lost or closed: whatever we enqueued is gone with it."""


class DeadlinePassed(Exception):
    """A recipe's own deadline passed; the caller turns it into LockTimeout naming the lock."""


class Deadline:
    """An absolute monotonic deadline; ``None`` waits for ever."""

    __slots__ = ("at", "cancel")

    def __init__(self, timeout: float | None, cancel: threading.Event | None = None) -> None:
        self.at = None if timeout is None else time.monotonic() + max(0.0, timeout)
        self.cancel = cancel  # set by an async caller whose task was cancelled

    def remaining(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()

    def expired(self) -> bool:
        if self.cancel is not None and self.cancel.is_set():
            return True
        return self.at is not None and time.monotonic() >= self.at


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


def wait_result(async_result, session: Session, deadline: Deadline):
    """The value of a kazoo async result, bounded by ``deadline`` and by the session's life."""
    remaining = deadline.remaining()
    # A healthy server answers in milliseconds: no answer within CONNECT_TIMEOUT is an outage, not a wait.
    cap = session.cfg.connect_timeout
    limit = cap if remaining is None else min(max(remaining, 0.0), cap)
    try:
        async_result.get(timeout=limit)
    except KazooTimeoutError as exc:
        if deadline.expired():
            raise DeadlinePassed() from None
        raise translate(exc, session.alias, timeout=cap) from None
    except Exception:
        pass  # the answer is an error: outcome() raises it
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
    """Run an idempotent request, retrying through connection loss (bounded by CONNECT_TIMEOUT)."""
    while True:
        if session.dead:
            raise SessionGone()
        try:
            return wait_result(make(), session, deadline)
        except (ConnectionLoss, OperationTimeoutError):
            session.wait_connected(deadline.at)
            if deadline.expired():
                raise DeadlinePassed() from None

"""Where lower layers report what locks and sessions do, for whoever observes (contrib/metrics.py, contrib/tracing.py).

This module imports nothing of zklocks: client/session.py, handles/hold_registry.py and handles/base.py call it,
and the observers register themselves here. With no observer registered every call is one test of an empty tuple.

Observer methods (all optional; see :class:`Observer`) must be cheap and must not raise: they run on the
acquiring thread, on kazoo's connection thread (session states) and on zklocks' worker thread (losses).
"""

from __future__ import annotations

import threading
import time
from typing import Any

observers: tuple[Observer, ...] = ()
_lock = threading.Lock()

#: The results of an acquire attempt (the ``result`` label of zklocks_acquire_seconds).
ACQUIRED, TIMEOUT, NOT_ACQUIRED, UNAVAILABLE = "acquired", "timeout", "not_acquired", "unavailable"

#: What became of a single-execution task call that did not simply run (the ``outcome`` label of
#: zklocks_task_dedup_total), for Celery's SingleExecutionTask and for zklocks.tasks alike.
DEDUP_OUTCOMES = ("skipped", "shared", "debounced", "throttled", "retried", "raised")


class Observer:
    """Override what you need. ``state`` is whatever :meth:`acquire_started` returned."""

    def acquire_started(self, attempt: Attempt) -> Any:
        return None

    def acquire_ended(self, attempt: Attempt, state: Any) -> None:
        pass

    def held(self, hold: Any) -> None:
        """A new hold (not a reentrant one): ``hold.alias``, ``.name``, ``.kind``, ``.acquired_at``."""

    def released(self, hold: Any) -> None:
        """The last release of a hold (lost or not)."""

    def lost(self, hold: Any, reason: str) -> None:
        pass

    def session_state(self, session: Any, state: str) -> None:
        """``state``: "connected", "suspended", "lost", or "closed" (the session is gone)."""

    def task_deduplicated(self, task: str, outcome: str) -> None:
        """A single-execution task call did not simply run: ``outcome`` is one of :data:`DEDUP_OUTCOMES`."""


def register(observer: Observer) -> None:
    global observers
    with _lock:
        if observer not in observers:
            observers = (*observers, observer)


def unregister(observer: Observer) -> None:
    global observers
    with _lock:
        observers = tuple(o for o in observers if o is not observer)


class Attempt:
    """One acquire attempt, from its start to its result."""

    __slots__ = ("alias", "kind", "name", "started", "wait", "result", "token", "error", "states")

    def __init__(self, alias: str, kind: str, name: str) -> None:
        self.alias = alias
        self.kind = kind
        self.name = name
        self.started = time.monotonic()
        self.wait = 0.0
        self.result: str | None = None
        self.token: int | None = None
        self.error: BaseException | None = None
        self.states: list[Any] = []


def acquire_started(alias: str, kind: str, name: str) -> Attempt | None:
    if not observers:
        return None
    attempt = Attempt(alias, kind, name)
    attempt.states = [(o, _safe(o.acquire_started, attempt)) for o in observers]
    return attempt


def acquire_ended(attempt: Attempt | None, result: str, token: int | None = None, error: BaseException | None = None):
    if attempt is None or attempt.result is not None:
        return
    attempt.wait = time.monotonic() - attempt.started
    attempt.result = result
    attempt.token = token
    attempt.error = error
    for observer, state in attempt.states:
        _safe(observer.acquire_ended, attempt, state)


def acquired(attempt: Attempt | None, hold: Any) -> None:
    """An acquire succeeded: a new hold, or (``hold.count > 1``) a reentrant one."""
    if attempt is not None:
        acquire_ended(attempt, ACQUIRED, hold.token)
        if hold.count == 1:
            held(hold)


def acquire_failed(attempt: Attempt | None, error: BaseException) -> None:
    if attempt is not None:
        acquire_ended(attempt, result_of(error), error=error)


def result_of(error: BaseException) -> str:
    """timeout, unavailable (no session: ZkUnavailable, ZkAuthError) or not_acquired (anything else)."""
    from ..exceptions import LockTimeout, ZkAuthError, ZkUnavailable  # exceptions.py imports no zklocks module

    if isinstance(error, LockTimeout):
        return TIMEOUT
    if isinstance(error, (ZkUnavailable, ZkAuthError)):
        return UNAVAILABLE
    return NOT_ACQUIRED


def held(hold: Any) -> None:
    for observer in observers:
        _safe(observer.held, hold)


def released(hold: Any) -> None:
    for observer in observers:
        _safe(observer.released, hold)


def lost(hold: Any, reason: str) -> None:
    for observer in observers:
        _safe(observer.lost, hold, reason)


def session_state(session: Any, state: str) -> None:
    for observer in observers:
        _safe(observer.session_state, session, state)


def task_deduplicated(task: str, outcome: str) -> None:
    for observer in observers:
        _safe(observer.task_deduplicated, task, outcome)


def _safe(method, *args):
    try:
        return method(*args)
    except Exception as exc:  # an observer never breaks a lock
        from .interrupts import raised_by_signal_handler  # imports no zklocks module

        if raised_by_signal_handler(exc):
            raise  # not the observer's failure: a signal handler's exception reaches the caller
        import logging

        logging.getLogger("zklocks").debug("zklocks: observer %r failed", method, exc_info=True)
        return None

"""The deadline of a lock call: when a wait for the lock ends, and whether a wait for an answer ends with it."""

from __future__ import annotations

import threading
import time


class DeadlinePassed(Exception):
    """A recipe's own deadline passed; the caller turns it into LockTimeout naming the lock."""


class Deadline:
    """An absolute monotonic deadline; ``None`` waits for ever.

    A lock's deadline bounds the wait for the lock, not the wait for an answer: a request unanswered at the
    deadline is waited for until CONNECT_TIMEOUT (see :func:`overdue`). A ``hard`` deadline also ends the wait
    for an answer, with DeadlinePassed (for a check that must end when the lease does).
    """

    __slots__ = ("at", "cancel", "hard", "started")

    def __init__(self, timeout: float | None, cancel: threading.Event | None = None, *, hard: bool = False) -> None:
        self.started = time.monotonic()  # an outage met by the call is bounded from here at the latest
        self.at = None if timeout is None else self.started + max(0.0, timeout)
        self.cancel = cancel  # set by an async caller whose task was cancelled
        self.hard = hard

    def remaining(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()

    def expired(self) -> bool:
        if self.cancel is not None and self.cancel.is_set():
            return True
        return self.at is not None and time.monotonic() >= self.at

    def cancelled(self) -> bool:
        """The async caller whose thread runs this wait was cancelled: nobody reads the outcome any more."""
        return self.cancel is not None and self.cancel.is_set()

    def final(self) -> bool:
        """Passed, and no answer is waited for past it: a cancelled caller, or a hard deadline."""
        return self.cancelled() or (self.hard and self.expired())

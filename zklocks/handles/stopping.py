"""``on_lost``: what a lost hold does to the work it protected (docs/lost.md): "notify" (the default), "cancel" (a
:class:`Stopper` armed by the acquire cancels an asyncio holder, and stops a thread at its next checkpoint:
:func:`checkpoint`, ``ensure_held()``, :func:`query_checkpoint`, the end of its ``with``; never by an asynchronous
exception) or "terminate" (SingleExecutionTask only).

The loss is decided on the worker thread (client/session.py), :data:`CANCEL_AHEAD` or :data:`TERMINATE_AHEAD` before
the lease deadline (never later); ``Hold.mark_lost`` fires every armed stopper of the hold before anything else, and
the holder disarms its stoppers first thing in its release (docs/lost.md, "How the stop never lands outside the
hold"). Threads that work for an asyncio holder with a copy of its context go on raising after it has left.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any

from .. import owners
from ..client import clock, interrupts
from ..exceptions import LockLost

ON_LOST = ("notify", "cancel", "terminate")

# How long before the lease deadline a session with stopping holds declares the loss: a thread or a task needs a
# few milliseconds to get to its next instruction, and more on a machine short of CPU (a thread starved for 200 ms
# stopped past the lease's margin with 50 ms); "terminate" also stores the task's failure before the kill.
CANCEL_AHEAD = 0.15
TERMINATE_AHEAD = 0.4


def check_on_lost(value: Any, *, terminate: bool = False) -> str:
    """``value`` if it is an on_lost mode this caller accepts, else a ValueError saying what is."""
    allowed = ON_LOST if terminate else ON_LOST[:2]
    if value not in allowed:
        extra = "" if terminate else " ('terminate' is for SingleExecutionTask in a prefork or solo worker)"
        raise ValueError(f"on_lost must be one of {', '.join(map(repr, allowed))}, not {value!r}{extra}")
    return value


def check_max_hold(value: Any) -> float | None:
    """``value`` as a cap in seconds (None: no cap), else a ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"max_hold must be None or a number of seconds > 0, not {value!r}")
    return float(value)


# The stoppers of the holds taken in this context: the holder's own, and those of the holder whose context a
# thread was started from (``asyncio.to_thread``, ``sync_to_async``: a copy of the holder's context).
_armed_here: contextvars.ContextVar[tuple[Stopper, ...]] = contextvars.ContextVar("zklocks_stoppers", default=())


def checkpoint() -> None:
    """Raise LockLost here if a hold of the caller under ``on_lost="cancel"`` was lost: its own hold (a thread's,
    or a task's), or the hold of the task whose context this thread was started from, even once that task has
    left the hold (the thread's work was started under it). Cheap when nothing is held: one context lookup."""
    stoppers = _armed_here.get()
    if not stoppers:
        return
    owner = None
    for stopper in stoppers:
        if not stopper.fired or stopper.mode != "cancel":
            continue
        if owner is None:
            owner = owners.current_owner()
        if stopper.owner is not owner:
            raise stopper.lost_error()  # a helper of the holder: its work was started under the hold
        if stopper.armed:
            raise stopper.lost_error()


def note_armed(stopper: Stopper) -> None:
    """In the holder's context, as the acquire arms: its checkpoints, and those of work it starts, watch it. The
    holder's own stoppers disarmed elsewhere (a release on commit, by another thread) go: its context never needs
    them again."""
    owner = stopper.owner
    # Another owner's stopper stays: this context is a helper's, started under that owner's hold.
    _armed_here.set((*(s for s in _armed_here.get() if s.armed or s.owner is not owner), stopper))


def note_disarmed(stoppers: list[Stopper]) -> None:
    """In the holder's context, as the release disarms."""
    here = _armed_here.get()
    if here:
        _armed_here.set(tuple(s for s in here if s not in stoppers))


# Statements that undo or end a savepoint: Django's atomic() rolls back through them, so they always run (a
# refused rollback to a savepoint would let the outer transaction commit half an item).
_UNDOING = ("ROLLBACK", "RELEASE", "SAVEPOINT")


def query_checkpoint(execute: Callable, sql: str, params: Any, many: bool, context: dict) -> Any:
    """A Django ``execute_wrapper`` on every connection (receivers.py): a query of a stopped holder raises
    LockLost instead of running. Inside an atomic block the transaction is marked for rollback too, so that a body
    that catches the LockLost cannot commit what the refused query left half done."""
    if _armed_here.get() and not (isinstance(sql, str) and sql.lstrip()[:9].upper().startswith(_UNDOING)):
        try:
            checkpoint()
        except BaseException:
            connection = context.get("connection")
            if connection is not None and connection.in_atomic_block:
                connection.needs_rollback = True
            raise
    return execute(sql, params, many, context)


def lost_after_body(stoppers: list[Stopper]) -> LockLost | None:
    """At the end of a body that raised nothing: LockLost if a hold was lost under "cancel" in a thread. The body
    ran on to its end without reaching a checkpoint, or caught the LockLost one raised: either way the caller must
    not read the work as done under the lock."""
    fired = next((s for s in stoppers if s.stopped_thread), None)
    return None if fired is None else fired.lost_error()


class Stopper:
    """Stops one holder (a thread, an asyncio task or a worker process) when its hold is lost."""

    def __init__(
        self, hold: Any, mode: str, terminate: Callable[[Stopper], None] | None = None, owner: object = None
    ) -> None:
        self.hold = hold
        self.owner = owner
        self.name: str = hold.name
        self.alias: str = hold.alias
        self.mode = mode
        self.lock = threading.Lock()
        self.armed = True
        self.fired = False
        self.reason: str | None = None
        self.fired_at: float | None = None  # clock.now() of the decision
        self.lease_end: float | None = None  # the lease deadline at that moment (clock.now() basis)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None
        self.cancel_sent = False
        self._terminate = terminate
        if mode == "cancel" and interrupts.running_loop() is not None:
            self.task = asyncio.current_task()
            if self.task is not None:
                self.loop = self.task.get_loop()
        self.ahead = TERMINATE_AHEAD if mode == "terminate" else CANCEL_AHEAD

    def fire(self, reason: str) -> None:
        """On the thread that decided the loss: stop the holder now."""
        with self.lock:
            if not self.armed or self.fired:
                return
            self.fired = True
            self.reason = reason
            self.fired_at = clock.now()
            try:
                self.lease_end = self.hold.session.lease_deadline()
            except Exception:  # noqa: BLE001 - a session already torn down has no deadline to report
                self.lease_end = None
            if self.mode == "terminate":
                pass  # outside the lock: it blocks until the process ends
            elif self.loop is not None:
                try:
                    self.loop.call_soon_threadsafe(self._cancel_task)
                except RuntimeError:  # the loop is closed: no task of it runs any more
                    pass
                return
            else:
                return  # a thread: its next checkpoint raises (see the module docstring)
        if self._terminate is not None:
            self._terminate(self)

    def _cancel_task(self) -> None:
        """On the task's loop: the holder may have left the hold meanwhile (it disarmed on this same thread)."""
        task = self.task
        if self.armed and task is not None and not task.done():
            self.cancel_sent = True
            task.cancel(f"zklocks: lock {self.name!r} lost ({self.reason})")

    def disarm(self) -> None:
        """In the holder, first thing in its release: no stop of the holder may come after this."""
        with self.lock:
            self.armed = False

    @property
    def stopped_thread(self) -> bool:
        """Whether this stopper fired for a thread holder, which then must not leave its hold as if held."""
        return self.fired and self.mode == "cancel" and self.loop is None

    def lost_error(self) -> LockLost:
        exc = LockLost(name=self.name, alias=self.alias, reason=self.reason or "lost")
        exc.fired_at = self.fired_at  # type: ignore[attr-defined]
        exc.lease_end = self.lease_end  # type: ignore[attr-defined]
        return exc

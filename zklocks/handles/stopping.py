"""``on_lost``: what a lost hold does to the work it protected (docs/reliability.md, "Lost means stopped").

- "notify" (the default): nothing beyond ``is_held``, ``ensure_held()`` and the ``lock_lost`` signal.
- "cancel": a :class:`Stopper` armed by the acquire stops the holder: LockLost raised in the holding thread
  (``PyThreadState_SetAsyncExc``), or the holding asyncio task cancelled.
- "terminate" (SingleExecutionTask only): the task's failure is stored, then the worker process kills itself.

The loss is decided on the dispatch thread (client/lease_keeping.py): a session with stopping holds declares its
loss :data:`CANCEL_AHEAD` or :data:`TERMINATE_AHEAD` before the lease deadline (never later), and
``Hold.mark_lost`` fires every armed stopper of the hold before anything else.

The stopper never lands outside the hold: the holder disarms it first thing in its release (enforce.py, base.py),
under the stopper's lock, and clears an exception that was set but not yet raised. CPython raises a pending
asynchronous exception at the thread's next check of its eval breaker (a call's first instruction, a loop's
jump, the return of a C call); the disarm sits inside an inline ``try`` that takes one which lands there, and the
release goes on. Only the first instruction of a ``with`` statement's ``__exit__`` is left uncovered: a stop
that lands there leaves the statement as LockLost without the release, and :func:`left_without_release` lets
the next acquire of that name give the stale hold back (docs/lost.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..client import clock
from ..exceptions import LockLost

log = logging.getLogger("zklocks")

ON_LOST = ("notify", "cancel", "terminate")

# How long before the lease deadline a session with stopping holds declares the loss: a thread or a task needs a
# few milliseconds to get to its next instruction; "terminate" also stores the task's failure before the kill.
CANCEL_AHEAD = 0.05
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


# thread id -> the stopper whose exception is pending in that thread (read by the exception as it is raised)
_fired: dict[int, Stopper] = {}


class LockLostInterrupt(LockLost):
    """LockLost as ``on_lost="cancel"`` raises it in the holding thread. CPython instantiates the class given to
    PyThreadState_SetAsyncExc without arguments, in that thread: the stopper is found by the thread's id."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        stopper = _fired.pop(threading.get_ident(), None)
        if args or kwargs or stopper is None:
            super().__init__(*args, **kwargs)
            return
        stopper.delivered = True
        super().__init__(name=stopper.name, alias=stopper.alias, reason=stopper.reason)
        self.fired_at = stopper.fired_at
        self.lease_end = stopper.lease_end

    def __reduce__(self):
        # What a result backend stores and a client rebuilds: a plain LockLost.
        return (LockLost, (str(self),))


# Shown, logged and stored as what it is for the user: a LockLost.
LockLostInterrupt.__name__ = LockLostInterrupt.__qualname__ = "LockLost"
LockLostInterrupt.__module__ = "zklocks.exceptions"

# Two prototypes of one C function (indexing makes a fresh function object): set an exception, or clear one.
_set_async_exc = ctypes.pythonapi["PyThreadState_SetAsyncExc"]
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_set_async_exc.restype = ctypes.c_int
_clear = ctypes.pythonapi["PyThreadState_SetAsyncExc"]
_clear.argtypes = (ctypes.c_ulong, ctypes.c_void_p)
_clear.restype = ctypes.c_int


def _clear_async_exc(thread_id: int) -> None:
    _clear(thread_id, None)


class Stopper:
    """Stops one holder (a thread, an asyncio task or a worker process) when its hold is lost."""

    def __init__(self, hold: Any, mode: str, terminate: Callable[[Stopper], None] | None = None) -> None:
        self.hold = hold
        self.name: str = hold.name
        self.alias: str = hold.alias
        self.mode = mode
        self.lock = threading.Lock()
        self.armed = True
        self.fired = False
        self.delivered = False
        self.reason: str | None = None
        self.fired_at: float | None = None  # clock.now() of the decision
        self.lease_end: float | None = None  # the lease deadline at that moment (clock.now() basis)
        self.thread_id = threading.get_ident()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task | None = None
        self.cancel_sent = False
        self._terminate = terminate
        if mode == "cancel" and asyncio._get_running_loop() is not None:
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
                self.loop.call_soon_threadsafe(self._cancel_task)
                return
            else:
                _fired[self.thread_id] = self
                if _set_async_exc(self.thread_id, LockLostInterrupt) != 1:
                    # No such OS thread: a greenlet's id (gevent, eventlet) or a thread that has ended.
                    _fired.pop(self.thread_id, None)
                    log.warning(
                        "zklocks: lock %r lost (%s): on_lost='cancel' found no thread to stop (greenlets are not "
                        "threads: under gevent or eventlet the loss is only reported)",
                        self.name,
                        reason,
                    )
                return
        if self._terminate is not None:
            self._terminate(self)

    def _cancel_task(self) -> None:
        """On the task's loop: the holder may have left the hold meanwhile (it disarmed on this same thread)."""
        task = self.task
        if self.armed and task is not None and not task.done():
            self.cancel_sent = True
            task.cancel(f"zklocks: lock {self.name!r} lost ({self.reason})")

    def disarm(self) -> None:
        """In the holder, first thing in its release: no stop may come after this."""
        with self.lock:
            self.armed = False
            if self.fired and self.loop is None and self.mode == "cancel" and not self.delivered:
                _fired.pop(self.thread_id, None)
                _clear_async_exc(self.thread_id)

    def lost_error(self) -> LockLost:
        exc = LockLost(name=self.name, alias=self.alias, reason=self.reason or "lost")
        exc.fired_at = self.fired_at  # type: ignore[attr-defined]
        exc.lease_end = self.lease_end  # type: ignore[attr-defined]
        return exc


def swallow_own_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a stopper's LockLost that reached the release itself (the body had ended)."""
    return isinstance(exc, LockLostInterrupt)


def left_without_release(hold: Any) -> bool:
    """Whether a stop reached the holder and the holder has left without releasing: the one instruction before
    a ``with`` statement's ``__exit__`` starts can take a pending stop (see the module docstring)."""
    return hold.lost and any(s.delivered and s.armed for s in hold.stoppers)

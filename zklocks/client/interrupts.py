"""Telling an exception raised by a signal handler from the failure of the code it interrupted, so that it reaches the
caller unchanged also through zklocks' own ``except Exception`` guards (:func:`raised_by_signal_handler`); and locks
such an exception must not leave taken, which kazoo's threads need (:class:`SafeCondition`, :class:`SafeEvent`). See
docs/reference.md, "Exceptions raised by signal handlers"; the CPython internals used here: docs/compatibility.md,
"Python, Django, kazoo".
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import contextvars
import signal
import sys
import threading
from collections.abc import Iterator
from types import BuiltinFunctionType, CodeType
from typing import Any, TypeVar


def _handler_codes() -> set[CodeType]:
    """The code of every Python-level signal handler installed now."""
    codes: set[CodeType] = set()
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        func = getattr(handler, "__func__", handler)  # a bound method's function
        code = getattr(func, "__code__", None)
        if isinstance(code, CodeType):
            codes.add(code)
    return codes


def raised_by_signal_handler(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by (or below) a signal handler installed now, in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return False  # Python runs signal handlers in the main thread only
    tb = exc.__traceback__
    if tb is None:
        return False
    codes = _handler_codes()
    if not codes:
        return False
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


def unmasked(exc: BaseException) -> BaseException:
    """The signal handler's exception that ``exc`` hides, else ``exc``.

    ``threading.Condition.wait`` (under kazoo's result waits and every Event) is not safe against an exception
    raised between two of its own bytecodes: raised just after it released its lock and before its ``try``, the
    ``with`` around it then fails with ``RuntimeError: cannot release un-acquired lock`` and the handler's
    exception is only that error's context. The lock is released either way; the caller must see the handler's
    exception. ``threading.Thread.start`` likewise: raised as the new thread has started, its clean-up fails with a
    KeyError from threading's own code.
    """
    context = exc.__context__
    if context is None or not raised_by_signal_handler(context):
        return exc
    if isinstance(exc, RuntimeError) or _raised_in_threading(exc):
        return context
    return exc


def _raised_in_threading(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename == threading.__file__


class SafeCondition(_thread.RLock):  # type: ignore[misc]  # final in the stubs only
    """A condition variable that an exception raised by a signal handler cannot leave locked.

    ``threading.Condition.__enter__`` is Python code: a handler's exception that lands just after it took its lock
    leaves the lock taken with no ``with`` to give it back, and the next thread to enter it (kazoo's worker
    thread, setting a result or an Event) blocks for ever. Here ``with`` takes and gives back the lock in C, and
    ``wait`` gives it back to its caller whatever lands in it. For kazoo's results (iohandler.py) and the Events
    that the main thread waits on; the lock is taken once at a time (kazoo's callbacks run in its own threads).
    """

    def __init__(self) -> None:
        super().__init__()
        self._waiters: list[Any] = []

    def wait(self, timeout: float | None = None) -> bool:
        if not self._is_owned():  # type: ignore[attr-defined]
            raise RuntimeError("cannot wait on un-acquired lock")
        # What to take back, known before the release: its own answer may be lost to an exception.
        mine = (self._recursion_count(), _thread.get_ident())  # type: ignore[attr-defined]
        waiter = _thread.allocate_lock()
        waiter.acquire()
        got = False
        try:
            self._waiters.append(waiter)  # in the try: the finally takes it out again, whatever lands
            self._release_save()  # type: ignore[attr-defined]
            if timeout is None:
                got = waiter.acquire()
            elif timeout > 0:
                got = waiter.acquire(True, timeout)
            else:
                got = waiter.acquire(False)
            return got
        finally:
            # The caller's ``with`` gives the lock back: it must hold it again, whatever lands here.
            try:
                if not self._is_owned():  # type: ignore[attr-defined]
                    self._acquire_restore(mine)  # type: ignore[attr-defined]
            except BaseException:
                if not self._is_owned():  # type: ignore[attr-defined]
                    self._acquire_restore(mine)  # type: ignore[attr-defined]
                raise
            if not got:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass

    def notify_all(self) -> None:
        # A waiter leaves the list only once released, so that an exception cut short here loses no wake-up.
        waiters = self._waiters
        while waiters:
            waiter = waiters[0]
            try:
                waiter.release()
            except RuntimeError:
                pass  # released already by a notify that an exception cut short
            try:
                waiters.remove(waiter)
            except ValueError:
                pass

    def _at_fork_reinit(self) -> None:
        super()._at_fork_reinit()  # type: ignore[misc]
        self._waiters = []


class SafeEvent(threading.Event):
    """``threading.Event`` on a :class:`SafeCondition`."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = SafeCondition()

    def set(self) -> None:
        with self._cond:
            try:
                self._flag = True
                self._cond.notify_all()
            except BaseException:
                self._cond.notify_all()  # the waiters an exception left unwoken (notify_all keeps them listed)
                raise


# CPython's own names that SafeCondition and SafeEvent build on (threading.Condition and Event use the same ones).
# An interpreter that lacks one gets the standard library's Condition and Event: correct, but with the window a
# signal handler's exception can land in (system check zklocks.W062 says so).
RLOCK_INTERNALS = ("_is_owned", "_release_save", "_acquire_restore", "_recursion_count", "_at_fork_reinit")
EVENT_INTERNALS = ("_flag", "_cond")


# asyncio's: whether a loop runs in this thread, without the exception of get_running_loop (on every acquire);
# a task's cancellation requested but not yet thrown into its coroutine (the C Task has it read-only).
ASYNCIO_INTERNALS = ("_get_running_loop", "_must_cancel")


_get_running_loop = getattr(asyncio, "_get_running_loop", None)  # looked up once: running_loop() is on every acquire


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None."""
    if _get_running_loop is not None:
        return _get_running_loop()
    try:  # the fallback where it is gone: the same answer, at the cost of an exception without a loop
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def cancel_pending(task: asyncio.Task) -> bool:
    """Whether ``task`` has a cancellation requested that has not reached its coroutine yet (False if unknown)."""
    return bool(getattr(task, "_must_cancel", False))


def drop_pending_cancel(task: asyncio.Task) -> None:
    """Withdraw that cancellation, where the task lets us (Python < 3.13's ``uncancel`` leaves it pending)."""
    with contextlib.suppress(AttributeError):
        setattr(task, "_must_cancel", False)  # noqa: B010


# The newest Python whose ``with`` runs no signal handler between a C ``__enter__`` and the block's ``try``, which
# SafeCondition relies on; a later one gets the fallback until the suite has run on it (docs/compatibility.md).
TESTED_UP_TO = (3, 13)


def cpython_internals_missing() -> list[str]:
    """The CPython internals of :class:`SafeCondition` and :class:`SafeEvent` this interpreter lacks."""
    missing = [f"_thread.RLock.{name}" for name in RLOCK_INTERNALS if not hasattr(_thread.RLock, name)]
    if sys.version_info[:2] > TESTED_UP_TO:
        missing.append(f"a with statement known to run no signal handler after a C __enter__ ({_version()})")
    event = threading.Event()
    missing += [f"threading.Event().{name}" for name in EVENT_INTERNALS if not hasattr(event, name)]
    return missing


def _version() -> str:
    return "Python " + ".".join(map(str, sys.version_info[:2]))


_SAFE_WAITS = not cpython_internals_missing()


def green_threads() -> bool:
    """Whether gevent or eventlet has patched threads into greenlets: then their own locks must be used (a C lock
    taken by one greenlet would block every other one in the thread), and the stdlib's Condition and Event are."""
    return not isinstance(_thread.allocate_lock, BuiltinFunctionType)


def safe_waits() -> bool:
    """Whether waits use :class:`SafeCondition`: CPython's internals are there, and threads are not green."""
    return _SAFE_WAITS and not green_threads()


def new_condition() -> Any:
    """A :class:`SafeCondition`, or threading's own Condition (green threads, or the internals missing)."""
    return SafeCondition() if safe_waits() else threading.Condition()


def new_event() -> threading.Event:
    """A :class:`SafeEvent`, or threading's own Event (green threads, or the internals missing)."""
    return SafeEvent() if safe_waits() else threading.Event()


_T = TypeVar("_T")


@contextlib.contextmanager
def set_within(var: contextvars.ContextVar[_T], value: _T) -> Iterator[None]:
    """``var`` set to ``value`` inside the block. Set inside the try and restored by value, not by set()'s token: a
    signal handler's exception can land right after set() returns, before any token is stored, and would leave the
    value set for the thread's later calls."""
    before = var.get()
    try:
        var.set(value)
        yield
    finally:
        var.set(before)

"""Telling an exception raised by a signal handler from the failure of the code it interrupted.

A Python signal handler runs in the main thread between two bytecodes of whatever runs there, and what it raises
comes out of that code: Celery's soft time limit raises SoftTimeLimitExceeded from a SIGUSR1 handler, a SIGALRM
handler raises what its author chose. Such an exception must reach the caller of zklocks unchanged (docs/
reference.md, "Signals"), also where zklocks guards a call with ``except Exception`` (an observer, kazoo's
threads being stopped): there :func:`raised_by_signal_handler` says whether to raise it on. Nor may it leave a
lock taken that another thread needs: :class:`SafeCondition` and :class:`SafeEvent`.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import threading
from types import CodeType
from typing import Any


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
    exception.
    """
    context = exc.__context__
    if isinstance(exc, RuntimeError) and context is not None and raised_by_signal_handler(context):
        return context
    return exc


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
        waiter = _thread.allocate_lock()
        waiter.acquire()
        self._waiters.append(waiter)
        saved = None
        got = False
        try:
            saved = self._release_save()  # type: ignore[attr-defined]
            if timeout is None:
                got = waiter.acquire()
            elif timeout > 0:
                got = waiter.acquire(True, timeout)
            else:
                got = waiter.acquire(False)
            return got
        finally:
            if not self._is_owned():  # type: ignore[attr-defined]
                # Released and not yet taken back (``saved`` is unset if the exception came as the release
                # returned): the caller's ``with`` gives the lock back once, so it must hold it once.
                self._acquire_restore(saved if saved is not None else (1, threading.get_ident()))  # type: ignore[attr-defined]
            if not got:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def notify_all(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            with contextlib.suppress(RuntimeError):  # released already by a notify that an exception cut short
                waiter.release()

    def _at_fork_reinit(self) -> None:
        super()._at_fork_reinit()  # type: ignore[misc]
        self._waiters = []


class SafeEvent(threading.Event):
    """``threading.Event`` on a :class:`SafeCondition`."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = SafeCondition()

"""Telling an exception raised by a signal handler from the failure of the code it interrupted.

A Python signal handler runs in the main thread between two bytecodes of whatever runs there, and what it raises
comes out of that code: Celery's soft time limit raises SoftTimeLimitExceeded from a SIGUSR1 handler, a SIGALRM
handler raises what its author chose. Such an exception must reach the caller of zklocks unchanged (docs/
reference.md, "Signals"), also where zklocks guards a call with ``except Exception`` (an observer, kazoo's
threads being stopped): there :func:`raised_by_signal_handler` says whether to raise it on.
"""

from __future__ import annotations

import signal
import threading
from types import CodeType


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

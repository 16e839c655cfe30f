"""An exception at an exact point of a thread, as a signal handler's (SoftTimeLimitExceeded, KeyboardInterrupt)
may raise at any bytecode: a tracer placed in that thread raises it on the call of a chosen function."""

import sys
import threading
from contextlib import contextmanager


class Interrupted(BaseException):
    """Stands for SoftTimeLimitExceeded / KeyboardInterrupt."""


def raise_at(code, *, nth=1, caller=None):
    """A tracer raising Interrupted on the ``nth`` call of ``code`` (called from ``caller``, if given)."""
    seen = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code is code and (caller is None or frame.f_back.f_code is caller):
            seen.append(frame)
            if len(seen) == nth:
                raise Interrupted(f"injected at {code.co_qualname}")
        return

    return tracer, seen


def callees_of(code, run):
    """The functions that frames of ``code`` call while ``run()`` runs, in the order first called."""
    called = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_back is not None and frame.f_back.f_code is code:
            if frame.f_code not in called:
                called.append(frame.f_code)

    with traced(tracer):
        run()
    return called


@contextmanager
def traced(tracer, install=sys.settrace):
    """``tracer`` installed on this thread (``sys.settrace``, or ``sys.setprofile`` for C calls) inside the block."""
    install(tracer)
    try:
        yield
    finally:
        install(None)


def interrupted_call(call, tracer, *, install=sys.settrace, before=None, after=None):
    """In a fresh thread: ``before()``, then ``call()`` under ``tracer``, then ``after()``. The box says what
    happened: ``"interrupted"``, the Interrupted the call raised; ``"after"``, what ``after()`` returned."""
    box = {}

    def run():
        try:
            if before:
                before()
            with traced(tracer, install):
                call()
        except Interrupted as exc:
            box["interrupted"] = exc
        if after:
            box["after"] = after()

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    return box


def interrupted_acquire(handle, tracer, *, before=None, after=None):
    """:func:`interrupted_call` of ``handle.acquire()``."""
    return interrupted_call(handle.acquire, tracer, before=before, after=after)


def after_c_call(name: str, code, handler):
    """A profile function that runs ``handler`` (which raises) when a C function ``name`` returns to ``code``."""

    def profile(frame, event, arg):
        if event == "c_return" and frame.f_code is code and getattr(arg, "__name__", "") == name:
            sys.setprofile(None)
            handler()

    return profile


def at_entry(code, handler):
    """A profile function that runs ``handler`` (which raises) as a frame of ``code`` starts."""

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            sys.setprofile(None)
            handler()

    return profile

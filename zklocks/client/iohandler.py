"""A cheaper path through kazoo's connection thread (docs/benchmarks.md, "Reading the figures"): ``PollingHandler``
answers each ``select`` with one ``poll(2)`` call instead of a new epoll selector, with no limit on descriptor numbers
(``select(2)`` stops at 1024), and ``read_without_select`` (kazoo_adapter/hooks.py) lets the reads of an answer try
the socket first. Without ``select.poll`` (Windows) it keeps kazoo's select and the short read path stays off. Either
way its results and Events are signal-safe (interrupts.py).
"""

from __future__ import annotations

import logging
import math
import select as _select
import threading
from collections.abc import Callable
from typing import Any

from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler

from .interrupts import new_condition, new_event
from .kazoo_adapter.calls import AsyncResult, fileobj_to_fd, new_async_result

HAS_POLL = hasattr(_select, "poll")  # Windows has neither poll(2) nor its constants
_READ = getattr(_select, "POLLIN", 0x1)  # as select(2): urgent data is no reason to wake
_WRITE = getattr(_select, "POLLOUT", 0x4)

log = logging.getLogger(__name__)

# The mark of a watch that PollingHandler runs where its event is read (see dispatch_callback).
_ON_CONNECTION_THREAD = "_zklocks_on_connection_thread"


def on_connection_thread(watch: Callable[[Any], None]) -> Callable[[Any], None]:
    """Mark ``watch`` to run on kazoo's connection thread as its event is read, not on the callback thread.

    Only for a watch that never blocks and sends nothing: it sets flags and wakes a waiter. A send may wait for this
    very thread to drain kazoo's wake-up pipe, so whatever sends goes to the callback thread. It spares the hop to
    the callback thread that each handoff otherwise takes (docs/benchmarks.md, "Speed-only hooks").
    """
    # The mark names the marked code: functools.wraps copies a function's __dict__, and a wrapper (which may well
    # block or send) must not inherit a mark that was given to the function it wraps.
    code = getattr(watch, "__code__", None)
    if code is None:
        raise TypeError(f"on_connection_thread marks a function, not {type(watch).__name__}")
    setattr(watch, _ON_CONNECTION_THREAD, code)
    return watch


def _marked(func: Any) -> bool:
    mark = getattr(func, _ON_CONNECTION_THREAD, None)  # a mock's made-up attribute is no mark: no code matches it
    return mark is not None and mark is getattr(func, "__code__", None)


def poll_select(rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None):
    """``select.select``'s contract (ready readers, ready writers, and an always empty third list) over ``poll``.

    A descriptor in error or hung up counts as ready for what it was asked for, as with ``selectors``: the read or
    write that follows raises, and kazoo turns that into a dropped connection.
    """
    if timeout is not None:
        if not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number")
        if timeout < 0:
            raise ValueError("timeout must be non-negative")
    rfds = [fileobj_to_fd(f) for f in rlist]
    wfds = [fileobj_to_fd(f) for f in wlist]
    poller = _select.poll()
    for fd in rfds:
        poller.register(fd, _READ)
    for fd in wfds:
        poller.register(fd, _WRITE | _READ if fd in rfds else _WRITE)  # a second register replaces the mask
    ready = dict(poller.poll(None if timeout is None else math.ceil(timeout * 1000)))
    if not ready:
        return [], [], []
    if any(events & _select.POLLNVAL for events in ready.values()):
        # A descriptor closed behind the caller's back: kazoo's own select fails on it too (and does not spin).
        raise ValueError("Invalid event mask or fd")
    readable = [f for f, fd in zip(rlist, rfds, strict=True) if ready.get(fd, 0) & ~_WRITE]
    writable = [f for f, fd in zip(wlist, wfds, strict=True) if ready.get(fd, 0) & ~_READ]
    return readable, writable, []


def readable_now(sock: Any) -> bool:
    """Whether bytes wait in ``sock``'s kernel buffer, without waiting; False for a socket closed meanwhile."""
    try:
        if HAS_POLL:
            return bool(poll_select([sock], [], [], 0)[0])
        return bool(_select.select([sock], [], [], 0)[0])
    except (OSError, ValueError, TypeError):
        return False


class PollingHandler(SequentialThreadingHandler):
    """The handler every zklocks session uses unless ``OPTIONS`` names another, where ``select.poll`` exists."""

    name = "zklocks_polling_threading_handler"

    # Results and Events that a signal handler's exception, landing in the main thread's wait, cannot leave locked
    # for kazoo's threads (interrupts.py).
    def async_result(self) -> AsyncResult:
        return new_async_result(self, new_condition, KazooTimeoutError)

    def event_object(self) -> threading.Event:
        return new_event()

    def dispatch_callback(self, callback: Any) -> None:
        func = callback.func
        if not _marked(func):
            return super().dispatch_callback(callback)
        try:
            func(*callback.args)
        except Exception:  # noqa: BLE001 an exception here would end kazoo's loop (kazoo_adapter CONNECTION_THREAD)
            log.exception("zklocks: a waiter's watch failed on the connection thread")
        return None

    def create_socket_pair(self) -> tuple[Any, Any]:
        read_sock, write_sock = super().create_socket_pair()
        # The wake bytes never block their sender (an event loop, kazoo's stop(): kazoo_adapter/hooks.py), with or
        # without MSG_DONTWAIT (Windows has none), and with no timeout that makes a send wait instead.
        write_sock.setblocking(False)
        return read_sock, write_sock

    def select(self, *args: Any, **kwargs: Any):
        if not HAS_POLL:  # no poll(2): kazoo's own select
            return super().select(*args, **kwargs)
        return poll_select(*args, **kwargs)


# What sessions use unless OPTIONS names a handler.
DEFAULT_HANDLER: type[SequentialThreadingHandler] = PollingHandler

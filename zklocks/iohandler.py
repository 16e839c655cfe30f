"""kazoo's threading handler with a cheaper ``select``.

kazoo's connection thread calls ``handler.select`` several times per request: before each write and before each of
the two reads of an answer. The stock handler builds a new ``selectors.DefaultSelector`` for every call, which on
Linux is an epoll instance: four or five system calls and a few Python objects, each time. Under contention that
is a large share of a handoff's client CPU. This handler answers the same question with one ``poll(2)`` call.
Like kazoo's own, it has no limit on descriptor numbers (``select(2)`` stops at 1024).
"""

from __future__ import annotations

import math
import select as _select
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

_READ = _select.POLLIN | _select.POLLPRI
_WRITE = _select.POLLOUT


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
    wanted: dict[int, int] = {}
    for fileobj in rlist:
        fd = fileobj_to_fd(fileobj)
        wanted[fd] = wanted.get(fd, 0) | _READ
    for fileobj in wlist:
        fd = fileobj_to_fd(fileobj)
        wanted[fd] = wanted.get(fd, 0) | _WRITE
    poller = _select.poll()
    for fd, mask in wanted.items():
        poller.register(fd, mask)
    ready = dict(poller.poll(None if timeout is None else math.ceil(timeout * 1000)))
    if not ready:
        return [], [], []
    readable = [f for f in rlist if ready.get(fileobj_to_fd(f), 0) & ~_WRITE]
    writable = [f for f in wlist if ready.get(fileobj_to_fd(f), 0) & ~_READ]
    return readable, writable, []


class PollingHandler(SequentialThreadingHandler):
    """The handler every zklocks session uses unless ``OPTIONS`` names another."""

    name = "zklocks_polling_threading_handler"

    def select(self, *args: Any, **kwargs: Any):
        return poll_select(*args, **kwargs)

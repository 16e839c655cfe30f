"""The zklocks worker threads: lost-lock deadlines and background clean-up on one, signals on another.

kazoo calls state listeners and watch callbacks on its own threads, which must never block. They only
record a fact and hand a callable to this thread. Receivers of our signals therefore run on a zklocks
thread and may block or call zklocks freely.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from .. import forking
from . import clock

log = logging.getLogger("zklocks")


class Dispatcher:
    def __init__(self, name: str = "zklocks-dispatch") -> None:
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Callable[[], object]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def call_soon(self, fn: Callable[[], object]) -> None:
        self.call_at(0.0, fn)

    def call_later(self, delay: float, fn: Callable[[], object]) -> None:
        self.call_at(clock.now() + delay, fn)

    def call_at(self, when: float, fn: Callable[[], object]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = clock.now()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, fn = heapq.heappop(self._heap)
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            try:
                fn()
            except BaseException:  # nothing a callback raises may stop this thread
                log.exception("zklocks background call %r failed", fn)


# Internal work (lease deadlines, clean-up) and signal receivers get separate threads: a receiver that blocks
# must never delay the moment a lost lock is declared lost.
dispatcher = Dispatcher("zklocks-dispatch")
signal_dispatcher = Dispatcher("zklocks-signals")


def reset_after_fork() -> None:
    """In a forked child the threads are gone; start afresh and never run the parent's pending work."""
    global dispatcher, signal_dispatcher
    dispatcher = Dispatcher("zklocks-dispatch")
    signal_dispatcher = Dispatcher("zklocks-signals")


def get() -> Dispatcher:
    return dispatcher


def signals() -> Dispatcher:
    return signal_dispatcher


forking.register(reset_after_fork)

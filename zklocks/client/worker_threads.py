"""The zklocks worker threads: lost-lock deadlines and background clean-up on one, signals on another. kazoo's own
threads, which must never block, only record a fact and hand a callable over (docs/observability.md, "Signals").
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
from collections.abc import Callable

from .. import forking
from . import clock

log = logging.getLogger("zklocks")

# A wait for the next deadline is measured on the monotonic clock, which stops while the machine sleeps; waking at
# least this often lets a deadline on the lease clock (which runs through a suspend) be seen soon after a resume.
LONGEST_WAIT = 1.0

_Call = tuple[float, int, Callable[[], object]]


class WorkerThread:
    """One daemon thread that runs callables at their time; calls due at the same time run in the order scheduled.

    Scheduling is re-entrant: ``call_at`` takes no lock that the caller might already hold. A finalizer, a dying
    generator's ``finally`` or a signal handler may schedule work from inside any code, including this thread's
    own loop and another ``call_at``. Only the thread touches the heap, and it drops each callable outside any lock.
    """

    def __init__(self, name: str = "zklocks-worker") -> None:
        self.name = name
        self._inbox: queue.SimpleQueue[_Call] = queue.SimpleQueue()  # put() is re-entrant, unlike a Lock
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._starting = False
        self._start_lock = threading.RLock()

    def call_soon(self, fn: Callable[[], object]) -> None:
        self.call_at(0.0, fn)

    def call_later(self, delay: float, fn: Callable[[], object]) -> None:
        self.call_at(clock.now() + delay, fn)

    def call_at(self, when: float, fn: Callable[[], object]) -> None:
        self._inbox.put((when, next(self._seq), fn))
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None or self._starting:
                return  # a call made while the thread starts (a finalizer on this thread): its work is queued
            self._starting = True
            try:
                thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                thread.start()
                self._thread = thread  # only once it runs: a start that failed is tried again by the next call
            finally:
                self._starting = False

    def _run(self) -> None:
        heap: list[_Call] = []
        while True:
            self._receive(heap)
            if heap and heap[0][0] <= clock.now():
                fn = heapq.heappop(heap)[2]
                try:
                    fn()
                except BaseException:  # nothing a callback raises may stop this thread
                    log.exception("zklocks background call %r failed", fn)
                del fn  # its last reference may run a finalizer that schedules more: no lock is held here

    def _receive(self, heap: list[_Call]) -> None:
        """Move what was scheduled onto the heap; block until something is due or arrives."""
        wait = min(LONGEST_WAIT, max(0.0, heap[0][0] - clock.now())) if heap else None  # None: until one arrives
        try:
            heapq.heappush(heap, self._inbox.get_nowait() if wait == 0.0 else self._inbox.get(timeout=wait))
            while True:
                heapq.heappush(heap, self._inbox.get_nowait())
        except queue.Empty:
            pass


# Internal work (lease deadlines, clean-up) and signal receivers get separate threads: a receiver that blocks
# must never delay the moment a lost lock is declared lost.
worker = WorkerThread("zklocks-worker")
signal_worker = WorkerThread("zklocks-signals")


def reset_after_fork() -> None:
    """In a forked child the threads are gone; start afresh and never run the parent's pending work."""
    global worker, signal_worker
    worker = WorkerThread("zklocks-worker")
    signal_worker = WorkerThread("zklocks-signals")


def get() -> WorkerThread:
    return worker


def signals() -> WorkerThread:
    return signal_worker


forking.register(reset_after_fork)

"""zklocks' worker thread: work scheduled from anywhere, even from inside the thread's own loop, runs in order."""

from __future__ import annotations

import threading
import time

from zklocks.client import clock
from zklocks.client.worker_threads import WorkerThread


def test_a_dying_generator_may_schedule_clean_up_from_the_threads_own_loop():
    # The previous callable's last reference dies on the worker thread; its generator's ``finally``
    # schedules more work there. A worker thread that dropped it under its own lock waited for itself for ever.
    worker = WorkerThread("test-worker")
    cleaned = threading.Event()

    def steps():
        try:
            yield
        finally:
            worker.call_soon(cleaned.set)

    def holding_a_suspended_generator():
        steps_ = steps()
        next(steps_)
        return lambda: steps_

    worker.call_soon(holding_a_suspended_generator())
    time.sleep(0.1)
    worker.call_soon(lambda: None)
    assert cleaned.wait(5)
    ran = threading.Event()
    worker.call_soon(ran.set)  # and it still serves everybody else
    assert ran.wait(5)


def test_scheduling_from_inside_a_call_and_from_a_finalizer_on_the_caller():
    worker = WorkerThread("test-worker")
    order: list[str] = []
    done = threading.Event()

    class Dies:
        def __del__(self) -> None:
            worker.call_soon(lambda: order.append("finalizer"))

    def first() -> None:
        order.append("first")
        worker.call_soon(lambda: (order.append("nested"), done.set()))

    Dies()  # its finalizer schedules from the calling thread before anything else
    worker.call_soon(first)
    assert done.wait(5)
    assert order == ["finalizer", "first", "nested"]


def test_calls_run_at_their_time_and_in_the_order_scheduled():
    worker = WorkerThread("test-worker")
    ran: list[tuple[str, float]] = []
    done = threading.Event()
    start = clock.now()
    worker.call_later(0.3, lambda: (ran.append(("late", clock.now())), done.set()))
    worker.call_later(0.1, lambda: ran.append(("early", clock.now())))
    for i in range(3):
        worker.call_soon(lambda i=i: ran.append((f"soon{i}", clock.now())))
    assert done.wait(5)
    assert [name for name, _ in ran] == ["soon0", "soon1", "soon2", "early", "late"]
    at = dict(ran)
    assert at["early"] - start >= 0.1
    assert at["late"] - start >= 0.3


def test_a_callback_that_raises_does_not_stop_the_thread():
    worker = WorkerThread("test-worker")
    ran = threading.Event()
    worker.call_soon(lambda: 1 / 0)
    worker.call_soon(ran.set)
    assert ran.wait(5)

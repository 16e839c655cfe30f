"""Signals of zklocks, all sent from the ``zklocks-signals`` thread, never from kazoo's threads: lock_acquired,
lock_released, lock_lost, task_skipped and task_deduplicated. Their arguments: docs/reference.md, "Signals".
"""

from __future__ import annotations

from django.dispatch import Signal

from .client import observe, worker_threads

lock_acquired = Signal()
lock_released = Signal()
lock_lost = Signal()
task_skipped = Signal()
task_deduplicated = Signal()


def send_async(signal: Signal, sender: object, **kwargs: object) -> None:
    """Queue ``signal`` for the worker thread; free when nobody listens."""
    if not signal.receivers or not signal.has_listeners(sender):  # the first test costs nothing, the second a lock
        return
    worker_threads.signals().call_soon(lambda: signal.send_robust(sender, **kwargs))


def task_outcome(sender: object, task: str, outcome: str, name: str, alias: str, task_id: str | None) -> None:
    """Report a de-duplication outcome: the ``task_deduplicated`` signal and zklocks_task_dedup_total."""
    if outcome not in observe.DEDUP_OUTCOMES:
        raise ValueError(f"unknown de-duplication outcome {outcome!r}")
    observe.task_deduplicated(task, outcome)
    send_async(task_deduplicated, sender, task=task, outcome=outcome, name=name, alias=alias, task_id=task_id)

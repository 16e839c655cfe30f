"""Signals of zklocks. All are sent from the ``zklocks-signals`` thread, never from kazoo's threads.

lock_acquired(name, alias, kind, token, wait_time)
lock_released(name, alias, kind, token, held_time)
lock_lost(name, alias, kind, token, reason, task_id)   reason: "expired", "suspended", "deleted", "closed"
task_skipped(task, name, alias, task_id)                from zklocks.celery, when on_locked="skip"
"""

from __future__ import annotations

from django.dispatch import Signal

from .client import worker_threads

lock_acquired = Signal()
lock_released = Signal()
lock_lost = Signal()
task_skipped = Signal()


def send_async(signal: Signal, sender: object, **kwargs: object) -> None:
    """Queue ``signal`` for the dispatch thread; free when nobody listens."""
    if not signal.has_listeners(sender):
        return
    worker_threads.signals().call_soon(lambda: signal.send_robust(sender, **kwargs))

"""Celery integration: ``SingleExecutionTask`` and the worker hooks (wired on import).

    from zklocks.celery import SingleExecutionTask

    @app.task(base=SingleExecutionTask, lock_key="sync:{account_id}", on_locked="skip")
    def sync_account(account_id): ...
"""

from . import worker  # noqa: F401  (connects the worker signal handlers)
from .task import LockOptions, SingleExecutionTask

__all__ = ["SingleExecutionTask", "LockOptions"]

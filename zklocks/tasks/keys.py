"""The lock name of a task call: Celery's key rules (``zklocks.execution.keys``, free of Celery), applied to a
Django task, whose name is its module path and whose ``context`` parameter is no argument of the key."""

from __future__ import annotations

from ..execution import keys
from .options import call_signature
from .task import SingleExecutionTask


def lock_name(task: SingleExecutionTask, args: tuple | list, kwargs: dict) -> str:
    """InvalidLockName (a ValueError) naming the task if the key is bad; TypeError if the arguments do not fit."""
    func = call_signature(task.func, task.takes_context)
    return keys.lock_name(task.module_path, func, task.lock_key, args, kwargs)


def call_digest(task: SingleExecutionTask, args: tuple | list, kwargs: dict) -> str:
    """Which call this is (the task and its arguments): a queued call is shared only with the same call."""
    return keys.call_digest(task.module_path, call_signature(task.func, task.takes_context), args, kwargs)

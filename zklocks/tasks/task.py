"""The task class of ``SingleExecutionBackend``: Django's ``Task`` plus the single-execution options.

Django passes the extra keyword arguments of ``@task(...)`` to the backend's ``task_class``, so
``@task(lock_key="report:{account_id}", on_locked="skip", unique_queued=True)`` builds one of these. Whoever runs
the task (ImmediateBackend, ``db_worker``) calls ``task.call()``, which runs the function under the lock.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from ..handles.locks import ZkLock
from .compat import Task, TaskContext

_current_lock: contextvars.ContextVar[ZkLock | None] = contextvars.ContextVar("zklocks_task_lock", default=None)


def current_lock() -> ZkLock | None:
    """The lock of the single-execution task running in this context (``.token``, ``.is_held``,
    ``.ensure_held()``); None outside one."""
    return _current_lock.get()


@dataclass(frozen=True, slots=True, kw_only=True)
class LockedTaskContext(TaskContext):  # type: ignore[misc]  # django-stubs does not declare TaskContext frozen
    """The context a ``takes_context`` task receives: Django's ``TaskContext`` plus the lock it runs under."""

    lock: ZkLock

    @property
    def token(self) -> int | None:
        """The fencing token of this execution (strictly increasing over the holders of the key while ZooKeeper
        keeps its data)."""
        return self.lock.token


@dataclass(frozen=True, slots=True, kw_only=True)
class SingleExecutionTask(Task):
    """A task of ``SingleExecutionBackend``. Its options (None: the default), their defaults and meaning are the
    table of docs/tasks.md, "Task options"."""

    lock_key: str | None = None
    on_locked: str | None = None
    lock_timeout: float | None = None
    unique_queued: bool | None = None
    unique_timeout: float | None = None
    lock_retry_countdown: float | None = None
    lock_using: str | None = None

    def option(self, attr: str) -> Any:
        value = getattr(self, attr)
        return DEFAULTS[attr] if value is None else value

    def call(self, *args: Any, **kwargs: Any) -> Any:
        backend = self.get_backend()
        run = getattr(backend, "run_single", None)
        if run is None:  # moved to another backend with .using(backend=...)
            return Task.call(self, *args, **kwargs)
        return run(self, args, kwargs)


DEFAULTS: dict[str, Any] = {
    "on_locked": "skip",
    "lock_timeout": 0.0,
    "unique_queued": False,
    "unique_timeout": 3600.0,
    "lock_retry_countdown": 1.0,
    "lock_using": None,  # the backend's USING
}

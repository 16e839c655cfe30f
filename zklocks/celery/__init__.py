"""Celery integration: ``SingleExecutionTask`` and the worker hooks (docs/celery.md).

The task class and the worker hooks import Celery, so they load on first use of these names; ``conf`` (the
``ZKLOCKS_CELERY`` defaults) does not, and system checks run in projects without Celery.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SingleExecutionTask", "LockOptions"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import task, worker  # noqa: F401  (importing worker connects its signal handlers)

        return getattr(task, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

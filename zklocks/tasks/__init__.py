"""Single execution for Django's tasks framework (``django.tasks``; the ``django-tasks`` backport on Django 5.2).
Settings and task options: docs/tasks.md.

The names load on first use, so ``zklocks.tasks.checks`` runs in projects without the tasks framework.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SingleExecutionBackend", "SingleExecutionTask", "LockedTaskContext", "current_lock"]

_HOMES = {
    "SingleExecutionBackend": "backend",
    "SingleExecutionTask": "task",
    "LockedTaskContext": "task",
    "current_lock": "task",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

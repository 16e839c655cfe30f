"""Django's tasks framework: ``django.tasks`` on Django >= 6.0, the ``django-tasks`` backport on 5.2.

The one place that knows where the framework lives; every other module of ``zklocks.tasks`` imports it from here.
"""

from __future__ import annotations

import django

if django.VERSION >= (6, 0):
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_started
else:  # pragma: no cover - exercised by the Django 5.2 session of make test-matrix
    try:
        from django_tasks import (  # type: ignore[no-redef,assignment,unused-ignore]
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef,assignment,unused-ignore]
        from django_tasks.base import Task  # type: ignore[no-redef,assignment,unused-ignore]
        from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[no-redef,assignment,unused-ignore]
        from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef,assignment,unused-ignore]
        from django_tasks.signals import task_started  # type: ignore[no-redef,assignment,unused-ignore]
    except ImportError as exc:
        raise ImportError(
            "zklocks.tasks needs Django's tasks framework: Django >= 6.0, or the django-tasks backport on "
            f"Django {django.get_version()} (pip install django-tasks)"
        ) from exc

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task",
    "task_backends",
    "task_started",
]

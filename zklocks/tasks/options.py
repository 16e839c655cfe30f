"""Options of single-execution tasks and of ``SingleExecutionBackend``: validation, pure (no ZooKeeper).

A task's problems are recorded for ``manage.py check`` (zklocks.E111) before ``InvalidTask`` refuses the task, so
the check reports a task module that could not be imported because of them. Backend settings: zklocks.E110 (the
``OPTIONS`` of a ``SingleExecutionBackend`` are invalid), W110 (an unknown key in them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .. import names
from ..conf import Problem
from ..execution import option_rules

# task field -> the ZKLOCKS_CELERY key whose rule it follows
TASK_OPTIONS: tuple[tuple[str, str], ...] = (
    ("on_locked", "ON_LOCKED"),
    ("lock_timeout", "LOCK_TIMEOUT"),
    ("unique_queued", "UNIQUE_QUEUED"),
    ("unique_timeout", "UNIQUE_TIMEOUT"),
    ("lock_retry_countdown", "RETRY_COUNTDOWN"),
    ("lock_using", "USING"),
)

BACKEND_KEYS = ("BACKEND", "OPTIONS", "QUEUES", "USING")

# (task, problem) recorded when a task is refused; read by the check.
declared_task_problems: list[tuple[str, str]] = []


def call_signature(func: Callable, takes_context: bool) -> Callable:
    """What the lock key binds against: the task function without its ``context`` parameter."""
    return functools.partial(func, None) if takes_context else func


def task_problems(
    values: dict[str, Any], lock_key: Any, func: Callable, takes_context: bool, supports_defer: bool
) -> list[str]:
    """Why these task options are not acceptable (empty when they are). Pure."""
    problems = []
    for attr, key in TASK_OPTIONS:
        value = values.get(attr)
        if value is None:
            continue
        why = option_rules.value_problem(key, value)
        if why is not None:
            problems.append(f"{attr}: {why.split(' ', 1)[1]}")
    if values.get("on_locked") == "retry" and not supports_defer:
        problems.append(
            "on_locked='retry' enqueues the task again with run_after, which this backend does not support "
            "(supports_defer is False); use 'skip' or 'raise', or a backend with deferred tasks"
        )
    if lock_key is None:
        return problems
    if not isinstance(lock_key, str) or not lock_key:
        return [*problems, f"lock_key must be a non-empty str, not {lock_key!r}"]
    try:
        names.template_fields(lock_key)
    except ValueError as exc:
        return [*problems, f"lock_key {lock_key!r} {exc}"]
    signed = call_signature(func, takes_context)
    missing = names.missing_fields(lock_key, signed)
    if missing:
        arguments = ", ".join(names.signature(signed).parameters) or "none"
        problems.append(
            f"lock_key {lock_key!r} refers to {', '.join(missing)}, which is not an argument of the task "
            f"(arguments: {arguments})"
        )
    return problems


def backend_problems(
    alias: str, raw: Any, aliases: frozenset[str], declared: frozenset[str] = frozenset()
) -> list[Problem]:
    """The ``OPTIONS`` of a SingleExecutionBackend named ``alias`` in settings.TASKS. Pure but for the import.
    ``aliases``: the zklocks aliases configured without error; ``declared``: every name in settings.ZKLOCKS."""
    where = f"TASKS[{alias!r}]"
    hint = (
        'OPTIONS = {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "OPTIONS": {}, "USING": "default"}'
    )
    if not isinstance(raw, dict):
        return [Problem("zklocks.E110", None, f"{where}: OPTIONS must be a dict, not {raw!r}.", hint)]
    problems = []
    unknown = sorted(str(k) for k in set(raw) - set(BACKEND_KEYS))
    if unknown:
        problems.append(
            Problem(
                "zklocks.W110",
                None,
                f"{where}: unknown key(s) {', '.join(unknown)} in the OPTIONS of SingleExecutionBackend.",
                f"Known keys: {', '.join(BACKEND_KEYS)}.",
            )
        )
    why = inner_backend_problem(raw.get("BACKEND"))
    if why is not None:
        problems.append(Problem("zklocks.E110", None, f"{where}: {why}.", hint))
    if not isinstance(raw.get("OPTIONS", {}), dict):
        problems.append(Problem("zklocks.E110", None, f"{where}: OPTIONS['OPTIONS'] must be a dict.", hint))
    using = raw.get("USING", "default")
    if isinstance(using, str) and using in declared and using not in aliases:
        problems.append(
            Problem(
                "zklocks.E110",
                None,
                f"{where}: USING={using!r} names a zklocks alias whose settings are invalid.",
                f"Fix settings.ZKLOCKS[{using!r}]: the zklocks errors of manage.py check say what is wrong.",
            )
        )
    elif not isinstance(using, str) or using not in aliases:
        known = ", ".join(repr(a) for a in sorted(aliases)) or "none"
        problems.append(
            Problem(
                "zklocks.E110",
                None,
                f"{where}: USING={using!r} is not a zklocks alias (configured: {known}).",
                "Name one of the aliases of settings.ZKLOCKS.",
            )
        )
    return problems


def inner_backend_problem(path: Any) -> str | None:
    """Why ``path`` is no backend to wrap (None when it is one)."""
    from django.utils.module_loading import import_string

    from .compat import BaseTaskBackend

    if not isinstance(path, str) or not path:
        return f"OPTIONS['BACKEND'] must be the dotted path of the task backend to wrap, not {path!r}"
    try:
        cls = import_string(path)
    except ImportError as exc:
        return f"OPTIONS['BACKEND'] {path!r} cannot be imported ({exc})"
    if not isinstance(cls, type) or not issubclass(cls, BaseTaskBackend):
        return f"OPTIONS['BACKEND'] {path!r} is not a task backend class"
    if getattr(cls, "zklocks_single_execution", False):
        return f"OPTIONS['BACKEND'] {path!r} is SingleExecutionBackend itself: name the backend it wraps"
    return None

"""The value rules of the single-execution options, shared by Celery's SingleExecutionTask (zklocks.celery.conf,
``ZKLOCKS_CELERY``) and Django's tasks (zklocks.tasks.options): one rule, one message, whichever framework runs
the task. Pure, and free of any framework import."""

from __future__ import annotations

from typing import Any

ON_LOCKED = ("skip", "retry", "raise")
ON_UNAVAILABLE = ("fail", "retry")
ON_LOST = ("notify", "cancel", "terminate")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def value_problem(key: str, value: Any) -> str | None:
    """Why ``value`` is not acceptable for ``key`` (None when it is)."""
    if key in ("LOCK_TIMEOUT", "RETRY_COUNTDOWN"):
        if not _number(value) or value < 0:
            return f"{key} must be a number of seconds >= 0, not {value!r}"
    elif key in ("UNIQUE_TIMEOUT", "RETRY_LOCK_GRACE"):
        if not _number(value) or value <= 0:
            return f"{key} must be a positive number of seconds, not {value!r}"
    elif key == "MAX_RETRIES":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{key} must be an integer >= 0, not {value!r}"
    elif key == "ON_LOCKED":
        if value not in ON_LOCKED:
            return f"{key} must be one of {', '.join(ON_LOCKED)}, not {value!r}"
    elif key == "ON_LOST":
        if value not in ON_LOST:
            return f"{key} must be one of {', '.join(ON_LOST)}, not {value!r}"
    elif key == "MAX_HOLD":
        if value is not None and (not _number(value) or value <= 0):
            return f"{key} must be None or a positive number of seconds, not {value!r}"
    elif key == "ON_UNAVAILABLE":
        if value not in ON_UNAVAILABLE:
            return f"{key} must be one of {', '.join(ON_UNAVAILABLE)}, not {value!r}"
    elif key == "USING":
        if not isinstance(value, str) or not value:
            return f"{key} must be a connection alias (a non-empty string), not {value!r}"
    elif key in ("UNIQUE_QUEUED", "SHARE_RUNNING", "KEEP_LOCK_ON_RETRY"):
        if not isinstance(value, bool):
            return f"{key} must be True or False, not {value!r}"
    elif key == "DEBOUNCE":
        if value is not None and (not _number(value) or value < 0):
            return f"{key} must be None or a number of seconds >= 0, not {value!r}"
    elif key == "THROTTLE":
        if value is not None and (not _number(value) or value <= 0):
            return f"{key} must be None or a positive number of seconds, not {value!r}"
    elif key == "CONCURRENCY":
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"{key} must be an integer >= 1, not {value!r}"
    return None

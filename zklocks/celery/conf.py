"""Defaults of ``SingleExecutionTask`` options: ``settings.ZKLOCKS_CELERY``, validated, cached.

Kept free of Celery imports so that system checks run in projects without Celery. Each task option maps to
one key of the setting (``OPTION_KEYS``); a task attribute left at None takes the setting's value.

Check ids: zklocks.E020 (ZKLOCKS_CELERY not a dict, or an invalid value), W020 (unknown key), E021 (an
invalid option on a SingleExecutionTask subclass, e.g. a lock_key naming a missing argument), W021 (a task
option that neither SingleExecutionTask nor Celery knows: a misspelling such as ``lock_timout``).
"""

from __future__ import annotations

import functools
from typing import Any

from ..conf import Problem

ON_LOCKED = ("skip", "retry", "raise")
ON_UNAVAILABLE = ("fail", "retry")

DEFAULTS: dict[str, Any] = {
    "LOCK_TIMEOUT": 0.0,  # seconds to wait for the lock before on_locked applies
    "ON_LOCKED": "skip",  # skip | retry | raise
    "ON_UNAVAILABLE": "fail",  # fail | retry: what a ZooKeeper outage at acquire time does
    "RETRY_COUNTDOWN": 1.0,  # seconds before a retry (jittered by +-25 %)
    "MAX_RETRIES": 10,  # retries for contention or an outage before the task fails
    "USING": "default",  # connection alias
    "UNIQUE_QUEUED": False,  # enqueue-time de-duplication
    "UNIQUE_TIMEOUT": 3600.0,  # seconds after which a queued marker is stale
}

# task attribute -> ZKLOCKS_CELERY key (Celery's ``from_config`` pattern)
OPTION_KEYS: tuple[tuple[str, str], ...] = (
    ("lock_timeout", "LOCK_TIMEOUT"),
    ("on_locked", "ON_LOCKED"),
    ("on_unavailable", "ON_UNAVAILABLE"),
    ("lock_retry_countdown", "RETRY_COUNTDOWN"),
    ("lock_max_retries", "MAX_RETRIES"),
    ("lock_using", "USING"),
    ("unique_queued", "UNIQUE_QUEUED"),
    ("unique_timeout", "UNIQUE_TIMEOUT"),
)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def value_problem(key: str, value: Any) -> str | None:
    """Why ``value`` is not acceptable for ``key`` (None when it is)."""
    if key in ("LOCK_TIMEOUT", "RETRY_COUNTDOWN"):
        if not _number(value) or value < 0:
            return f"{key} must be a number of seconds >= 0, not {value!r}"
    elif key == "UNIQUE_TIMEOUT":
        if not _number(value) or value <= 0:
            return f"{key} must be a positive number of seconds, not {value!r}"
    elif key == "MAX_RETRIES":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{key} must be an integer >= 0, not {value!r}"
    elif key == "ON_LOCKED":
        if value not in ON_LOCKED:
            return f"{key} must be one of {', '.join(ON_LOCKED)}, not {value!r}"
    elif key == "ON_UNAVAILABLE":
        if value not in ON_UNAVAILABLE:
            return f"{key} must be one of {', '.join(ON_UNAVAILABLE)}, not {value!r}"
    elif key == "USING":
        if not isinstance(value, str) or not value:
            return f"{key} must be a connection alias (a non-empty string), not {value!r}"
    elif key == "UNIQUE_QUEUED":
        if not isinstance(value, bool):
            return f"{key} must be True or False, not {value!r}"
    return None


def option_dict_problems(
    raw: Any, known: dict[str, Any], setting: str, error_id: str, warning_id: str, example: str
) -> list[Problem]:
    """A dict-of-options setting that is no dict (error), or that has keys nobody reads (warning). Pure."""
    if not isinstance(raw, dict):
        return [Problem(error_id, None, f"settings.{setting} must be a dict.", f"For example {setting} = {example}.")]
    unknown = sorted(str(k) for k in set(raw) - set(known))
    if not unknown:
        return []
    return [
        Problem(
            warning_id,
            None,
            f"{setting}: unknown option(s) {', '.join(unknown)}.",
            f"Known options: {', '.join(sorted(known))}.",
        )
    ]


def validate(raw: Any) -> tuple[dict[str, Any], list[Problem]]:
    """Merge ``raw`` (the setting, or None) over DEFAULTS. Invalid values keep their default. Pure."""
    values = dict(DEFAULTS)
    if raw is None:
        return values, []
    problems = option_dict_problems(
        raw, DEFAULTS, "ZKLOCKS_CELERY", "zklocks.E020", "zklocks.W020", '{"ON_LOCKED": "retry"}'
    )
    if not isinstance(raw, dict):
        return values, problems
    for key in DEFAULTS:
        if key not in raw:
            continue
        why = value_problem(key, raw[key])
        if why is None:
            values[key] = raw[key]
        else:
            problems.append(
                Problem(
                    "zklocks.E020",
                    None,
                    f"ZKLOCKS_CELERY: {why}.",
                    f"Remove it to use the default ({DEFAULTS[key]!r}).",
                )
            )
    return values, problems


@functools.cache
def _cached() -> tuple[dict[str, Any], tuple[Problem, ...]]:
    from django.conf import settings

    values, problems = validate(getattr(settings, "ZKLOCKS_CELERY", None))
    return values, tuple(problems)


def task_defaults() -> dict[str, Any]:
    return _cached()[0]


def reset() -> None:
    _cached.cache_clear()


# (task name, problem) recorded when a SingleExecutionTask subclass is created.
declared_task_problems: list[tuple[str, str]] = []
# (task name, message, hint): options given to @app.task that nothing reads (W021).
declared_task_warnings: list[tuple[str, str, str]] = []

# Options of @app.task that Celery reads without making them Task attributes (see add_autoretry_behaviour).
CELERY_DECORATOR_OPTIONS = frozenset(
    {"autoretry_for", "dont_autoretry_for", "retry_kwargs", "retry_backoff", "retry_backoff_max", "retry_jitter"}
)


def unknown_option(where: str, attr: str, value: Any, known: list[str]) -> tuple[str, str, str]:
    """The W021 entry for an option nothing reads, with the nearest known option as a hint. Pure."""
    import difflib

    close = difflib.get_close_matches(attr, known, n=1, cutoff=0.75)
    task_options = ", ".join(["lock_key", *(a for a, _ in OPTION_KEYS)])
    hint = f"Did you mean {close[0]}?" if close else f"SingleExecutionTask options: {task_options}."
    return (
        where,
        f"{attr}={value!r} is not an option of SingleExecutionTask or of Celery tasks; Celery keeps it without "
        "using it.",
        hint,
    )


# -- ZKLOCKS_BEAT: the leader-elected Celery beat (zklocks.celery.beat:LeaderScheduler) --
# Check ids: zklocks.E030 (SCHEDULER is no importable Celery scheduler class), E031 (USING names no configured
# alias), E032 (ZKLOCKS_BEAT not a dict, or ELECTION not a valid lock name), W030 (unknown key), E090
# (FENCE_WORKERS not a bool), E091 (CATCH_UP no catch-up policy; celery/catchup.py).

BEAT_DEFAULTS: dict[str, Any] = {
    "SCHEDULER": "celery.beat:PersistentScheduler",  # the scheduler whose schedule the leader runs
    "USING": "default",  # connection alias of the election
    "ELECTION": "celery-beat",  # election name: beats of one deployment share it
    "CATCH_UP": "once",  # the default catch-up policy of the entries (celery/catchup.py)
    "FENCE_WORKERS": False,  # workers run a beat tick only if no newer leader's tick of its entry ran (beat_fence.py)
}


def validate_beat(raw: Any, aliases: set[str] | frozenset[str]) -> tuple[dict[str, Any], list[Problem]]:
    """Merge ``raw`` (ZKLOCKS_BEAT, or None) over BEAT_DEFAULTS. Pure: the SCHEDULER import is the check's."""
    from ..names import validate_name

    values = dict(BEAT_DEFAULTS)
    if raw is None:
        raw = {}
    problems = option_dict_problems(
        raw,
        BEAT_DEFAULTS,
        "ZKLOCKS_BEAT",
        "zklocks.E032",
        "zklocks.W030",
        '{"SCHEDULER": "django_celery_beat.schedulers:DatabaseScheduler"}',
    )
    if not isinstance(raw, dict):
        return values, problems
    values.update({k: v for k, v in raw.items() if k in BEAT_DEFAULTS})
    scheduler = values["SCHEDULER"]
    if not isinstance(scheduler, str) or not scheduler.strip():
        problems.append(
            Problem(
                "zklocks.E030",
                None,
                f"ZKLOCKS_BEAT: SCHEDULER must be the dotted path of a Celery scheduler class, not {scheduler!r}.",
                'For example "celery.beat:PersistentScheduler".',
            )
        )
    using = values["USING"]
    if not isinstance(using, str) or using not in aliases:
        known = ", ".join(repr(a) for a in sorted(aliases)) or "none"
        problems.append(
            Problem(
                "zklocks.E031",
                None,
                f"ZKLOCKS_BEAT: USING={using!r} is not a zklocks alias (configured: {known}).",
                "Name one of the aliases of settings.ZKLOCKS.",
            )
        )
    if not isinstance(values["FENCE_WORKERS"], bool):
        problems.append(
            Problem(
                "zklocks.E090",
                None,
                f"ZKLOCKS_BEAT: FENCE_WORKERS must be True or False, not {values['FENCE_WORKERS']!r}.",
                "True makes workers drop a tick sent by a deposed beat leader after a newer leader's tick ran.",
            )
        )
        values["FENCE_WORKERS"] = False
    from .catchup import parse as parse_catch_up

    try:
        parse_catch_up(values["CATCH_UP"])
    except ValueError as exc:
        problems.append(Problem("zklocks.E091", None, f"ZKLOCKS_BEAT: CATCH_UP: {exc}.", 'The default is "once".'))
        values["CATCH_UP"] = "once"
    election = values["ELECTION"]
    try:
        validate_name(election)
    except ValueError as exc:
        problems.append(
            Problem(
                "zklocks.E032",
                None,
                f"ZKLOCKS_BEAT: ELECTION={election!r} is not a valid election name ({exc}).",
                'Use a short name such as "celery-beat"; beats that share it elect one leader.',
            )
        )
    return values, problems


def import_scheduler(path: str) -> type:
    """The class at ``path`` ("module:Class" or "module.Class"); ImportError / TypeError say why not."""
    import importlib

    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    if not module_name or not attr:
        raise ImportError(f"{path!r} is not a dotted path to a class")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ImportError(f"module {module_name!r} has no attribute {attr!r}") from None
    from celery.beat import Scheduler

    if not isinstance(target, type) or not issubclass(target, Scheduler):
        raise TypeError(f"{path!r} is not a subclass of celery.beat.Scheduler")
    if getattr(target, "zklocks_leader", False):
        raise TypeError(f"{path!r} is zklocks' own LeaderScheduler: name the scheduler whose schedule it runs")
    return target


@functools.cache
def _beat_cached() -> tuple[dict[str, Any], tuple[Problem, ...]]:
    from django.conf import settings

    from .. import conf as zk_conf

    values, problems = validate_beat(getattr(settings, "ZKLOCKS_BEAT", None), frozenset(zk_conf.get_config()[0]))
    return values, tuple(problems)


def beat_settings() -> dict[str, Any]:
    return _beat_cached()[0]


def beat_problems() -> tuple[Problem, ...]:
    return _beat_cached()[1]


def reset_beat() -> None:
    _beat_cached.cache_clear()

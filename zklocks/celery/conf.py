"""Defaults of ``SingleExecutionTask`` options: ``settings.ZKLOCKS_CELERY``, validated, cached.

Kept free of Celery imports so that system checks run in projects without Celery. Each task option maps to
one key of the setting (``OPTION_KEYS``); a task attribute left at None takes the setting's value. The check ids
(E020, W020, E021, W021, E100-E103, W100, W101) and what each means: docs/reference.md, "System checks".
"""

from __future__ import annotations

import functools
from typing import Any

from ..conf import Problem, closest_hint
from ..execution.option_rules import value_problem  # also read from here by task.py and options.py

DEFAULTS: dict[str, Any] = {
    "LOCK_TIMEOUT": 0.0,  # seconds to wait for the lock before on_locked applies
    "ON_LOCKED": "skip",  # skip | retry | raise
    "ON_UNAVAILABLE": "fail",  # fail | retry: what a ZooKeeper outage at acquire time does
    "RETRY_COUNTDOWN": 1.0,  # seconds before a retry (jittered by +-25 %)
    "MAX_RETRIES": 10,  # retries for contention or an outage before the task fails
    "USING": "default",  # connection alias
    "UNIQUE_QUEUED": False,  # enqueue-time de-duplication
    "UNIQUE_TIMEOUT": 3600.0,  # seconds after which a queued marker is stale
    # De-duplication policies (see zklocks.celery.policies)
    "SHARE_RUNNING": False,  # a call while one runs returns that execution's AsyncResult
    "DEBOUNCE": None,  # seconds: a newer call replaces the queued one (None: off)
    "THROTTLE": None,  # seconds: at most one start per window per key (None: off)
    "CONCURRENCY": 1,  # executions per key at once (above 1: a semaphore)
    "KEEP_LOCK_ON_RETRY": False,  # no other execution starts between the tries of self.retry()
    "RETRY_LOCK_GRACE": 30.0,  # seconds after the retry's countdown during which the lock waits for it
    "ON_LOST": "notify",  # notify | cancel | terminate: what a lost lock does to the running task
    "MAX_HOLD": None,  # seconds: a cap on one execution's hold, ended as a loss under ON_LOST (None: no cap)
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
    ("on_lost", "ON_LOST"),
    ("max_hold", "MAX_HOLD"),
    ("share_running", "SHARE_RUNNING"),
    ("debounce", "DEBOUNCE"),
    ("throttle", "THROTTLE"),
    ("lock_concurrency", "CONCURRENCY"),
    ("keep_lock_on_retry", "KEEP_LOCK_ON_RETRY"),
    ("retry_lock_grace", "RETRY_LOCK_GRACE"),
)
# The options of the de-duplication policies: a bad value on a task is zklocks.E100, not E021.
POLICY_KEYS = frozenset(
    {"SHARE_RUNNING", "DEBOUNCE", "THROTTLE", "CONCURRENCY", "KEEP_LOCK_ON_RETRY", "RETRY_LOCK_GRACE"}
)


def policy_problems(values: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(check id, message, hint) for de-duplication policies that do not go together. Pure.

    ``values``: the task's options by ZKLOCKS_CELERY key, defaults applied.
    """
    out = []
    concurrency = values["CONCURRENCY"]
    if values["SHARE_RUNNING"] and concurrency > 1:
        out.append(
            (
                "zklocks.E101",
                f"share_running=True with lock_concurrency={concurrency}: there is no one running execution to share.",
                "Use lock_concurrency=1 with share_running, or drop share_running.",
            )
        )
    if values["DEBOUNCE"] is not None and values["UNIQUE_QUEUED"]:
        out.append(
            (
                "zklocks.E102",
                "debounce with unique_queued=True: unique_queued keeps the first queued call, debounce the latest.",
                "Choose one of them.",
            )
        )
    if values["KEEP_LOCK_ON_RETRY"] and concurrency > 1:
        out.append(
            (
                "zklocks.E103",
                f"keep_lock_on_retry=True with lock_concurrency={concurrency}: only an exclusive lock is kept "
                "across retries.",
                "Use lock_concurrency=1 with keep_lock_on_retry.",
            )
        )
    if values["DEBOUNCE"] is not None and values["ON_LOCKED"] == "skip" and values["LOCK_TIMEOUT"] == 0:
        out.append(
            (
                "zklocks.W100",
                "debounce with on_locked='skip' and lock_timeout=0: the latest call is skipped when it starts "
                "while an earlier one still runs, so the latest does not always win.",
                'Set on_locked="retry", or a lock_timeout longer than a run.',
            )
        )
    if values["SHARE_RUNNING"] and values["UNIQUE_QUEUED"]:
        out.append(
            (
                "zklocks.W101",
                "share_running=True with unique_queued=True: unique_queued already returns the running "
                "execution's result.",
                "Drop share_running.",
            )
        )
    return out


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
            f"{closest_hint(unknown, frozenset(known))}Known options: {', '.join(sorted(known))}.",
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
# (check id, task name, message, hint): de-duplication policy options (E100-E103, W100, W101).
declared_policy_problems: list[tuple[str, str, str, str]] = []
# (task name, {ZKLOCKS_CELERY key: value}): the options of tasks that set a policy, combined with the defaults
# at check time (policy_problems).
declared_task_options: list[tuple[str, dict[str, Any]]] = []


def declared_policy_messages(defaults: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(check id, task name, message, hint) for the recorded tasks' policy options, over ``defaults``."""
    out = list(declared_policy_problems)
    for where, own in declared_task_options:
        out.extend((i, where, msg, hint) for i, msg, hint in policy_problems({**defaults, **own}))
    return out


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


def validate_beat(
    raw: Any, aliases: set[str] | frozenset[str], declared: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], list[Problem]]:
    """Merge ``raw`` (ZKLOCKS_BEAT, or None) over BEAT_DEFAULTS. Pure: the SCHEDULER import is the check's.
    ``aliases``: the zklocks aliases configured without error; ``declared``: every name in settings.ZKLOCKS."""
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
    if isinstance(using, str) and using in declared and using not in aliases:
        problems.append(
            Problem(
                "zklocks.E031",
                None,
                f"ZKLOCKS_BEAT: USING={using!r} names a zklocks alias whose settings are invalid.",
                f"Fix settings.ZKLOCKS[{using!r}]: the zklocks errors of manage.py check say what is wrong.",
            )
        )
    elif not isinstance(using, str) or using not in aliases:
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


def reset_beat() -> None:
    _beat_cached.cache_clear()

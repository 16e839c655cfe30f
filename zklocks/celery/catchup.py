"""Catch-up after downtime: what a newly elected beat leader does with the ticks nobody sent, by each entry's
``zklocks_catch_up`` option (default ``ZKLOCKS_BEAT["CATCH_UP"]``): "skip", "once", "each:N" or "window:S". See
docs/celery.md, "Celery beat", its paragraph "Catch-up after downtime". A missed tick is a due time after the entry's
last send recorded in ZooKeeper and not later than the election. Pure functions, apart from the schedule objects Celery
gives them.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, NamedTuple

OPTION = "zklocks_catch_up"
MAX_TICKS = 10_000  # missed ticks counted at most (a 1 s entry down for almost three hours)


class Policy(NamedTuple):
    kind: str
    amount: float = 0.0  # each: the most ticks sent; window: seconds

    def __str__(self) -> str:
        if self.kind == "each":
            return f"each:{int(self.amount)}"
        if self.kind == "window":
            return f"window:{self.amount:g}"
        return self.kind


def parse(value: Any) -> Policy:
    """A policy from its spelling; ValueError says what is wrong."""
    if not isinstance(value, str):
        raise ValueError(f"a catch-up policy is a string, not {value!r}")
    kind, sep, arg = value.strip().partition(":")
    if kind in ("skip", "once") and not sep:
        return Policy(kind)
    if kind == "each" and sep:
        try:
            count = int(arg)
        except ValueError:
            count = 0
        if count >= 1:
            return Policy("each", float(count))
    if kind == "window" and sep:
        try:
            seconds = float(arg)
        except ValueError:
            seconds = -1.0
        if seconds > 0 and math.isfinite(seconds):
            return Policy("window", seconds)
    raise ValueError(
        f"{value!r} is no catch-up policy: use 'skip', 'once', 'each:N' (N >= 1 ticks) or 'window:S' (S > 0 seconds)"
    )


def option_of(options: dict[str, Any] | None) -> Any:
    """The policy spelling set on an entry, or None: its options, or its headers (django-celery-beat)."""
    options = options or {}
    if OPTION in options:
        return options[OPTION]
    headers = options.get("headers")
    if isinstance(headers, dict) and OPTION in headers:
        return headers[OPTION]
    return None


def without_option(options: dict[str, Any] | None) -> dict[str, Any]:
    """The entry's options without the policy, which Celery must not pass on to the broker."""
    options = dict(options or {})
    options.pop(OPTION, None)
    headers = options.get("headers")
    if isinstance(headers, dict) and OPTION in headers:
        options["headers"] = {k: v for k, v in headers.items() if k != OPTION}
    return options


def missed_ticks(schedule: Any, since: float, now: float, tz: Any) -> list[float]:
    """Due times (epoch seconds) of ``schedule`` after ``since`` and not after ``now``, oldest first."""
    ticks: list[float] = []
    last = since
    while len(ticks) < MAX_TICKS:
        remaining = schedule.remaining_estimate(datetime.fromtimestamp(last, tz=tz))
        due = schedule.now().timestamp() + remaining.total_seconds()  # remaining counts from the schedule's clock
        if due > now or due <= last:
            break
        ticks.append(due)
        last = due
    return ticks


class Decision(NamedTuple):
    last_run_at: float | None  # the entry's new last run (None: leave it at its last send)
    backlog: list[float]  # missed due times to send now, oldest first


def decide(policy: Policy, ticks: list[float], now: float) -> Decision:
    """What to do with ``ticks`` (the missed due times, oldest first) under ``policy``."""
    if not ticks or policy.kind == "once":
        return Decision(None, [])
    if policy.kind == "skip":
        return Decision(ticks[-1], [])
    if policy.kind == "each":
        return Decision(ticks[-1], ticks[-int(policy.amount) :])
    # window: the send "once" would make is for the first missed tick
    if now - ticks[0] <= policy.amount:
        return Decision(None, [])
    return Decision(ticks[-1], [])


def policy_of(entry: Any, default: Policy) -> Policy:
    """The entry's policy; a bad spelling falls back to ``default`` (the log of the caller says so)."""
    value = option_of(getattr(entry, "options", None))
    return default if value is None else parse(value)


def due_of(entry: Any, now: float) -> float | None:
    """When ``entry``'s next tick is (or was) due, by its schedule and last run; None if unknown."""
    try:
        return now + entry.schedule.remaining_estimate(entry.last_run_at).total_seconds()
    except Exception:  # noqa: BLE001 - a schedule without an estimate: the stamp goes without
        return None


def schedule_problems(beat_schedule: Any) -> list[tuple[str, str]]:
    """(entry name, what is wrong) for each entry of a ``beat_schedule`` dict whose policy is misspelt."""
    if not isinstance(beat_schedule, dict):
        return []
    found = []
    for name, entry in beat_schedule.items():
        value = option_of(entry.get("options")) if isinstance(entry, dict) else None
        if value is None:
            continue
        try:
            parse(value)
        except ValueError as exc:
            found.append((str(name), str(exc)))
    return found


def plan(entry: Any, since: float, now: float, default: Policy, tz: Any, log: Any) -> tuple[Policy, list[float]]:
    """Apply ``entry``'s policy to the ticks it missed between ``since`` (its last send) and ``now`` (the
    election): move its last run, and return (its policy, the missed due times to send now)."""
    try:
        policy = policy_of(entry, default)
    except ValueError as exc:
        log.error("beat: entry %s: %s; using %s", entry.name, exc, default)
        policy = default
    ticks = missed_ticks(entry.schedule, since, now, tz)
    decision = decide(policy, ticks, now)
    if decision.last_run_at is not None:
        entry.last_run_at = datetime.fromtimestamp(decision.last_run_at, tz=tz)
    if ticks:
        sends = len(decision.backlog) if decision.last_run_at is not None else 1
        log.info(
            "beat: %s missed %d tick(s) since its last send; catch-up %s: sending %d", entry.name, len(ticks), policy,
            sends,
        )  # fmt: skip
    return policy, decision.backlog

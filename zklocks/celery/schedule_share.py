"""Live ``beat_schedule`` edits: every beat, standby or not, publishes its ``beat_schedule`` (JSON) in
``__beat__/__schedule__`` when it starts, and the leader merges it into the schedule it runs, about once a second;
the last beat started wins. What can be shared, and django-celery-beat's own change tracking: docs/celery.md,
"Celery beat", its paragraph "Live schedule edits".

The schedule names tasks, their arguments and how often the leader sends them, and anyone who can write the
namespace could write the node: it is signed with the project's SECRET_KEY (SECRET_KEY_FALLBACKS honoured), and
the leader applies only a schedule that a beat of this project signed.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from . import signatures

FORMAT = 1
_SALT = "zklocks.beat-schedule"


def _canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def _signed(body: dict[str, Any], sig: Any) -> bool:
    return signatures.verified(_canonical(body), sig, _SALT)


def _encode_schedule(value: Any) -> dict[str, Any]:
    from celery.schedules import crontab, schedule

    if isinstance(value, bool):
        raise ValueError("a schedule is not a bool")
    if isinstance(value, (int, float)):
        return {"every": float(value)}
    if isinstance(value, timedelta):
        return {"every": value.total_seconds()}
    if isinstance(value, crontab):
        return {
            "crontab": [
                str(value._orig_minute),
                str(value._orig_hour),
                str(value._orig_day_of_week),
                str(value._orig_day_of_month),
                str(value._orig_month_of_year),
            ]
        }
    if type(value) is schedule:
        return {"every": value.run_every.total_seconds(), "relative": bool(value.relative)}
    raise ValueError(f"a schedule of type {type(value).__name__} cannot be shared")


def _decode_schedule(value: dict[str, Any], app: Any) -> Any:
    from celery.schedules import crontab, schedule

    if "crontab" in value:
        minute, hour, day_of_week, day_of_month, month_of_year = value["crontab"]
        return crontab(minute, hour, day_of_week, day_of_month, month_of_year, app=app)
    return schedule(timedelta(seconds=float(value["every"])), relative=bool(value.get("relative")), app=app)


def encode(beat_schedule: dict[str, Any]) -> dict[str, Any]:
    """The JSON form of a ``beat_schedule``; ValueError names the first entry that cannot be shared."""
    out: dict[str, Any] = {}
    for name, entry in (beat_schedule or {}).items():
        try:
            item: dict[str, Any] = {
                "task": str(entry["task"]),
                "schedule": _encode_schedule(entry["schedule"]),
                "args": list(entry.get("args") or ()),
                "kwargs": dict(entry.get("kwargs") or {}),
                "options": dict(entry.get("options") or {}),
            }
            if entry.get("relative"):
                item["relative"] = True
            json.dumps(item)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"entry {name!r}: {exc}") from None
        out[str(name)] = item
    return out


def dumps(beat_schedule: dict[str, Any], host: str, at: float) -> bytes:
    """The signed JSON to publish; ValueError if it cannot be shared, ImproperlyConfigured without a SECRET_KEY."""
    body = {"v": FORMAT, "host": host, "at": round(at, 3), "entries": encode(beat_schedule)}
    body = json.loads(json.dumps(body))  # signed as the leader reads it: an int dict key becomes a string
    return _canonical({**body, "sig": signatures.signature(_canonical(body), _SALT)}).encode()


def loads(raw: bytes, app: Any) -> tuple[str, dict[str, dict[str, Any]]]:
    """(publishing host, a ``beat_schedule`` dict Celery's ``merge_inplace`` takes); ValueError if unreadable."""
    try:
        data = json.loads(raw)
        if data.get("v") != FORMAT:
            raise ValueError(f"unknown format {data.get('v')!r}")
        sig = data.pop("sig", None)
        if not _signed(data, sig):
            raise ValueError(
                "not signed by a beat of this project (another SECRET_KEY, no SECRET_KEY, an older zklocks, or "
                "written by someone else)"
            )
        entries = {}
        for name, item in data["entries"].items():
            entries[name] = {
                "task": item["task"],
                "schedule": _decode_schedule(item["schedule"], app),
                "args": tuple(item.get("args") or ()),
                "kwargs": dict(item.get("kwargs") or {}),
                "options": dict(item.get("options") or {}),
                "relative": bool(item.get("relative")),
            }
        return str(data.get("host", "?")), entries
    except (AttributeError, KeyError, TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"unreadable shared schedule: {exc}") from None


def same_entries(raw: bytes | None, beat_schedule: dict[str, Any]) -> bool:
    """Whether ``raw`` already holds ``beat_schedule`` (then a beat need not write it again)."""
    if raw is None:
        return False
    try:
        data = json.loads(raw)
        sig = data.pop("sig", None)
        # A schedule someone else wrote (unsigned) is published over, whatever its entries.
        return _signed(data, sig) and data.get("entries") == json.loads(json.dumps(encode(beat_schedule)))
    except (AttributeError, ValueError, RecursionError):
        return False


def publish_own(using: str, election: str, beat_schedule: dict[str, Any], host: str, log: Any) -> bool:
    """Publish this beat's ``beat_schedule`` unless the shared one already holds it, or it cannot be shared.
    Never raises: a beat that could not publish runs (and, elected, leads) with its own schedule. False if
    ZooKeeper could not be reached (the caller tries again at its next stand), True once settled."""
    import time

    from django.core.exceptions import ImproperlyConfigured

    from ..client.deadline import Deadline
    from ..client.pools import connections
    from ..exceptions import ZkUnavailable
    from ..names import join_path
    from . import beat_state

    try:
        data = dumps(beat_schedule, host, time.time())
    except (ValueError, ImproperlyConfigured) as exc:
        log.warning("beat: not publishing this beat's beat_schedule (the leader keeps its own): %s", exc)
        return True  # it cannot be shared: asking again would not change that
    try:
        pool = connections[using]
        session = pool.session()
        election_path = join_path(pool.cfg.namespace, election)
        deadline = Deadline(session.cfg.connect_timeout)
        current = beat_state.read_schedule(session, election_path, deadline)
        if same_entries(current[0] if current else None, beat_schedule):
            return True
        beat_state.publish_schedule(session, election_path, data, deadline)
    except ZkUnavailable as exc:  # asked again at the next stand
        log.warning("beat: could not publish this beat's beat_schedule yet: %s", exc)
        return False
    except Exception as exc:  # noqa: BLE001 - publishing is best effort; the beat runs its own schedule
        log.warning("beat: could not publish this beat's beat_schedule: %s", exc)
        return True  # refused (an ACL, a bad alias): asking again would not change that
    log.info("beat: published this beat's beat_schedule (%d entries) for the leader", len(beat_schedule or {}))
    return True


def follow(hold: Any, inner: Any, seen: int | None, app: Any, log: Any) -> tuple[int | None, bool]:
    """Merge the shared schedule into ``inner`` if it changed since ``seen``: (the version now seen, applied)."""
    from ..client.deadline import Deadline
    from . import beat_state

    deadline = Deadline(hold.session.cfg.connect_timeout)
    parent = hold.contender.parent
    version = beat_state.schedule_version(hold.session, parent, deadline)
    if version is None or version == seen:
        return seen, False
    got = beat_state.read_schedule(hold.session, parent, deadline)
    if got is None:
        return seen, False
    raw, version = got
    try:
        host, entries = loads(raw, app)
    except ValueError as exc:
        log.error("beat: ignoring the shared beat_schedule: %s", exc)
        return version, False
    before = {name: entry for name, entry in inner.schedule.items()}
    if hasattr(inner, "schedule_changed"):  # django-celery-beat: rows in the database, which it tracks itself
        inner.update_from_dict(entries)
        removed: list[str] = []
    else:
        inner.merge_inplace(entries)
        inner.install_default_entries(inner.schedule)  # Celery's own (celery.backend_cleanup) stay
        removed = sorted(set(before) - set(inner.schedule))
    added = sorted(set(entries) - set(before))
    log.info(
        "beat: applied the beat_schedule published by %s: %d entries, added %s, removed %s",
        host,
        len(entries),
        added or "none",
        removed or "none",
    )
    return version, True

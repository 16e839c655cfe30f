"""Beat at a glance, for the admin's beat page and ``zklocks_status --beat``: the election's leader and standbys,
each entry's last send, and what the leader writes to ``__beat__/__status__`` (LeaderScheduler._look_around). See
docs/operations.md, "Admin page". Nothing here imports Celery: the admin works in a project whose web processes do not.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..recipes import node_data
from . import catchup
from .beat_state import plausible_time

FORMAT = 1


def status_bytes(inner: Any, policies: dict[str, catchup.Policy], default: catchup.Policy, token: Any, host: str):
    """The leader's status node: each entry's next due time and catch-up policy."""
    now = time.time()
    entries: dict[str, dict[str, Any]] = {}
    for name, entry in list(inner.schedule.items()):
        policy = policies.get(name)
        if policy is None:
            try:
                policy = catchup.policy_of(entry, default)
            except ValueError:
                policy = default
        due = catchup.due_of(entry, now)
        entries[str(name)] = {"next_due": None if due is None else round(due, 3), "catch_up": str(policy)}
    data = {"v": FORMAT, "token": token, "host": host, "entries": entries}
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def read(alias: str | None = None, election: str | None = None) -> dict[str, Any]:
    """The election and its entries as plain data (JSON-able); ``error`` set if ZooKeeper could not be read."""
    from ..client.deadline import Deadline
    from ..client.pools import connections
    from ..names import join_path
    from ..ops import read_model
    from . import beat_state
    from . import conf as celery_conf

    values = celery_conf.beat_settings()
    alias = alias or values["USING"]
    election = election or values["ELECTION"]
    view: dict[str, Any] = {"alias": alias, "election": election, "leader": None, "standbys": [], "entries": []}
    view["default_catch_up"] = str(catchup.parse(values["CATCH_UP"]))
    info, error = read_model.lock_info(alias, election)
    if error:
        view["error"] = error
        return view
    if info is not None:
        view["leader"] = _candidate(info.holder) if info.holder else None
        view["standbys"] = [_candidate(w) for w in info.waiters]
    try:
        pool = connections[alias]
        session = pool.session()
        claims, raw = beat_state.read_view(session, join_path(pool.cfg.namespace, election), Deadline(5.0))
    except Exception as exc:  # noqa: BLE001 - shown on the page instead of a 500
        view["error"] = f"could not read the beat's state: {type(exc).__name__}: {exc}"
        return view
    leader_token = view["leader"]["token"] if view["leader"] else None
    known = _status_entries(raw, leader_token)
    for name in sorted(set(claims) | set(known)):
        claim = claims.get(name)
        extra = known.get(name, {})
        due = extra.get("next_due")
        if due is not None and claim is not None and due <= claim.sent_at:
            due = None  # the tick just sent: the leader writes the next one right after its claims (some ms)
        view["entries"].append(
            {
                "name": name,
                "last_sent_at": claim.sent_at if claim else None,
                "last_token": claim.token if claim else None,
                "last_host": claim.host if claim else None,
                "next_due": due,
                "catch_up": extra.get("catch_up"),
                "in_schedule": name in known,
            }
        )
    return view


def _status_entries(raw: bytes | None, leader_token: Any) -> dict[str, dict[str, Any]]:
    """The leader's status node as {entry: {"next_due", "catch_up"}}: only while the token that wrote it leads, and
    only the fields of the expected types (anyone with write access to the namespace may have written it: a
    malformed node is shown as no status, never as a failed page)."""
    status = node_data.parse(raw)
    if leader_token is None or status.get("token") != leader_token:
        return {}
    entries = status.get("entries")
    if not isinstance(entries, dict):
        return {}
    known: dict[str, dict[str, Any]] = {}
    for name, fields in entries.items():
        if not isinstance(fields, dict):
            fields = {}
        due = fields.get("next_due")
        policy = fields.get("catch_up")
        known[name] = {
            "next_due": due if plausible_time(due) else None,
            "catch_up": policy[:200] if isinstance(policy, str) else None,
        }
    return known


def _candidate(contender: Any) -> dict[str, Any]:
    return {
        "token": contender.token,
        "host": contender.host,
        "pid": contender.pid,
        "since": contender.acquired_at or contender.created_at,
        "session_id": f"0x{contender.session_id:x}",
    }

"""Enqueue-time de-duplication: one persistent marker node, ``<lock node>/__queued__``, per lock name while a task
of that key is queued or running. Its data, liveness rules and bounds, and why it is neither ephemeral nor a TTL
node: docs/celery.md, "Enqueue-time de-duplication". A stale marker is deleted with a version check, so two
producers cannot both replace it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from .. import conf
from ..client.deadline import Deadline, DeadlinePassed
from ..client.pools import Pool, connections
from ..client.session import Session
from ..exceptions import ZkLocksError, ZkUnavailable
from ..names import join_path
from ..recipes import node_data
from ..recipes.kazoo_calls import SessionGone, call
from ..recipes.layout import queued_marker_path
from .holder_task import holder_task_id

log = logging.getLogger("zklocks")

CLOCK_REFRESH = 60.0  # seconds between measurements of the offset to ZooKeeper's clock
_ATTEMPTS = 8

_offsets: dict[str, tuple[float, float]] = {}  # alias -> (measured at, monotonic; server minus local seconds)
_offsets_lock = threading.Lock()


def marker_path(pool: Pool, name: str) -> str:
    return queued_marker_path(join_path(pool.cfg.namespace, name))


def _set_data(path: str, value: bytes, version: int) -> Callable[[Session], Any]:
    return lambda s: s.client.set_async(path, value, version=version)


def _delete(path: str, version: int) -> Callable[[Session], Any]:
    return lambda s: s.client.delete_async(path, version=version)


def bounded_call(pool: Pool, make: Callable[[Session], Any]) -> Any:
    """One request on the calling thread's session, bounded by CONNECT_TIMEOUT; ZkUnavailable on trouble."""
    for _ in range(2):
        session = pool.session()
        try:
            return call(session, functools.partial(make, session), Deadline(pool.cfg.connect_timeout))
        except SessionGone:
            continue  # the session ended under us: one more try on a fresh one
        except DeadlinePassed:
            raise ZkUnavailable(
                f"zklocks alias {pool.cfg.alias!r}: no answer from ZooKeeper within "
                f"CONNECT_TIMEOUT={pool.cfg.connect_timeout:g}s"
            ) from None
    raise ZkUnavailable(f"zklocks alias {pool.cfg.alias!r}: the session ended twice in a row")


def _note_offset(alias: str, stat, sent: float, answered: float) -> None:
    offset = stat.mtime / 1000.0 - (sent + answered) / 2
    with _offsets_lock:
        _offsets[alias] = (time.monotonic(), offset)


def server_now(pool: Pool) -> float:
    """ZooKeeper's wall clock now (seconds), from an offset measured at most CLOCK_REFRESH seconds ago.

    The measurement is an empty write to the alias's NAMESPACE node, whose answer carries the server's time;
    its error is half a round trip. If the write is refused, the local clock is used.
    """
    alias = pool.cfg.alias
    with _offsets_lock:
        known = _offsets.get(alias)
    if known is None or time.monotonic() - known[0] > CLOCK_REFRESH:
        sent = time.time()
        try:
            stat = bounded_call(pool, lambda s: s.client.set_async(pool.cfg.namespace, b""))
        except (NoNodeError, ZkLocksError):
            log.debug("zklocks: cannot read ZooKeeper's clock for %r; using the local clock", alias)
            with _offsets_lock:
                _offsets[alias] = (time.monotonic(), 0.0)
        else:
            _note_offset(alias, stat, sent, time.time())
        with _offsets_lock:
            known = _offsets[alias]
    return time.time() + known[1]


def marker_data(task_id: str, task_name: str, state: str, ttl: float, call: str | None = None) -> bytes:
    extra: dict[str, Any] = {"kind": "unique", "state": state, "ttl": float(ttl), "task_id": task_id}
    extra["task_name"] = task_name
    if call is not None:
        extra["call"] = call
    return node_data.payload(**extra)


def within_ttl(pool: Pool, ttl: object, stat) -> bool:
    """Whether a record written at ``stat.mtime`` that says it lives ``ttl`` seconds is live by ZooKeeper's
    clock. A ttl that is not a positive number of seconds (a bool, NaN, text: not ours, or damaged) is stale; an
    infinite one is a ``unique_timeout`` of ``inf``, as a project may set it."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        return False  # NaN fails the comparison too
    return server_now(pool) - stat.mtime / 1000.0 < ttl


def is_live(pool: Pool, name: str, marker: dict, stat) -> bool:
    if not isinstance(marker.get("task_id"), str):
        return False  # not ours, or damaged: stale
    if marker.get("state") == "running":
        return holder_task_id(pool.cfg.alias, name) == marker["task_id"]
    return within_ttl(pool, marker.get("ttl"), stat)


def claim(using: str, name: str, task_id: str, task_name: str, ttl: float, call: str | None = None) -> str | None:
    """Own the marker of ``name`` for ``task_id``; return the task id that owns it: ours, or a live other's of the
    same ``call`` (keys.call_digest). None when a live marker is another call's (another task, other arguments):
    nothing is shared with it, and the marker stays its own."""
    pool = connections[using]
    conf.refuse_read_only(pool.cfg, f"queue the task {task_name!r} uniquely")
    path = marker_path(pool, name)
    mine = marker_data(task_id, task_name, "queued", ttl, call)
    for _ in range(_ATTEMPTS):
        try:
            pool.session()  # connect first, so the clock reading below spans one round trip only
            sent = time.time()
            _, stat = bounded_call(
                pool, lambda s: s.client.create_async(path, mine, acl=s.acl, makepath=True, include_data=True)
            )
            _note_offset(pool.cfg.alias, stat, sent, time.time())
            return task_id
        except NodeExistsError:
            pass
        except NoNodeError:
            continue  # the lock node was reaped between makepath and create
        try:
            raw, stat = bounded_call(pool, lambda s: s.client.get_async(path))
        except NoNodeError:
            continue
        marker = node_data.parse(raw)
        try:
            if marker.get("task_id") == task_id:  # a retry or a re-send of the same task: refresh the marker
                bounded_call(pool, _set_data(path, mine, stat.version))
                return task_id
            if is_live(pool, name, marker, stat):
                if call is not None and marker.get("call") != call:  # the digest covers the task's name too
                    return None
                return marker["task_id"]
            log.info(
                "zklocks: removing the stale queued marker of %r (task %r, state %r)",
                name,
                marker.get("task_id"),
                marker.get("state"),
            )
            bounded_call(pool, _delete(path, stat.version))
        except (BadVersionError, NoNodeError):
            continue  # it changed under us: look again
    raise ZkLocksError(f"queued marker of {name!r} kept changing; gave up after {_ATTEMPTS} attempts")


def mark_running(using: str, name: str, task_id: str, task_name: str, ttl: float) -> bool:
    """The task started: its lock (held now) keeps the marker live instead of the marker's age. True if the
    marker named ``task_id`` and now says "running"."""
    pool = connections[using]
    path = marker_path(pool, name)
    try:
        raw, stat = bounded_call(pool, lambda s: s.client.get_async(path))
        marker = node_data.parse(raw)
        if marker.get("task_id") != task_id:
            return False
        call = marker.get("call")
        data = marker_data(task_id, task_name, "running", ttl, call if isinstance(call, str) else None)
        bounded_call(pool, lambda s: s.client.set_async(path, data, version=stat.version))
        return True
    except (NoNodeError, BadVersionError):
        return False  # none (sent without de-duplication), or replaced: not ours to change


def release(using: str, name: str, task_id: str) -> bool:
    """Delete the marker of ``name`` if it belongs to ``task_id``; True if it did."""
    pool = connections[using]
    return delete_if_owned(pool, marker_path(pool, name), task_id)


def delete_if_owned(pool: Pool, path: str, task_id: str) -> bool:
    """Delete the node at ``path`` if its data names ``task_id`` (a version-checked delete, read again when it
    changed under us); True if it did. Every task marker (queued, debounce, retry) is given back this way."""
    for _ in range(_ATTEMPTS):
        try:
            raw, stat = bounded_call(pool, lambda s: s.client.get_async(path))
        except NoNodeError:
            return False
        if node_data.parse(raw).get("task_id") != task_id:
            return False
        try:
            bounded_call(pool, _delete(path, stat.version))
            return True
        except NoNodeError:
            return False
        except BadVersionError:
            continue
    return False


def read(using: str, name: str) -> dict | None:
    """The marker's data (None if there is none); for tests and inspection."""
    pool = connections[using]
    try:
        raw, _ = bounded_call(pool, lambda s: s.client.get_async(marker_path(pool, name)))
    except NoNodeError:
        return None
    return node_data.parse(raw)

"""The queued record of a single-execution task key: ``<lock node>/__queued__``, as for Celery's unique tasks.

Its data is the holder JSON plus ``task_id`` (the TaskResult id), ``state`` ("queued" or "running") and ``ttl``,
the same shape as ``zklocks.celery.unique`` writes, so the admin and the CLI read both alike. Producers change it
only while they hold the key's enqueue lock (``enqueue_lock_name``); a worker changes it only with a version check,
and only while it names the worker's own result.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ..celery.unique import bounded_call as _call  # one request, bounded by CONNECT_TIMEOUT (no Celery import)
from ..client.pools import Pool, connections
from ..client.session import Session
from ..exceptions import ZkLocksError
from ..names import join_path
from ..recipes import node_data
from ..recipes.layout import queued_marker_path

_ATTEMPTS = 8


def enqueue_lock_name(name: str) -> str:
    """The lock producers of ``name`` take around their check-then-enqueue: a digest, so it is always valid."""
    return "zklocks.tasks.enqueue:" + hashlib.sha256(name.encode()).hexdigest()[:32]


def _path(pool: Pool, name: str) -> str:
    return queued_marker_path(join_path(pool.cfg.namespace, name))


def _delete(session: Session, path: str, version: int) -> Any:
    return session.client.delete_async(path, version=version)


def _data(task_id: str, task_name: str, state: str, ttl: float) -> bytes:
    return node_data.payload(kind="unique", state=state, ttl=float(ttl), task_id=task_id, task_name=task_name)


def read(using: str, name: str) -> tuple[dict, Any] | None:
    """The record of ``name`` and its stat (None if there is none)."""
    pool = connections[using]
    path = _path(pool, name)
    try:
        raw, stat = _call(pool, lambda s: s.client.get_async(path))
    except NoNodeError:
        return None
    return node_data.parse(raw), stat


def write(using: str, name: str, task_id: str, task_name: str, state: str, ttl: float) -> None:
    """Record ``task_id`` for ``name``, replacing any record (the caller holds the enqueue lock)."""
    pool = connections[using]
    path = _path(pool, name)
    data = _data(task_id, task_name, state, ttl)
    for _ in range(_ATTEMPTS):
        try:
            _call(pool, lambda s: s.client.create_async(path, data, acl=s.acl, makepath=True))
            return
        except NodeExistsError:
            pass
        except NoNodeError:
            continue  # the lock node was reaped between makepath and create
        try:
            _call(pool, lambda s: s.client.set_async(path, data))
            return
        except NoNodeError:
            continue
    raise ZkLocksError(f"queued record of {name!r} kept changing; gave up after {_ATTEMPTS} attempts")


def mark_running(using: str, name: str, task_id: str, task_name: str, ttl: float) -> bool:
    """The task started under its lock: the lock, not the record's age, keeps the record live now."""
    pool = connections[using]
    path = _path(pool, name)
    try:
        raw, stat = _call(pool, lambda s: s.client.get_async(path))
        if node_data.parse(raw).get("task_id") != task_id:
            return False
        data = _data(task_id, task_name, "running", ttl)
        _call(pool, lambda s: s.client.set_async(path, data, version=stat.version))
        return True
    except (NoNodeError, BadVersionError):
        return False  # none, or replaced: not ours to change


def release(using: str, name: str, task_id: str) -> bool:
    """Delete the record of ``name`` if it names ``task_id``; True if it did."""
    pool = connections[using]
    path = _path(pool, name)
    for _ in range(_ATTEMPTS):
        try:
            raw, stat = _call(pool, lambda s: s.client.get_async(path))
        except NoNodeError:
            return False
        if node_data.parse(raw).get("task_id") != task_id:
            return False
        try:
            _call(pool, functools.partial(_delete, path=path, version=stat.version))
            return True
        except NoNodeError:
            return False
        except BadVersionError:
            continue
    return False


def remove(using: str, name: str, version: int) -> None:
    """Delete a stale record (the caller holds the enqueue lock); gone already is fine."""
    pool = connections[using]
    try:
        _call(pool, lambda s: s.client.delete_async(_path(pool, name), version=version))
    except (NoNodeError, BadVersionError):
        pass

"""The queued record of a single-execution task key: ``<lock node>/__queued__``, as for Celery's unique tasks.

Its data is the holder JSON plus ``task_id`` (the TaskResult id), ``state`` ("queued" or "running") and ``ttl``,
the same shape as ``zklocks.execution.unique`` writes, so the admin and the CLI read both alike. Producers change it
only while they hold the key's enqueue lock (``enqueue_lock_name``); a worker changes it only with a version check,
and only while it names the worker's own result.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ..client.pools import connections
from ..exceptions import ZkLocksError
from ..execution.unique import bounded_call as _call  # one request, bounded by CONNECT_TIMEOUT (no Celery import)
from ..execution.unique import mark_running, release  # noqa: F401 - the record is Celery's: its code serves both
from ..execution.unique import marker_data as _data
from ..execution.unique import marker_path as _path
from ..recipes import node_data

_ATTEMPTS = 8


def enqueue_lock_name(name: str) -> str:
    """The lock producers of ``name`` take around their check-then-enqueue: a digest, so it is always valid."""
    return "zklocks.tasks.enqueue:" + hashlib.sha256(name.encode()).hexdigest()[:32]


def read(using: str, name: str) -> tuple[dict, Any] | None:
    """The record of ``name`` and its stat (None if there is none)."""
    pool = connections[using]
    path = _path(pool, name)
    try:
        raw, stat = _call(pool, lambda s: s.client.get_async(path))
    except NoNodeError:
        return None
    return node_data.parse(raw), stat


def write(using: str, name: str, task_id: str, task_name: str, state: str, ttl: float, call: str | None = None) -> None:
    """Record ``task_id`` for ``name``, replacing any record (the caller holds the enqueue lock); ``call``: which
    call it is (execution/keys.call_digest), so that only the same call shares it."""
    pool = connections[using]
    path = _path(pool, name)
    data = _data(task_id, task_name, state, ttl, call)
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


def remove(using: str, name: str, version: int) -> None:
    """Delete a stale record (the caller holds the enqueue lock); gone already is fine."""
    pool = connections[using]
    try:
        _call(pool, lambda s: s.client.delete_async(_path(pool, name), version=version))
    except (NoNodeError, BadVersionError):
        pass

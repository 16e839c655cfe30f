"""The nodes of SingleExecutionTask's de-duplication policies, one persistent child of the lock node each:
``__latest__`` (debounce), ``__throttle__`` (throttle) and ``__retry__`` (keep_lock_on_retry). See docs/celery.md,
"De-duplication policies". Server time comes from ``unique.server_now`` (an offset to ZooKeeper's clock, measured
on a write's answer).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ..client.pools import Pool, connections
from ..exceptions import ZkLocksError
from ..execution import unique
from ..execution.unique import bounded_call, server_now, within_ttl
from ..names import join_path
from ..recipes import layout, node_data

log = logging.getLogger("zklocks")

_ATTEMPTS = 8


def _path(pool: Pool, name: str, marker: str) -> str:
    return layout.task_marker_path(join_path(pool.cfg.namespace, name), marker)


def _get(pool: Pool, path: str):
    """(parsed data, raw data, stat), or None if there is no node."""
    try:
        raw, stat = bounded_call(pool, lambda s: s.client.get_async(path))
    except NoNodeError:
        return None
    return node_data.parse(raw), raw, stat


def _put(pool: Pool, path: str, data: bytes, version: int | None):
    """Create (version None) or overwrite at ``version``; the new stat. NodeExists / BadVersion / NoNode if raced."""
    if version is None:
        return bounded_call(
            pool, lambda s: s.client.create_async(path, data, acl=s.acl, makepath=True, include_data=True)
        )[1]
    return bounded_call(pool, lambda s: s.client.set_async(path, data, version=version))


def delete_if_owned(using: str, name: str, marker: str, task_id: str) -> bool:
    """Delete the ``marker`` node of ``name`` if it names ``task_id``; True if it did."""
    pool = connections[using]
    return unique.delete_if_owned(pool, _path(pool, name, marker), task_id)


def read(using: str, name: str, marker: str) -> dict | None:
    """The data of the ``marker`` node of ``name`` (None if there is none)."""
    pool = connections[using]
    found = _get(pool, _path(pool, name, marker))
    return None if found is None else found[0]


# -- debounce --


def make_latest(using: str, name: str, task_id: str, task_name: str) -> bytes | None:
    """Record ``task_id`` as the latest call of ``name``; return the previous node's raw data (None if none)."""
    pool = connections[using]
    path = _path(pool, name, layout.LATEST)
    data = node_data.payload(kind="debounce", state="queued", task_id=task_id, task_name=task_name)
    for _ in range(_ATTEMPTS):
        found = _get(pool, path)
        try:
            _put(pool, path, data, None if found is None else found[2].version)
            return None if found is None else found[1]
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue  # another producer wrote first: read again, ours goes on top
    raise ZkLocksError(f"the debounce node of {name!r} kept changing; gave up after {_ATTEMPTS} attempts")


def undo_latest(using: str, name: str, task_id: str, previous: bytes | None) -> None:
    """A send that failed: put the previous latest call back, unless a newer one replaced ours already."""
    pool = connections[using]
    path = _path(pool, name, layout.LATEST)
    found = _get(pool, path)
    if found is None or found[0].get("task_id") != task_id:
        return
    try:
        if previous is None:
            bounded_call(pool, lambda s: s.client.delete_async(path, version=found[2].version))
        else:
            bounded_call(pool, lambda s: s.client.set_async(path, previous, version=found[2].version))
    except (BadVersionError, NoNodeError):
        pass  # a newer call replaced ours: it is the latest now


def latest_task(using: str, name: str) -> str | None:
    """The id of the latest call of ``name`` (None: no node, so every queued call is an earlier one)."""
    found = read(using, name, layout.LATEST)
    return None if found is None else found.get("task_id")


# -- throttle --


def start_in_window(using: str, name: str, window: float, task_id: str, task_name: str) -> bool:
    """Claim the start of ``name`` for this window; False if another start happened less than ``window`` seconds
    ago on ZooKeeper's clock."""
    pool = connections[using]
    path = _path(pool, name, layout.THROTTLE)
    data = node_data.payload(kind="throttle", window=float(window), task_id=task_id, task_name=task_name)
    for _ in range(_ATTEMPTS):
        found = _get(pool, path)
        if found is not None and server_now(pool) - found[2].mtime / 1000.0 < window:
            return False
        try:
            _put(pool, path, data, None if found is None else found[2].version)
            return True
        except (NodeExistsError, BadVersionError):
            return False  # another start won this window
        except NoNodeError:
            continue
    raise ZkLocksError(f"the throttle node of {name!r} kept changing; gave up after {_ATTEMPTS} attempts")


# -- keep_lock_on_retry --


def retry_delay(retry: Any) -> float:
    """Seconds until a retry (Celery's ``Retry``) is due: its countdown, or its ETA from now."""
    when = retry.when
    if isinstance(when, datetime.datetime):
        now = datetime.datetime.now(when.tzinfo) if when.tzinfo else datetime.datetime.now()
        return max(0.0, (when - now).total_seconds())
    if isinstance(when, (int, float)) and not isinstance(when, bool):
        return max(0.0, float(when))
    return 0.0


def reserve_for_retry(using: str, name: str, task_id: str, task_name: str, ttl: float) -> None:
    """While holding the lock: the next execution of ``name`` must be ``task_id`` (for ``ttl`` seconds)."""
    pool = connections[using]
    path = _path(pool, name, layout.RETRY)
    data = node_data.payload(kind="retry", state="queued", ttl=float(ttl), task_id=task_id, task_name=task_name)
    for _ in range(_ATTEMPTS):
        found = _get(pool, path)
        try:
            _put(pool, path, data, None if found is None else found[2].version)
            return
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue
    raise ZkLocksError(f"the retry reservation of {name!r} kept changing; gave up after {_ATTEMPTS} attempts")


def reserved_for_other(using: str, name: str, task_id: str) -> str | None:
    """While holding the lock: the task id the lock is reserved for, if it is another's and live.

    Our own reservation, or a stale one, is deleted: the retry started, or will not come.
    """
    pool = connections[using]
    path = _path(pool, name, layout.RETRY)
    found = _get(pool, path)
    if found is None:
        return None
    data, _, stat = found
    owner, ttl = data.get("task_id"), data.get("ttl")
    if owner != task_id and isinstance(owner, str) and within_ttl(pool, ttl, stat):
        return owner
    if owner != task_id:
        log.info("zklocks: %r: the retry of %r did not start within its reservation; the lock is free", name, owner)
    try:
        bounded_call(pool, lambda s: s.client.delete_async(path, version=stat.version))
    except (BadVersionError, NoNodeError):
        pass
    return None

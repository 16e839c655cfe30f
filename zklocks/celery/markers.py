"""The clean-up of the nodes that name a queued task (``__queued__`` of unique_queued, ``__latest__`` of
debounce), for SingleExecutionTask and its task_revoked hook (worker.py): a failure is logged, never raised,
because each node also ends by itself (a stale marker, a later call)."""

from __future__ import annotations

import logging
from typing import Any

from ..exceptions import ZkLocksError
from ..execution import unique
from ..recipes import layout
from . import policies

log = logging.getLogger("zklocks")


# Each takes the task's name (for the log), its LockOptions, the lock name and the task id.


def mark_running(task: str, opts: Any, name: str, task_id: str) -> None:
    try:
        unique.mark_running(opts.lock_using, name, task_id, task, opts.unique_timeout)
    except ZkLocksError:
        log.warning("zklocks: %s[%s]: cannot mark the queued marker of %r running", task, task_id, name, exc_info=True)


def forget_latest(task: str, opts: Any, name: str, task_id: str) -> None:
    try:
        policies.delete_if_owned(opts.lock_using, name, layout.LATEST, task_id)
    except ZkLocksError:
        # Harmless: a later call replaces it; until then the admin lists this call as queued.
        log.warning("zklocks: %s[%s]: cannot remove the debounce node of %r", task, task_id, name, exc_info=True)


def forget_marker(task: str, opts: Any, name: str, task_id: str) -> None:
    try:
        unique.release(opts.lock_using, name, task_id)
    except ZkLocksError:
        log.warning(
            "zklocks: %s[%s]: cannot remove the queued marker of %r; it goes stale within unique_timeout=%gs",
            task,
            task_id,
            name,
            opts.unique_timeout,
            exc_info=True,
        )

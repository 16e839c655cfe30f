"""The one reset-after-fork entry point: every module with process-wide state registers its reset here.

After ``fork()`` (Celery prefork, gunicorn ``--preload``, multiprocessing) only the forking thread lives on in the
child: the parent's sessions, threads and any lock another thread held at the fork are not the child's. This module
owns the single ``os.register_at_fork`` hook and runs the registered resets in a defined order (docs/design.md §14):
first the ``SESSIONS`` stage (the pools drop the parent's sessions, so that every hold on them reads as lost), then
the ``STATE`` stage (hold registry, worker threads, executors, metrics, ...), each stage in registration order.

A reset is a plain function named ``reset_after_fork`` in its module; it takes no lock that a parent thread might
have held at the fork (it replaces such locks instead).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

log = logging.getLogger("zklocks")

SESSIONS = 0  # the parent's ZooKeeper sessions and their pools: dropped before anything that refers to them
STATE = 1  # everything else: registries, worker threads, executors, gauges

_resets: dict[int, list[Callable[[], None]]] = {SESSIONS: [], STATE: []}


def register(reset: Callable[[], None], stage: int = STATE) -> None:
    """Run ``reset`` in every forked child, in ``stage`` (``SESSIONS`` or ``STATE``)."""
    if stage not in _resets:
        raise ValueError(f"zklocks: unknown fork reset stage {stage!r} (SESSIONS or STATE)")
    _resets[stage].append(reset)


def reset_after_fork() -> None:
    """Run every registered reset, stage by stage; one that fails does not keep the others from running."""
    for stage in (SESSIONS, STATE):
        for reset in _resets[stage]:
            try:
                reset()
            except Exception:
                log.exception("zklocks: reset after fork %s.%s failed", reset.__module__, reset.__qualname__)


os.register_at_fork(after_in_child=reset_after_fork)

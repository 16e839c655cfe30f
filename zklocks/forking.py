"""The one reset-after-fork entry point: every module with process-wide state registers its reset here, and the
single ``os.register_at_fork`` hook runs them, stage ``SESSIONS`` then ``STATE``, each in registration order. A reset
takes no lock that a parent thread might have held at the fork: it replaces such locks (docs/design.md §14).
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

"""A long hold for the demo: long enough to find it in the admin and force-release it there."""

from __future__ import annotations

import time

from zklocks import LockLost


def hold_until_released(lock, seconds: float, step: float = 1.0) -> str:
    """Keep ``lock`` (held by this thread) for ``seconds``; "released" as soon as it is force-released (or lost),
    "done" otherwise. Each step asks the server (ensure_held), so a force-release shows within ``step``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            lock.ensure_held()
        except LockLost:
            return "released"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "done"
        time.sleep(min(step, remaining))

"""The clock of every lease: ``CLOCK_BOOTTIME``, which keeps running while the machine is suspended, where
``time.monotonic()`` stops on Linux (docs/design.md §10). Elsewhere the monotonic clock is the best there is.
"""

from __future__ import annotations

import time

_BOOTTIME: int | None
try:
    _BOOTTIME = time.CLOCK_BOOTTIME
    time.clock_gettime(_BOOTTIME)
except (AttributeError, OSError):  # not Linux
    _BOOTTIME = None


def now() -> float:
    """Seconds on a clock that runs through suspends (CLOCK_BOOTTIME on Linux)."""
    if _BOOTTIME is None:
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)


def runs_through_suspend() -> bool:
    return _BOOTTIME is not None

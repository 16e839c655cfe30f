"""The lock-delay option's values (``LOCK_DELAY``, ``lock_delay=``): what is valid, and what the system check says.

Pure, and imported by conf.py and the recipes alike (docs/design.md §15).
"""

from __future__ import annotations

import math

# The largest lock-delay accepted (a day): a typo in minutes or milliseconds should not shut a lock for ever.
MAX_SECONDS = 86_400.0


def valid(value: object) -> bool:
    """Whether ``value`` is a lock-delay in seconds: a finite number in [0, MAX_SECONDS], not a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and 0 <= value <= MAX_SECONDS


def checked(value: object, name: str) -> float:
    """``value`` as seconds, or a ValueError naming the lock."""
    if not valid(value):
        raise ValueError(
            f"lock {name!r}: lock_delay must be a number of seconds between 0 and {MAX_SECONDS:g}, not {value!r}"
        )
    return float(value)  # type: ignore[arg-type]


def problems(value: object, layout: str) -> list[tuple[str, str, str]]:
    """(check id, message, hint) for an alias's LOCK_DELAY under its LAYOUT."""
    if not valid(value):
        return [
            (
                "zklocks.E085",
                f"LOCK_DELAY must be a number of seconds between 0 and {MAX_SECONDS:g}, not {value!r}.",
                "Give the seconds nobody may hold a lock after its holder vanished without releasing it, "
                "e.g. 15.0; 0 (the default) turns lock-delay off.",
            )
        ]
    if value and layout == "curator":
        return [
            (
                "zklocks.W085",
                "LOCK_DELAY is set on an alias with LAYOUT 'curator', where no holder marks its release: "
                "every handoff counts as unclean and waits the full lock-delay.",
                "Use LOCK_DELAY with LAYOUT 'kazoo', or set it to 0 (see docs/design.md §15).",
            )
        ]
    return []

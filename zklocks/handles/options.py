"""The options of every lock handle, declared once.

``zk_lock``, ``zk_rw_lock``, ``zk_semaphore`` and ``zk_multi_lock`` (and their classes) take them as keyword
arguments; ``resolved`` fills in the defaults and checks the values, once for every kind of handle.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from .stopping import check_max_hold, check_on_lost


class HandleOptions(TypedDict, total=False):
    """The keyword options of every lock handle; each has the default in ``DEFAULTS``.

    - ``timeout``: seconds an acquire may wait; None (the default) waits for ever.
    - ``blocking``: False makes one attempt (default True).
    - ``using``: the alias in ``settings.ZKLOCKS`` (default ``"default"``).
    - ``release_on_commit``: True, or a database alias, defers the release to ``transaction.on_commit``
      (default False).
    - ``on_lost``: ``"notify"`` (the default) only reports a loss; ``"cancel"`` stops the holder: LockLost is
      raised in the holding thread, or the holding asyncio task is cancelled (docs/lost.md).
    - ``max_hold``: seconds after which a hold ends, as a loss under ``on_lost`` (default None: no cap).
    """

    timeout: float | None
    blocking: bool
    using: str
    release_on_commit: bool | str
    on_lost: str
    max_hold: float | None


class LockHandleOptions(HandleOptions, total=False):
    """[HandleOptions][zklocks.handles.options.HandleOptions], and ``lock_delay`` for locks (semaphores have
    none): seconds after a holder vanished without releasing (its session expired, a force-release) during which
    nobody holds the lock; None (the default) takes the alias's LOCK_DELAY, read at each acquire
    (docs/design.md §15)."""

    lock_delay: float | None


DEFAULTS: HandleOptions = {
    "timeout": None,
    "blocking": True,
    "using": "default",
    "release_on_commit": False,
    "on_lost": "notify",
    "max_hold": None,
}
LOCK_OPTIONS = (*DEFAULTS, "lock_delay")


def only(options: Mapping[str, Any], known: Iterable[str], what: str) -> None:
    """A TypeError, as for any unknown keyword argument, naming the closest known option."""
    known = tuple(known)
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (options: {', '.join(known)})"
            raise TypeError(f"{what}() got an unexpected keyword argument {key!r}{hint}")


def resolved(options: Mapping[str, Any], what: str, known: Iterable[str] = DEFAULTS) -> dict[str, Any]:
    """``options`` with the defaults filled in and every value checked; ``what`` and ``known`` (the options the
    caller takes, for the hint) name the caller in the error of an unknown one."""
    only(options, known, what)
    values: dict[str, Any] = {**DEFAULTS, **options}
    timeout = values["timeout"]
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError(f"timeout must be None or a number >= 0, not {timeout!r}")
    values["on_lost"] = check_on_lost(values["on_lost"])
    values["max_hold"] = check_max_hold(values["max_hold"])
    return values

"""Lock-delay: after an unclean loss, nobody holds the lock until ``lock_delay`` seconds have passed on the
server's clock since the holder's node vanished (docs/design.md §15): the record a waiter writes into the lock node
when its last blocker vanished unmarked (queue.Contender.wait_steps), whose ``mtime`` starts the delay; the wait of
every contender for its end, measured from server times of our own writes, never our wall clock; and the guard of
an exclusive holder (:func:`guard`), cleared by its clean release (node.OwnNode._send_delete).

This module knows kazoo and paths, nothing of Django.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from typing import Any

from kazoo.exceptions import NoNodeError

from .. import forking
from ..client.deadline import Deadline, DeadlinePassed
from ..exceptions import LockNotAcquired, ZkAuthError
from ..lock_delay_option import valid
from . import layout, node_data
from .kazoo_calls import SessionGone
from .step_runner import NewWaker, Request, Sleep, Steps, reconnected

log = logging.getLogger("zklocks")

KEY = "lock_delay"


def record(after: str, seconds: float) -> bytes:
    """The lock node's data while in lock-delay: which node vanished, and for how long the lock stays shut.
    The start is the write's mtime, so the record carries no clock of ours."""
    return json.dumps({"v": 1, KEY: {"after": after, "seconds": seconds}}, separators=(",", ":")).encode()


GUARD = "guard"


def guard(child: str, seconds: float, acquired_at: float) -> bytes:
    """The lock node's data while an exclusive holder under a lock-delay holds: who, since when (a hold record
    the admin reads, node_data.parse_hold_record), and that its release clears it."""
    return node_data.hold_record(child, acquired_at, **{GUARD: seconds})


def guarded_by(raw: bytes | None) -> tuple[str, float] | None:
    """(the holder, its lock-delay) of a lock node's guard, or None for any other data."""
    if not raw or GUARD.encode() not in raw:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    holder, seconds = data.get("holder"), data.get(GUARD)
    if not isinstance(holder, str) or not holder or not valid(seconds):
        return None
    return holder, float(seconds)  # type: ignore[arg-type]  # valid() checked it


def shut_after_reaping(client: Any, path: str) -> bool:
    """For the reaper, before it deletes the empty lock node ``path``: whether its data still shuts the lock. A
    guard says its holder left without releasing, and nobody came since: it becomes a delay record, started now
    (deleting it would let the next newcomer hold at once). A delay record shuts it until its end."""
    try:
        raw, stat = client.get(path)
    except NoNodeError:
        return True  # gone already: nothing to delete
    guarded = guarded_by(raw)
    if guarded is not None:
        try:
            client.set(path, record(*guarded), version=stat.version)
        except Exception:  # noqa: BLE001, S110 - changed or refused meanwhile: looked at again at the next sweep
            pass
        return True
    until = until_ms(raw, stat.mtime)
    # The server's clock is not ours: this host's, with a minute's room for the difference (a delay record long
    # over is deleted a minute late, never early by less than the two clocks differ).
    return until is not None and time.time() * 1000 < until + 60_000


def until_ms(raw: bytes | None, mtime_ms: int) -> int | None:
    """The end of the delay a lock node's data records, in the server's epoch milliseconds; None for any other
    data (a hold record, a semaphore's marker, foreign data)."""
    if not raw or KEY.encode() not in raw:
        return None
    try:
        entry = json.loads(raw).get(KEY)
        seconds = entry.get("seconds")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not valid(seconds):
        return None
    return mtime_ms + math.ceil(seconds * 1000)


def ends_at(until: int, server_ms: int, local: float) -> float:
    """The monotonic moment at which the server's clock is past ``until`` for sure, given that the server's clock
    read ``server_ms`` or more at our monotonic moment ``local`` (the answer of a write it stamped came after)."""
    return local + (until - server_ms) / 1000.0


# Holds of this process lost uncleanly under a lock-delay, by (alias, lock node): the lost node, the delay, and
# when we learned of the loss. Threads of one process share its session, so when it expires their waiters' nodes
# vanish with the holder's and nobody is left to see the holder vanish: a contender of ours counts this as its
# vanished blocker instead (hold_steps).
_lost_here: dict[tuple[str, str], tuple[str, float, float]] = {}
_lost_guard = threading.Lock()


def note_lost(alias: str, parent: str, node: str, seconds: float) -> None:
    """A hold of ours on ``parent`` under a lock-delay of ``seconds`` was lost uncleanly (its session ended, its
    lease ran out, its node was deleted by someone else)."""
    with _lost_guard:
        _lost_here[(alias, parent)] = (node, seconds, time.monotonic())


def lost_here(alias: str, parent: str) -> str | None:
    """The node of ours lost uncleanly on ``parent`` whose delay may not be over yet, or None."""
    with _lost_guard:
        entry = _lost_here.get((alias, parent))
        if entry is None:
            return None
        node, seconds, noted = entry
        if time.monotonic() - noted >= seconds:
            del _lost_here[(alias, parent)]  # over even counted from when we learned of it (the loss came before)
            return None
        return node


def _recorded(alias: str, parent: str, node: str) -> None:
    with _lost_guard:
        if _lost_here.get((alias, parent), (None,))[0] == node:
            del _lost_here[(alias, parent)]  # the record in the lock node tells every contender from now on


def _reset_after_fork() -> None:
    global _lost_guard
    _lost_guard = threading.Lock()
    _lost_here.clear()


forking.register(_reset_after_fork)


def hold_steps(contender: Any, blocking: bool, deadline: Deadline, name: str) -> Steps:
    """Before ``contender`` (a queue.Contender, first in its queue) holds: wait out a lock-delay in force, or
    start one if the blocker it watched last vanished without its release mark (``contender.vanished``).

    LockNotAcquired if not ``blocking`` and a delay is in force; DeadlinePassed if the deadline comes first;
    SessionGone if our session ends meanwhile (the acquire then queues again, and finds the record again).
    """
    yield from _wait_steps(contender, blocking, deadline, name)
    yield from _guard_steps(contender, deadline)


def _guard_steps(contender: Any, deadline: Deadline) -> Steps:
    """Write our guard before the body runs (see the module docstring): an exclusive hold on a layout whose
    holders write. A lock node we may not write (a foreign ACL) keeps no guard: a newcomer after our unclean
    loss then holds at once, as without one."""
    session = contender.session
    lay = layout.get(session.cfg.layout)
    if not (lay.holders_write and lay.is_exclusive(getattr(contender, "marker", ""))) or not contender.name:
        return
    data = guard(contender.name, contender.lock_delay, time.time())
    # Noted before the write is sent: an acquire interrupted or cancelled once it is under way gives its node back
    # with the guard's clearing (node.py), instead of leaving a guard that delays the next holder for nothing.
    contender.guards = True
    try:
        yield Request(lambda: session.client.set_async(contender.parent, data), session, deadline)
    except ZkAuthError:
        contender.guards = False
        log.warning("zklocks: cannot guard %s (NoAuth): after an unclean loss newcomers hold at once", contender.parent)


def _wait_steps(contender: Any, blocking: bool, deadline: Deadline, name: str) -> Steps:
    vanished = contender.vanished
    if vanished == "":
        return  # a marked release handed over: its holder held, so any delay before it was over
    session, parent = contender.session, contender.parent
    lost = lost_here(session.alias, parent) if contender.lock_delay else None
    if vanished is None:
        vanished = lost  # our own holder's node went with a session of ours: nobody saw it vanish
    client = session.client
    try:
        raw, stat = yield Request(lambda: client.get_async(parent), session, deadline)
    except NoNodeError:
        raise SessionGone() from None  # our node lives below it: only our session's end can explain this
    if vanished is None:
        # Nobody queued saw it go: a guard left by a holder other than us says it went without its release.
        guarded = guarded_by(raw)
        if guarded is not None and guarded[0] != contender.name:
            vanished = guarded[0]
    end = None
    until = until_ms(raw, stat.mtime)
    if until is not None:
        # Our create's ctime is a server time we know to have passed; without it, count from now (late, safe).
        server_ms, local = contender.stamp or (stat.mtime, time.monotonic())
        end = ends_at(until, server_ms, local)
    if vanished is not None and (end is None or end <= time.monotonic()):
        # Our blocker vanished uncleanly and no delay covers it: start one. The read above keeps a delay in force
        # (a waiter that gave up during it is an unmarked delete too) from being extended.
        seconds = contender.lock_delay
        try:
            yield Request(lambda: client.set_async(parent, record(vanished, seconds)), session, deadline)
        except ZkAuthError:
            # A lock node we may not write (a foreign client's ACL): nobody else learns of this delay, but we
            # still wait it out; counted from now, which is after the delete.
            log.warning("zklocks: cannot record a lock-delay in %s (NoAuth); only this contender waits it", parent)
        end = time.monotonic() + seconds  # the server stamped the write before its answer came
        if lost is not None:
            _recorded(session.alias, parent, lost)
        log.info("zklocks: %s lost its holder %s uncleanly: lock-delay of %gs", parent, vanished, seconds)
    if end is None or end <= time.monotonic():
        return
    if not blocking:
        raise LockNotAcquired(f"lock {name!r} is in lock-delay after an unclean loss", name=name)
    while (left := end - time.monotonic()) > 0:
        if deadline.expired():
            raise DeadlinePassed()
        remaining = deadline.remaining()
        waker = yield NewWaker()
        with session.waking(waker):  # a lost session wakes us, and so does a lost connection
            # Looked at once the waker is in place: a loss just before would wake nobody, and a coroutine's sleep
            # has no periodic look of its own (a thread's wakes every third of the lease).
            if session.is_alive() and session.connected and not session.unresponsive:
                yield Sleep(waker, left if remaining is None else max(0.0, min(left, remaining)), session.timeout / 3)
        if not session.is_alive():
            raise SessionGone()
        # An outage is ZkUnavailable within CONNECT_TIMEOUT here too, as in any wait: never a delay waited out on
        # a silent server, nor a LockTimeout for an outage.
        if session.unresponsive:
            raise session.unavailable("no answer from the server while waiting out a lock-delay")
        if not session.connected:
            yield reconnected(session, deadline)

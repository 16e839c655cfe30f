"""Per-alias pools of sessions (session.py): lazy, thread-safe, fork-safe. Nothing here knows of locks."""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable

from .. import conf, forking
from ..exceptions import ZkConfigError, ZkUnavailable
from . import abandoned
from .interrupts import new_event
from .session import Session

# How long past 2 x CONNECT_TIMEOUT (the start and the settling of given-up sessions) a start record counts as
# under way: one that a signal handler's exception left behind is taken over after that.
STALE_START = 5.0


class _Start:
    """A start of a slot's session under way: who runs it, until when it counts, its end, and its failure (the
    answer of the threads that waited for it)."""

    __slots__ = ("thread", "until", "done", "error", "gives_up_at")

    def __init__(self, thread: int, lasts: float, gives_up_at: float) -> None:
        self.thread = thread
        self.until = time.monotonic() + lasts
        self.done = new_event()  # signal-safe: a handler's exception in a waiter leaves no lock of it taken
        self.error: ZkUnavailable | None = None
        self.gives_up_at = gives_up_at  # when the starter stops trying (earlier for a late call: Pool.session)

    def live(self) -> bool:
        return not self.done.is_set() and time.monotonic() < self.until


class Pool:
    """POOL_SIZE sessions of one alias; each thread is pinned to one slot."""

    def __init__(self, cfg: conf.AliasConfig) -> None:
        self.cfg = cfg
        self._slots: list[Session | None] = [None] * cfg.pool_size
        self._slot_locks = [threading.Lock() for _ in range(cfg.pool_size)]
        self._starting: list[_Start | None] = [None] * cfg.pool_size  # each slot's start under way
        self._assign_lock = threading.Lock()
        self._next = 0
        self._local = threading.local()
        self.closed = False

    def _slot(self) -> int:
        idx = getattr(self._local, "slot", None)
        if idx is None:
            with self._assign_lock:
                idx = self._next % len(self._slots)
                self._next += 1
            self._local.slot = idx
        return idx

    def ready_session(self) -> Session | None:
        """The calling thread's session if it is started and not dead, else None; never blocks."""
        session = self._slots[self._slot()]
        return session if session is not None and not session.dead else None

    def session(self, within: float | None = None) -> Session:
        """The calling thread's session, started (or replaced) if needed; ZkUnavailable if unreachable.

        ``within``: seconds to wait for a new one, when less than CONNECT_TIMEOUT is left of a call's bound (an
        acquire whose session ended past its deadline, queue.late_session). A start that gave up that early
        answers only for itself: a thread that waited for it with more time left tries again.

        One thread starts a slot's session, outside the slot's lock; the others that need it wait for that start
        within their own time (CONNECT_TIMEOUT, or ``within``) and share its failure: n callers during an outage
        each get ZkUnavailable within CONNECT_TIMEOUT, not the n-th after n starts in a row. The lock is only taken
        by ``with`` around a few assignments, so that no signal handler's exception can leave it taken; a start
        record that such an exception left behind is stale after STALE_START and is taken over."""
        idx = self._slot()
        session = self._slots[idx]
        if session is not None and not session.dead:
            return session
        budget = self.cfg.connect_timeout if within is None else max(0.0, min(within, self.cfg.connect_timeout))
        bound = _within(budget, self.cfg.connect_timeout)  # for the messages
        me = threading.get_ident()
        gives_up_at = time.monotonic() + budget
        while True:
            with self._slot_locks[idx]:
                session = self._slots[idx]
                if session is not None and not session.dead:
                    return session
                start = self._starting[idx]
                if start is not None and start.live():
                    if start.thread == me:
                        # A signal handler that calls zklocks while this thread starts the slot's session: it
                        # would wait for itself.
                        raise ZkUnavailable(
                            f"zklocks alias {self.cfg.alias!r}: this thread is starting its session (a signal "
                            "handler interrupted the start); no session for the handler's call"
                        )
                else:
                    start = self._starting[idx] = _Start(me, STALE_START + 2 * self.cfg.connect_timeout, gives_up_at)
                    break
            if not start.done.wait(max(0.0, gives_up_at - time.monotonic())):
                session = self._slots[idx]
                if session is not None and not session.dead:
                    return session
                raise ZkUnavailable(
                    f"zklocks alias {self.cfg.alias!r}: ZooKeeper at {self.cfg.hosts} is unavailable (no session "
                    f"within {bound}: another thread of this process is still "
                    "starting it)"
                )
            if start.error is not None and start.gives_up_at >= gives_up_at - 0.05:
                raise type(start.error)(*start.error.args)  # the start this thread waited for failed
            # No error (its session died at once), or a start that gave up before our own time is up: look again,
            # and start one ourselves if none is there.
        try:
            session = self._start(idx, max(0.0, gives_up_at - time.monotonic()), bound)
        except ZkUnavailable as exc:
            start.error = exc  # before done is set (finally): the waiters read it once they wake
            raise
        else:
            for hook in _on_session_started:
                hook(self)
        finally:
            with self._slot_locks[idx]:
                if self._starting[idx] is start:
                    self._starting[idx] = None
            start.done.set()
        return session

    def _start(self, idx: int, budget: float, bound: str) -> Session:
        """A new session, in slot ``idx`` once it is there; closed if anything (a signal handler's exception
        too) comes between its start and the slot, so that no connected session is left that nobody uses."""
        if self.closed:
            raise ZkUnavailable(f"zklocks alias {self.cfg.alias!r} was closed")
        session = Session(self.cfg)
        session.start(budget, bound)
        try:
            # A server answers: the sessions this alias gave up during the outage are closed first, so that no
            # lock this process released reads as held by its own previous session.
            abandoned.settle(self.cfg.alias, self.cfg.hosts, self.cfg.connect_timeout)
            if self.closed:  # closed while we were connecting: do not leak the new session
                raise ZkUnavailable(f"zklocks alias {self.cfg.alias!r} was closed")
            with self._slot_locks[idx]:
                self._slots[idx] = session
        except BaseException:
            session.close(wait=False)
            raise
        return session

    def sessions(self) -> list[Session]:
        return [s for s in self._slots if s is not None]

    def close(self, wait: bool = True) -> None:
        self.closed = True
        for session in self.sessions():
            session.close(wait=wait)

    def drop(self) -> None:
        """Forget the sessions without closing them (after fork: they belong to the parent).

        Holds on them are lost for this process: a handle the child inherited must not look held.
        """
        self.closed = True
        for session in self.sessions():
            session.forget_after_fork()
        self._slots = [None] * len(self._slots)


def _within(budget: float, connect_timeout: float) -> str:
    """How long a start was given, for the messages of ZkUnavailable."""
    if budget < connect_timeout:
        return f"the {budget:.2f}s left of the call's CONNECT_TIMEOUT={connect_timeout:g}s"
    return f"CONNECT_TIMEOUT={connect_timeout:g}s"


class ConnectionHandler:
    """Pools by alias, built lazily from settings.ZKLOCKS (like django.db.connections)."""

    def __init__(self) -> None:
        self._pools: dict[str, Pool] = {}
        self._lock = threading.Lock()

    def __getitem__(self, alias: str) -> Pool:
        pool = self._pools.get(alias)
        if pool is not None:
            return pool
        cfg = conf.alias_config(alias)
        # Host names resolved, as ZooKeeper's clients reach them: unless silenced, and only for namespaces that nest
        # (checked first), once per name and process (conf._address is cached).
        silenced = _silenced("zklocks.E042")
        nested = [] if silenced else conf.nested(conf.get_config()[0], resolve=True)
        outer = next((o for a, o in nested if a == alias), None)
        if outer is not None:
            raise ZkConfigError(
                f"zklocks alias {alias!r} is not started: its NAMESPACE lies inside alias {outer!r}'s on the same "
                "ZooKeeper servers, where each would take the other's nodes for its own locks and their reapers "
                "would delete them (zklocks.E042). Give them sibling NAMESPACEs (or silence zklocks.E042)."
            )
        with self._lock:
            pool = self._pools.get(alias)
            if pool is None:
                pool = self._pools[alias] = Pool(cfg)
        return pool

    def close_all(self, wait: bool = True) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close(wait=wait)

    def drop_all(self) -> None:
        """After fork: another parent thread may have held our lock at the fork, so never take it."""
        self._lock = threading.Lock()
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.drop()


def _silenced(check_id: str) -> bool:
    from django.conf import settings

    return check_id in getattr(settings, "SILENCED_SYSTEM_CHECKS", ())


connections = ConnectionHandler()
_on_session_started: list[Callable[[Pool], None]] = []
_owner_pid = os.getpid()


def close_all(wait: bool = True) -> None:
    """Close every session of this process (their ephemeral nodes are removed by the server at once)."""
    if os.getpid() == _owner_pid:
        connections.close_all(wait=wait)


def on_session_started(hook: Callable[[Pool], None]) -> None:
    """Call ``hook(pool)`` each time a pool has started a session (e.g. the reaper starts its sweeper then).

    Layers above the client (operations) register here, so that the client never imports them."""
    _on_session_started.append(hook)


def reset_after_fork() -> None:
    """The parent's sessions are not the child's: drop them (forking.SESSIONS, before every other reset)."""
    global _owner_pid
    _owner_pid = os.getpid()
    connections.drop_all()


def _at_exit() -> None:
    if os.getpid() == _owner_pid:
        connections.close_all(wait=True)


forking.register(reset_after_fork, forking.SESSIONS)
atexit.register(_at_exit)

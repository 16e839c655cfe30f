"""One ZooKeeper session and its lease (lease.py): the proof, its renewal while something is held or awaited,
and the loss of every hold on it once the proof runs out, after which the session is closed and the pool opens a
fresh one (docs/design.md §9, §10). It also watches its connection for a silent or refusing server while something
waits on it (docs/reference.md, "Outages are never contention").

A :class:`Session` wraps one KazooClient: what is passed to it is in kazoo_options.py, the hooks on its request path
and its connection in kazoo_adapter/hooks.py.

Holds are anything with ``mark_lost(reason)`` and the attributes ``lost``/``lost_reason`` (:class:`LossListener`):
this module knows nothing of lock handles.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, KeeperState

from .. import conf
from ..exceptions import ZkAuthError, ZkUnavailable
from . import abandoned, clock, lease, observe, worker_threads
from .deadline import Deadline
from .interrupts import new_event, raised_by_signal_handler, unmasked
from .iohandler import DEFAULT_HANDLER, readable_now
from .kazoo_adapter import compat as kazoo_compat
from .kazoo_adapter.calls import connection_socket
from .kazoo_adapter.hooks import (
    bounded_stop,
    raise_through_wakeup,
    read_without_select,
    refuse_writes,
    send_close,
    wrap_connection,
)
from .kazoo_options import build_acl, tls_defaults, writes_guarded
from .kazoolog import KazooLog
from .successors import Successors

log = logging.getLogger("zklocks")


# A connected server that answers nothing for this share of CONNECT_TIMEOUT, with a request waiting, is taken
# for paused or cut off: waiters raise ZkUnavailable (a probe goes every quarter, so the whole stays within it).
RESPONSE_LIMIT = 0.75
# A look of the silence watch scheduled for the moment a condition comes true goes this much after it.
LOOK_SLACK = 0.005


def every_step(*steps: Callable[[], object]) -> None:
    """Run every step, even after one raised (a signal handler's exception may land in any of them), then raise the
    first signal handler's exception if any, else the first exception."""
    first: BaseException | None = None
    for step in steps:
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - raised below, once every step has run
            if first is None or (_interrupt(exc) and not _interrupt(first)):
                first = exc  # a signal handler's exception (KeyboardInterrupt, ...) before an ordinary error
    if first is not None:
        raise first


def _interrupt(exc: BaseException) -> bool:
    return not isinstance(exc, Exception) or raised_by_signal_handler(exc)


class LossListener(Protocol):
    """What a session tells about a loss: a hold registered with :meth:`Session.add_hold`."""

    name: str  # the lock's name, for the warning of a lost session
    lost: bool
    lost_reason: str | None

    def mark_lost(self, reason: str) -> None: ...


class Session:
    """One ZooKeeper session of a pool."""

    def __init__(self, cfg: conf.AliasConfig) -> None:
        kazoo_compat.verify()  # once per process: refuse a kazoo whose internals the lease cannot hook
        self.cfg = cfg
        self.alias = cfg.alias
        self.pid = os.getpid()
        self.acl = build_acl(cfg)
        self.writes_guarded = writes_guarded(self.acl, cfg)
        self.timeout = cfg.session_timeout  # replaced by the negotiated value on connect
        self.lease_start = -float("inf")  # see lease.py: no leader can expire us before lease_start + timeout
        self.dead = False
        self.dead_reason: str | None = None
        self.auth_failed = False  # ZooKeeper rejected AUTH (unknown scheme, malformed credential)
        self.busy_hint: set[str] = set()  # lock nodes a try-lock of ours found busy (see queue.acquire)
        # (session id, lock node): whose contenders there only the alias may write (queue._written_only_by_us)
        self.guarded_creators: set[tuple[int, str]] = set()
        self.guarded_parents: dict[str, bool] = {}  # lock node: only the alias may delete in it (queue.py)
        self.successors = Successors()  # our waiters behind our own nodes: handed the lock in the process
        self.renewals = 0  # lease renewal rounds sent (sync + an empty write), for tests and benchmarks
        self._lock = threading.Lock()
        self._holds: set[LossListener] = set()
        self._waiters: set[threading.Event] = set()
        self._connected = new_event()
        self._keeper_armed = False
        self._keeper_gen = 0
        self._renewing = False
        self._credited_timeout: float | None = None  # the shortest negotiated on any connection (lease.py)
        self.last_answer = clock.now()  # when the server last answered anything (a ping too)
        self.last_sent = clock.now()
        self.unresponsive = False  # connected, but silent past RESPONSE_LIMIT of CONNECT_TIMEOUT (see _watch)
        self._down_since: float | None = None  # clock.now() when the connection dropped; None while connected
        self._watching = False
        self._sent: dict[int, tuple[float, int, int]] = {}  # xid -> (sent at, opcode, zxid seen then)
        self._zxid = 0  # the highest zxid this session has seen in an answer
        self._handshake_sent = clock.now()
        self._evidence = self._new_evidence()
        options = tls_defaults(dict(cfg.options))
        retry = options.pop("connection_retry", None) or {
            "max_tries": -1,
            "delay": 0.05,
            "backoff": 1.5,
            "max_delay": max(0.1, min(1.0, cfg.session_timeout / 4)),
        }
        # What a client joining this session needs to close it later (abandoned.py): the connection's own options.
        self._join_options = {key: value for key, value in options.items() if key not in ("handler", "logger")}
        self._join_options["auth_data"] = list(cfg.auth) or None
        self._client_id: tuple[int, bytes] | None = None  # the session's id and password once connected
        # kazoo's per-retry warnings at DEBUG, with the secrets taken out; the causes for ZkUnavailable
        self.kazoo_log = KazooLog(secrets=[cred for _, cred in cfg.auth])
        options.setdefault("logger", self.kazoo_log)
        handler = options.get("handler", DEFAULT_HANDLER)  # a class: one per session (kazoo stops it with the client)
        own_handler = isinstance(handler, type)  # an instance in OPTIONS may be shared: never wrapped
        options["handler"] = handler() if own_handler else handler
        self.client = KazooClient(
            hosts=cfg.hosts,
            timeout=cfg.session_timeout,
            auth_data=list(cfg.auth) or None,
            default_acl=self.acl,
            connection_retry=retry,
            **options,
        )
        # the lease's view of the traffic (request_sent() ...); each server's share of CONNECT_TIMEOUT
        wrap_connection(self.client, self, attempt_limit=cfg.connect_timeout, cap_connect=own_handler)
        raise_through_wakeup(self.client)
        if cfg.read_only:
            refuse_writes(self.client, cfg.alias)
        read_without_select(self.client)  # with zklocks' handler only
        self.client.add_listener(self._on_state)

    # -- lease evidence (runs on kazoo's connection thread: record only, never block) --

    def _new_evidence(self) -> lease.Evidence:
        gap = lease.relay_gap(self.timeout, self.cfg.tick_time)
        return lease.Evidence(gap, horizon=self.timeout + gap + 1.0)

    # The connection's traffic (kazoo_adapter.hooks.TrafficListener), told from kazoo's connection thread.

    def request_sent(self, xid: int, opcode: int) -> None:
        self.last_sent = now = clock.now()
        if opcode not in lease.UNTOUCHED:  # those are answered without touching the session
            # A second ping may go out before the first is answered: keep the older send time (conservative).
            self._sent.setdefault(xid, (now, opcode, self._zxid))

    def answer_read(self, xid: int, zxid: int, err: int) -> None:
        self.last_answer = now = clock.now()
        self.unresponsive = False
        entry = self._sent.pop(xid, None)
        if entry is not None:
            sent_at, opcode, zxid_before = entry
            # A write counts only with a zxid of its own: a server that refused it without the leader (eager ACL
            # checks) answers with no new zxid.
            proven = self._evidence.answered(sent_at, now, opcode, err, zxid > zxid_before)
            if proven is not None and proven > self.lease_start:
                self.lease_start = proven
        if zxid > self._zxid:
            self._zxid = zxid

    def handshake_sent(self) -> None:
        # kazoo reports CONNECTED (and our waiters go on) before its handshake returns, so the new connection's
        # lease is settled in handshake_answered(), as soon as the answer is read.
        self.last_sent = self._handshake_sent = clock.now()
        self._sent.clear()  # a request of the connection before is answered on no other

    def handshake_answered(self, timeout_ms: int, resumed: bool, read_only: bool, zxid: int) -> None:
        started = self._handshake_sent
        self.last_answer = clock.now()  # an answer like any (an outage counts from here: outage_bound)
        self.unresponsive = False
        self._zxid = max(self._zxid, zxid)
        if timeout_ms <= 0:
            return
        before = self.timeout
        # A leader applies each touch with the timeout of the connection it came in on, and a touch from a server
        # we left may reach it last: count on the shortest ever negotiated, the create's included
        # (docs/design.md §10, "Mixed session timeouts").
        credited = self._credited_timeout if resumed else None
        self.timeout = self._credited_timeout = lease.credited_timeout(credited, timeout_ms / 1000.0)
        self._evidence = evidence = self._new_evidence()
        if read_only:
            pass  # a read-only server has no leader behind it: no credit
        elif not resumed:
            # createSession is a quorum write that the leader's tracker touches when it applies it.
            self.lease_start = started
        else:
            evidence.reconnected(started, clock.now())
        if resumed and self._has_interest():
            if self.lease_expired():
                self._declare_lost_soon("suspended")
            elif self.timeout < before:
                self._arm_keeper(clock.now(), force=True)  # the deadline moved earlier

    def _has_interest(self) -> bool:
        return bool(self._holds or self._waiters)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._down_since = None
            self._client_id = self.client.client_id  # kazoo forgets it when it gives up: kept for abandoned.py
            self._connected.set()
            if self._has_interest():
                # The keeper waited for a connection: renew now, not at its next look (a blip right after the
                # reconnect would otherwise find the lease as the outage left it).
                self._arm_keeper(clock.now(), force=True)
        else:
            self._connected.clear()
            if state == KazooState.SUSPENDED and self._down_since is None:
                down_since = self._down_since = clock.now()
                worker_threads.get().call_later(self.timeout, lambda: self._drop_if_still_down(down_since))
        if observe.observers and not self.dead and state != KazooState.LOST:
            observe.session_state(self, "connected" if state == KazooState.CONNECTED else "suspended")
        if state == KazooState.LOST:
            # kazoo reports a rejected AUTH as LOST; its own state still says why.
            self.auth_failed = self.auth_failed or self.client.client_state == KeeperState.AUTH_FAILED
            self._declare_lost_soon("expired")
        elif state == KazooState.SUSPENDED:
            self._arm_keeper()
        self._wake_waiters()

    def _mark_dead(self, reason: str) -> bool:
        """Mark the session unusable; True for the caller that did it first, which then completes the loss or the
        close (_finish_loss, close), step by step, whatever interrupts one of the steps."""
        with self._lock:
            if self.dead:
                return False
            self.dead = True
            self.dead_reason = reason
        return True

    def _report_dead(self, reason: str) -> None:
        if observe.observers:
            observe.session_state(self, "closed" if reason == "closed" else "lost")

    def _declare_lost_soon(self, reason: str) -> None:
        if self._mark_dead(reason):
            every_step(
                lambda: self._report_dead(reason),
                lambda: worker_threads.get().call_soon(lambda: self._finish_loss(reason)),
            )

    # -- public --

    def is_alive(self) -> bool:
        """True while no leader can have expired this session (see lease.py). A lease that ran out while something was
        held or awaited is a loss, and the session is closed (docs/design.md §9); without holds or waiters the next
        acquire only proves the lease again (lease_refresh_due)."""
        if self.dead:
            return False
        if self.lease_expired():
            if self._has_interest():
                self._declare_lost_soon("suspended")
            return False
        return True

    def declare_lost(self, reason: str) -> None:
        if self._mark_dead(reason):
            every_step(lambda: self._report_dead(reason), lambda: self._finish_loss(reason))

    def _finish_loss(self, reason: str) -> None:
        """After _mark_dead: every hold lost, every waiter woken, the session closed. A signal handler's exception in
        one step (this may run on the caller's thread) leaves none of the others undone: a hold not marked lost
        would never stop its holder, and a session not closed would keep its nodes alive on the server."""
        every_step(lambda: self._lose_holds(reason, report=True), self._wake_waiters, lambda: self.close(wait=False))

    def _lose_holds(self, reason: str, report: bool = False) -> None:
        with self._lock:
            holds, self._holds = list(self._holds), set()
        if holds and report:
            names = sorted(repr(hold.name) for hold in holds)
            shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
            log.warning(
                "zklocks: session of alias %r lost (%s); %d lock(s) lost: %s", self.alias, reason, len(holds), shown
            )
        every_step(*(functools.partial(hold.mark_lost, reason) for hold in holds))

    def _close_later_if_unsent(self) -> None:
        """Closed while disconnected: the close cannot reach the server, which may restore the session and keep its
        nodes; it is closed from here once a server answers (abandoned.py). Not for a session the server expired,
        nor for one whose AUTH the server rejected (it never held anything, and a client joining it would be
        rejected the same way)."""
        client_id, self._client_id = self._client_id, None  # once: close() may run again (at exit)
        if client_id is None or self.client.connected or self.dead_reason == "expired" or self.auth_failed:
            return
        abandoned.close_when_reachable(self.alias, self.cfg.hosts, client_id, self.timeout, self._join_options)

    def forget_after_fork(self) -> None:
        """In a forked child: no I/O, no locks (another thread of the parent may have held them)."""
        self.dead = True
        self.dead_reason = "forked"
        for hold in list(self._holds):
            hold.lost = True
            hold.lost_reason = "forked"
        self._holds = set()
        self._lock = threading.Lock()
        self._waiters = set()
        self.successors.clear()

    def add_hold(self, hold: LossListener) -> bool:
        """Register a granted hold; False if the session cannot vouch for it (the caller enqueues again)."""
        if self.lease_expired():
            # Granted on a lease we cannot prove (e.g. the server lost its leader meanwhile): close the session
            # so that the node goes, rather than hand out a hold that is lost from its first moment.
            self.declare_lost("suspended")
            return False
        with self._lock:
            if self.dead:
                return False
            self._holds.add(hold)
        self._arm_keeper()
        return True

    def remove_hold(self, hold: LossListener) -> None:
        # No lock: a discard is one step under the GIL, and this runs from finalizers too (a release by a dying
        # generator), which may come while this very thread holds the session's lock.
        self._holds.discard(hold)

    @contextmanager
    def waking(self, event: threading.Event) -> Iterator[threading.Event]:
        """Set ``event`` on any change of the connection state while inside the block."""
        try:
            with self._lock:
                self._waiters.add(event)
                if not self._watching:
                    # Scheduled first, marked after (see _arm_keeper): a flag set with no watch would leave every
                    # later waiter of this session without one, and a silent server never reported.
                    worker_threads.get().call_later(self.cfg.connect_timeout / 4, self._watch)
                    self._watching = True
            self._arm_keeper()
            yield event
        finally:
            self._waiters.discard(event)  # no lock: see remove_hold

    def _wake_waiters(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for event in waiters:
            event.set()

    @property
    def connected(self) -> bool:
        return self._connected.is_set() and not self.dead

    def hand_over(self, node: str) -> bool:
        """Our hold through ``node`` ended cleanly and its delete was sent: our own waiters behind it hold now
        (successors.py), while this session can vouch for the hold: connected, on a lease not expired. Otherwise
        they hold on the watch's event, as a waiter of another session does. True if no other session waits for
        this delete (Successors.released)."""
        if self.connected and not self.unresponsive and not self.lease_expired():
            return self.successors.released(node)
        return False

    @property
    def session_id(self) -> int:
        """The server's id of this session (the ``ephemeralOwner`` of its nodes); 0 before it first connected."""
        client_id = self._client_id
        return client_id[0] if client_id else 0

    def wait_connected(self, deadline: Deadline) -> None:
        """Wait for the connection to come back, at most CONNECT_TIMEOUT; ZkUnavailable if it does not.

        The call's ``deadline``, if it comes first, ends the wait with ZkUnavailable too: an outage is never
        reported as a lock held elsewhere. CONNECT_TIMEOUT counts from the later of the call's start and the fault
        (the connection's last answer at the earliest), not from this wait: a call that waited behind a holder, or
        met the fault first in another wait, ends within CONNECT_TIMEOUT of it.
        """
        if self.connected:
            return
        outage_at = self.outage_bound(deadline.started)
        limit = outage_at if deadline.at is None else min(outage_at, deadline.at)
        while not self.connected:
            if self.dead:
                return
            remaining = limit - time.monotonic()
            if remaining <= 0:
                if limit < outage_at:
                    raise self.unavailable("lost the connection, not back when the call's timeout ran out")
                raise self.not_reconnected()
            self._connected.wait(min(remaining, 0.05))

    def outage_bound(self, started: float) -> float:
        """When (time.monotonic) a call that ``started`` then and meets an outage of this session's connection
        raises ZkUnavailable: CONNECT_TIMEOUT after the later of its start and the fault, which began at the last
        answer at the earliest."""
        now = time.monotonic()
        fault = now - max(0.0, clock.now() - self.last_answer)
        return max(started, fault) + self.cfg.connect_timeout

    def not_reconnected(self) -> ZkUnavailable:
        """The error for a call whose outage_bound passed with the connection still down."""
        return self.unavailable(
            f"lost the connection and could not reconnect within CONNECT_TIMEOUT={self.cfg.connect_timeout:g}s"
        )

    def unavailable(self, detail: str) -> ZkUnavailable:
        """The error for a call that met an outage of this session's connection, with kazoo's causes."""
        causes = self.kazoo_log.causes()
        return ZkUnavailable(
            f"zklocks alias {self.alias!r}: ZooKeeper at {self.cfg.hosts} is unavailable ({detail}"
            + (f"; {causes})" if causes else ")")
        )

    def start(self, within: float | None = None, bound: str | None = None) -> None:
        """Connect within CONNECT_TIMEOUT (or the shorter ``within``, which ``bound`` names in the error) or raise
        ZkUnavailable at once (kazoo's own start() would block on stopping its connection thread).

        kazoo starts its threads from a thread of ours, so an exception raised by a signal handler in the
        caller (KeyboardInterrupt, Celery's SoftTimeLimitExceeded) never leaves kazoo half started: it reaches
        the caller unchanged, and the session is closed once kazoo's start is over.
        """
        started = new_event()
        box: dict[str, Any] = {}

        def start_kazoo() -> None:
            try:
                box["live"] = self.client.start_async()
            except Exception as exc:  # noqa: BLE001 kazoo's or the OS's: reported below as ZkUnavailable
                box["error"] = exc
            finally:
                started.set()

        wait = self.cfg.connect_timeout if within is None else min(within, self.cfg.connect_timeout)
        try:
            limit = time.monotonic() + wait
            threading.Thread(target=start_kazoo, name="zklocks-start", daemon=True).start()
            started.wait(wait)
            live = box.get("live")
            if live is not None:
                while not live.is_set() and not self.auth_failed and time.monotonic() < limit:
                    live.wait(0.05)  # a rejected AUTH never sets ``live``: do not wait for CONNECT_TIMEOUT then
            error = box.get("error")
            if error is None and not self.client.connected:
                error = KazooTimeoutError("connection time-out")
            if error is None:  # in the try: a session connected when the exception lands is closed too
                self._connected.set()
                if observe.observers:
                    observe.session_state(self, "connected")
                return
        except BaseException as exc:  # noqa: BLE001 re-raised: the signal handler's exception, if it hides one
            self._close_once_started(started)
            real = unmasked(exc)
            if real is exc:
                raise
            raise real from None
        try:  # the start failed: its kazoo threads are stopped whatever comes
            auth_failed = self.auth_failed or self.client.client_state == KeeperState.AUTH_FAILED
        finally:
            self._close_once_started(started, "unreachable")
        if auth_failed:
            raise ZkAuthError(
                f"zklocks alias {self.alias!r}: ZooKeeper rejected the AUTH credentials "
                "(unknown scheme or malformed credential)"
            ) from error
        if isinstance(error, KazooTimeoutError):
            detail = f"no session within {bound or f'CONNECT_TIMEOUT={self.cfg.connect_timeout:g}s'}"
            causes = self.kazoo_log.causes()
            if causes:
                detail += f": {causes}"
        else:
            detail = f"{type(error).__name__}: {error}"
        raise ZkUnavailable(
            f"zklocks alias {self.alias!r}: ZooKeeper at {self.cfg.hosts} is unavailable ({detail})"
        ) from error

    def _close_once_started(self, started: threading.Event, reason: str = "closed") -> None:
        """A start that did not end in a session: dead at once, closed (in the background) once kazoo's start
        is over, so that its threads are never left running. One that observers heard connect (the exception
        landed after) is marked dead by that close, which tells them it closed."""
        if not self._connected.is_set():
            self.dead = True
            self.dead_reason = reason

        def close() -> None:
            started.wait()
            self.close()

        threading.Thread(target=close, name="zklocks-close", daemon=True).start()

    def close(self, wait: bool = True) -> None:
        """End the session on the server (its ephemeral nodes go at once) and stop kazoo's threads."""
        if self.pid != os.getpid():
            self.dead = True
            return  # a forked child never touches its parent's sessions
        steps: list[Callable[[], object]] = [lambda: self._report_dead("closed")] if self._mark_dead("closed") else []
        # Whoever marked the session dead, its holds are lost and its waiters woken here too: a loss cut short
        # between the mark and its steps is completed by the close that follows (the pool's, or at exit).
        every_step(
            *steps,
            lambda: self._lose_holds(self.dead_reason or "closed"),
            self._wake_waiters,
            self._close_later_if_unsent,
            lambda: self._stop_client(wait),
        )

    def _stop_client(self, wait: bool) -> None:
        """Stop kazoo's threads; kazoo sends the close request first. Bounded: see below."""

        def _stop() -> None:
            try:
                bounded_stop(self.client)
                self.client.close()
            except Exception as exc:  # already stopped, or kazoo gave up waiting for its writer
                if raised_by_signal_handler(exc):
                    raise  # interrupted while waiting for kazoo's threads: the caller's to handle
                log.debug("zklocks: closing a session of %r failed", self.alias, exc_info=True)

        # kazoo's stop() joins its connection thread without a bound: bound it here (kazoo itself waits up to
        # max(10 s, the session timeout) for its writer), so that a close never hangs its caller.
        stopping = threading.Thread(target=_stop, name="zklocks-close", daemon=True)
        try:
            stopping.start()
        except RuntimeError:
            # Python >= 3.12 refuses new threads at interpreter shutdown (the atexit close of pools.py): stop on
            # this thread, so the session still ends on the server and its ephemeral nodes go at once.
            _stop()
            return
        if not wait:
            return
        stopping.join(max(10.0, self.cfg.session_timeout) + self.cfg.connect_timeout)
        if stopping.is_alive():
            send_close(self.client)  # a stop interrupted earlier may have left no close request queued
            stopping.join(self.cfg.connect_timeout)
        if stopping.is_alive():
            log.warning("zklocks: kazoo's connection thread of a session of %r did not stop; left behind", self.alias)

    # -- the lease: its deadline --

    def lease_deadline(self) -> float:
        """On the clock of clock.now(): from then on, the deciding leader may have expired this session."""
        return self.lease_start + self.timeout - lease.loss_margin(self.timeout)

    def lease_remaining(self) -> float:
        return self.lease_deadline() - clock.now()

    def lease_expired(self) -> bool:
        return self.lease_remaining() <= 0

    # -- keeping the lease while something is held or awaited --

    def renew_ahead(self) -> float:
        """Start a renewal round when the lease has this much left: a round is a sync and a write, in turn."""
        return max(0.1, 0.25 * (self.timeout - lease.relay_gap(self.timeout, self.cfg.tick_time)))

    def round_spacing(self) -> float:
        """The keeper starts renewal rounds at most this often."""
        return max(0.1, 0.05 * self.timeout)

    def keep_ahead(self) -> float:
        """The keeper's threshold: with TICK_TIME known, renew while the lease still covers a silent blip of half
        the session timeout, which ZooKeeper survives (a busy session's own traffic keeps it that far ahead), plus
        a round, and a second one where the tick leaves room: the round the blip caught in flight is answered only
        after it, and the lease must last until then. A round leaves at best the lease minus one tick; where that
        is not two round intervals (an eighth of it each, at least) above half the timeout plus a round, or
        without TICK_TIME (the relay gap is then half the timeout), half the timeout cannot be covered at a
        bounded rate, and rounds wait for renew_ahead (docs/reliability.md, "Blips")."""
        ahead = self.renew_ahead()
        tick = self.cfg.tick_time
        if not tick:
            return ahead
        fresh = self.timeout - lease.loss_margin(self.timeout) - lease.relay_gap(self.timeout, tick)
        least = max(self.round_spacing(), fresh / 8)
        half = 0.5 * self.timeout + self.round_spacing()
        if fresh - 2 * least < half:
            return ahead  # a tick too long for the timeout: half of it cannot be covered at a bounded rate
        # A second round of slack as far as the tick leaves room for it (SESSION_TIMEOUT 10 s with ZooKeeper's
        # default 2 s tick: 5.625 s, between one round, 5.5 s, and two, 6.0 s).
        return max(ahead, min(half + self.round_spacing(), fresh - 2 * least))

    def _arm_keeper(self, at: float | None = None, *, force: bool = False) -> None:
        """Schedule the keeper; ``force`` replaces a later schedule (the deadline moved earlier, or a reconnect)."""
        if at is None:
            at = max(clock.now(), self.lease_deadline() - self.keep_ahead())
        with self._lock:
            if self.dead or (self._keeper_armed and not force):
                return
            # Scheduled first (call_at takes no lock), marked after: a signal handler's exception in between leaves
            # at worst a keeper of a generation that is not current (it does nothing), never a flag that says
            # "armed" with nothing scheduled, which would keep every later call from arming it.
            gen = self._keeper_gen + 1
            worker_threads.get().call_at(at, lambda: self._keep(gen))
            self._keeper_gen = gen
            self._keeper_armed = True

    def _keep(self, gen: int) -> None:
        """On the worker thread: declare the loss at the lease deadline, renew ahead of it."""
        with self._lock:
            if gen != self._keeper_gen:
                return  # replaced by a newer schedule
            self._keeper_armed = False
        if self.dead or not self._has_interest():
            return
        remaining = self.lease_remaining()
        stop = self.stop_ahead()
        if remaining <= stop:
            self.declare_lost("suspended")
            return
        ahead = self.keep_ahead()
        if remaining <= ahead:
            if not self._renewing and self._connected.is_set():
                self._renew()
            # Look again soon: the round may not be enough (a late answer, a reconnect), and the deadline stands.
            self._arm_keeper(min(clock.now() + min(remaining, self.round_spacing()), self.lease_deadline() - stop))
        else:
            self._arm_keeper(self.lease_deadline() - ahead)

    def stop_ahead(self) -> float:
        """How long before the deadline the loss is declared: 0, or what the holds' on_lost needs to stop their
        work before the lease ends (handles/stopping.py), at most half the renewal lead so that a renewal
        round always gets its chance first."""
        holds = list(self._holds)  # a copy in one step: holds are removed without the lock (remove_hold)
        wanted = max((getattr(hold, "stop_ahead", 0.0) for hold in holds), default=0.0)
        return min(wanted, self.renew_ahead() / 2)

    def _renew(self) -> None:
        """One round of lease.py's proof: a sync (S2), then, once it is answered, an empty write (S3)."""
        self._renewing = True
        self.renewals += 1
        client = self.client

        def done(_result=None) -> None:
            self._renewing = False

        def on_sync(result) -> None:
            if not result.successful() or self.dead:
                done()
                return
            try:
                txn = client.transaction()
                txn.check("/", -1)  # a transaction that changes nothing, committed by a quorum all the same
                txn.commit_async().rawlink(done)
            except Exception:  # noqa: BLE001 a closing client: this round ends unproven
                done()

        try:
            client.sync_async("/").rawlink(on_sync)
        except Exception:  # noqa: BLE001 a closing client: this round ends unproven
            done()

    def lease_refresh_due(self) -> bool:
        """Before a new acquire: whether the lease is about to run out and a sync sent now would prove a later
        start, so that the acquire first sends the S2 of a proof (one sync; its create completes the proof). A
        session that served holds a moment ago never needs it, so the uncontended fast path keeps its request
        count; nor does one whose newest request old enough to count (relay_gap) is proven already: a session used
        in bursts would otherwise pay a round trip at every acquire of a burst, for nothing."""
        if self.lease_remaining() > 2 * self.renew_ahead():
            return False
        gain = self._evidence.refresh_gain(clock.now())
        return gain is not None and gain > self.lease_start

    # -- outages seen from a session that exists: a silent server, a server that refuses the session --

    def _watch(self) -> None:
        """While something waits on this session: look for a silent server every quarter of CONNECT_TIMEOUT, and
        at the moment a request would be late or the connection idle for that quarter, so that a fault is seen
        within CONNECT_TIMEOUT of it (before a lease that runs out a little later than that).

        A server that is paused or cut off keeps the TCP connection open, so kazoo notices only after two thirds
        of the session timeout. A waiter must hear of it within CONNECT_TIMEOUT: once a request has been
        unanswered for RESPONSE_LIMIT of it and nothing at all was answered meanwhile, the session is marked
        unresponsive (until the next answer) and every waiter is woken to raise ZkUnavailable. An idle
        connection is probed with a read so that a pause is seen while nothing else is asked.
        """
        with self._lock:
            if self.dead or not self._waiters:
                self._watching = False
                return
        period = next_look = self.cfg.connect_timeout / 4
        try:
            now = clock.now()
            if self._connected.is_set():
                oldest = min((entry[0] for entry in list(self._sent.values())), default=None)
                silent_for = now - self.last_answer
                limit = RESPONSE_LIMIT * self.cfg.connect_timeout
                late = oldest is not None and now - oldest > limit and silent_for > limit
                # an answer that arrived but is unread excuses the silence, up to the whole CONNECT_TIMEOUT
                if late and (silent_for >= self.cfg.connect_timeout or not self._answer_unread()):
                    if not self.unresponsive:
                        self.unresponsive = True
                        self._wake_waiters()
                elif late:  # excused: look again when the excuse runs out, not a whole period later
                    next_look = min(period, self.cfg.connect_timeout - silent_for)
                elif oldest is not None:  # look again the moment it would be late, not up to a period after
                    next_look = min(period, max(oldest, now - silent_for) + limit - now + LOOK_SLACK)
                elif now - self.last_sent >= period:
                    try:
                        self.client.exists_async("/")
                    except Exception:
                        log.debug("zklocks: probe of alias %r not sent", self.alias, exc_info=True)
                else:  # probe the moment the connection has been idle for a period
                    next_look = self.last_sent + period - now + LOOK_SLACK
        finally:  # whatever failed above, the watch goes on while something waits
            worker_threads.get().call_later(next_look, self._watch)

    def _answer_unread(self) -> bool:
        """The server's bytes wait in our socket: it answered, only this process has not read them yet.

        On a loaded machine kazoo's reading thread may be starved for longer than RESPONSE_LIMIT; a server whose
        answer has arrived is not silent, and its waiters must not raise ZkUnavailable for our own slowness.
        """
        sock = connection_socket(self.client)
        if sock is None:
            return False
        # Only the kernel's buffer: an SSL object's own (pending()) is kazoo's thread's, which may be reading it.
        return readable_now(sock)

    def _drop_if_still_down(self, down_since: float) -> None:
        """Disconnected for a whole session timeout: the session is over on every server that still knows it, and
        one back with empty or older data refuses it for good while kazoo retries for ever. Drop it: its holds are
        reported lost, the next call starts a fresh one (docs/reliability.md, "A server that comes back empty")."""
        if self.dead or self._down_since != down_since:
            return
        causes = self.kazoo_log.causes()
        log.warning(
            "zklocks: alias %r could not reconnect to ZooKeeper at %s for %gs (its session timeout)%s; dropping "
            "the session, a fresh one starts with the next call. If ZooKeeper restarted with empty or older data, "
            "its servers refuse this session for good.",
            self.alias,
            self.cfg.hosts,
            self.timeout,
            f" ({causes})" if causes else "",
        )
        self.declare_lost("unreachable")

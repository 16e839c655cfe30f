"""Keeping a session's lease (lease.py) while something is held or awaited: its deadline, and a keeper on the
worker thread that renews the proof ahead of the deadline or declares the loss at it.

:class:`LeaseKeeping` is a part of :class:`~zklocks.client.session.Session`: the attributes annotated on it are the
session's, set by ``Session.__init__``.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from kazoo.client import KazooClient

from .. import conf
from . import clock, lease, worker_threads


class LeaseKeeping:
    """The lease of a session: its deadline and its keeper."""

    cfg: conf.AliasConfig
    client: KazooClient
    timeout: float
    lease_start: float
    dead: bool
    renewals: int
    _lock: threading.Lock
    _connected: threading.Event
    _keeper_armed: bool
    _keeper_gen: int
    _renewing: bool
    _holds: set

    if TYPE_CHECKING:

        def _has_interest(self) -> bool: ...

        def declare_lost(self, reason: str) -> None: ...

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
        with self._lock:
            if self.dead or (self._keeper_armed and not force):
                return
            self._keeper_armed = True
            self._keeper_gen += 1
            gen = self._keeper_gen
        if at is None:
            at = max(clock.now(), self.lease_deadline() - self.keep_ahead())
        worker_threads.get().call_at(at, lambda: self._keep(gen))

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
        """Before a new acquire: whether the lease is about to run out, so that the acquire first sends the S2 of
        a proof (one sync; its create completes the proof). A session that served holds a moment ago never needs
        it, so the uncontended fast path keeps its request count."""
        return self.lease_remaining() <= 2 * self.renew_ahead()

    def lease_refresh_limit(self, deadline: float | None) -> float:
        """How long an acquire waits for that sync."""
        if deadline is None:
            return self.cfg.connect_timeout
        return max(0.0, min(self.cfg.connect_timeout, deadline - time.monotonic()))

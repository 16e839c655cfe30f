"""The lease rule: the earliest moment the deciding leader could expire our session (docs/design.md §9, §10).

On one connection: Q1, any request, sent at ``a1`` and answered at ``r1``; S2, a ``sync`` or a write, sent at least
``relay_gap`` after ``r1`` and answered; S3, a write sent after S2's answer and committed. Then no leader can expire the
session before ``a1 + timeout``, and the lease ends :func:`loss_margin` earlier; a new session and a reconnect are
shortcuts of the same argument. The ZooKeeper facts, the proof and its assumptions: docs/reliability.md, "The lease
rule: when is `is_held` still true?".

This module is pure bookkeeping: times in, a proven lease start out. It knows no kazoo and no Django.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import itemgetter

# ZooKeeper opcodes (zookeeper.jute / ZooDefs.OpCode).
SYNC = 9
WRITES = frozenset(
    {
        1,  # create
        2,  # delete
        5,  # setData
        7,  # setACL
        13,  # check
        14,  # multi (a write transaction; multiRead is 22)
        15,  # create2
        16,  # reconfig
        19,  # createContainer
        20,  # deleteContainer
        21,  # createTTL
    }
)
# Answered by the server itself without touching the session (auth, SASL, watch re-registration): no Q1.
UNTOUCHED = frozenset({100, 101, 102, 105})
# Answers of a write that the leader turned into a committed transaction (an error txn still has a zxid).
# Anything else (connection loss, session expired or moved, marshalling errors) proves nothing.
COMMITTED_ERRORS = frozenset({0, -101, -102, -103, -108, -110, -111, -114})

# Answers closer together than this are thinned: of a run of answers within it, the first and the newest are kept
# (the newest always, so that a sync answered just after a write still relays). A lookup between them, or one that
# found a kept answer since replaced by a newer one, then finds an older request: that only ever shortens the lease.
_GRAIN = 0.005
_ANSWERED = itemgetter(0)


def loss_margin(timeout: float) -> float:
    """Slack kept between our bound and the leader's earliest expiry (clock rates, thread scheduling)."""
    return min(0.05 * timeout + 0.02, 0.5)


def credited_timeout(credited: float | None, negotiated: float) -> float:
    """The session timeout a lease may count on once a connection of the session negotiated ``negotiated``
    (``credited``: what it counted on before, None for a new session): the shortest so far. No timeout ever negotiated
    is forgotten while the session lives: a touch from a server the session left long ago may still reach the leader
    last (the proof: docs/reliability.md, "Mixed session timeouts"; docs/design.md §10).
    """
    return negotiated if credited is None else min(credited, negotiated)


def relay_gap(timeout: float, tick_time: float | None) -> float:
    """How far apart Q1's answer and S2's send must be: one tickTime of the leader, or timeout/2 when the tick is
    unknown, which is a tick or more only while every server negotiates at least 2 x the longest tickTime (ZooKeeper's
    default, not its rule): ``zklocks_check`` and the deploy check E017 (serverconf.py) refuse a configuration where
    timeout/2 falls short (docs/reliability.md, "The tick when `TICK_TIME` is not set").
    """
    return tick_time if tick_time else timeout / 2


class _Answers:
    """(answer time, send time) of answered requests, in answer order (answers come back in send order).

    One list of pairs, changed only by kazoo's connection thread with single list operations. Another thread reads
    a copy (Evidence.refresh_gain): between a bisect and its index, a trim or a replacement could move the entries
    under it."""

    __slots__ = ("entries",)

    def __init__(self, entries: list[tuple[float, float]] | None = None) -> None:
        self.entries: list[tuple[float, float]] = [] if entries is None else entries

    def copy(self) -> _Answers:
        return _Answers(self.entries[:])  # one C-level slice: atomic under the GIL

    def add(self, sent: float, answered: float) -> None:
        entries = self.entries
        if len(entries) >= 2 and answered - entries[-2][0] < _GRAIN:
            entries[-1] = (answered, sent)  # the newest of a run within the grain replaces the one before it
            return
        entries.append((answered, sent))

    def latest_sent(self, answered_by: float) -> float | None:
        """Send time of the newest request answered no later than ``answered_by``."""
        entries = self.entries
        i = bisect_right(entries, answered_by, key=_ANSWERED) - 1
        return entries[i][1] if i >= 0 else None

    def trim(self, before: float) -> None:
        entries = self.entries
        i = bisect_right(entries, before, key=_ANSWERED)
        if i > 64 or (i and i == len(entries)):
            del entries[:i]


class Evidence:
    """What one connection to one server has proven about the leader's view of our session."""

    def __init__(self, relay_gap: float, horizon: float) -> None:
        self.relay_gap = relay_gap
        self.horizon = horizon  # answers older than this cannot prove a lease that is still running
        self._any = _Answers()  # candidates for Q1
        self._relayed = _Answers()  # candidates for S2: answered sync or committed write
        self._touched: list[tuple[float, float]] = []  # (answered, sent) of a re-validation at the leader

    def reconnected(self, sent: float, answered: float) -> None:
        """The connect that opened this connection re-validated the session at the leader."""
        self._touched.append((answered, sent))
        self._any.add(sent, answered)
        self._relayed.add(sent, answered)

    def answered(self, sent: float, answered: float, opcode: int, err: int, fresh_zxid: bool = True) -> float | None:
        """Record one answer; return the lease start it proves, if any. ``fresh_zxid``: the answer carries a
        zxid above every one seen before the request left, as only a transaction the leader committed does."""
        proven = None
        committed = opcode in WRITES and err in COMMITTED_ERRORS and fresh_zxid
        if committed:
            proven = self._proof_for_write(sent)
        self._any.add(sent, answered)
        if committed or (opcode == SYNC and err == 0):
            self._relayed.add(sent, answered)
        self._any.trim(answered - self.horizon)
        self._relayed.trim(answered - self.horizon)
        return proven

    def refresh_gain(self, now: float) -> float | None:
        """The lease start that a sync sent at ``now`` (S2), then a write (S3), would prove, where that is later
        than what a write sent at ``now`` proves without it; None where the sync would prove nothing more (the
        newest request answered ``relay_gap`` before now was proven already, or is what a write alone proves).
        Called from the caller's thread, so it reads copies of the lists that kazoo's connection thread changes."""
        view = self.snapshot()
        with_sync = view._any.latest_sent(now - self.relay_gap)
        if with_sync is None:
            return None
        alone = view._proof_for_write(now)
        return None if alone is not None and alone >= with_sync else with_sync

    def snapshot(self) -> Evidence:
        """A copy to read from another thread than kazoo's connection thread, the only one that changes this."""
        view = Evidence(self.relay_gap, self.horizon)
        view._any, view._relayed, view._touched = self._any.copy(), self._relayed.copy(), self._touched[:]
        return view

    def _proof_for_write(self, write_sent: float) -> float | None:
        """S3 sent at ``write_sent`` was committed: the newest Q1 that an earlier S2 carried to the leader."""
        s2_sent = self._relayed.latest_sent(write_sent)
        if s2_sent is None:
            return None
        proven = self._any.latest_sent(s2_sent - self.relay_gap)
        for answered, sent in self._touched:
            if answered <= write_sent and (proven is None or sent > proven):
                proven = sent
        return proven

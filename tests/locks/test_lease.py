"""The lease rule (zklocks/client/lease.py): the pure proof, then its cost and upkeep on a real server.

The partitions that the rule exists for (a follower cut off from its leader, a leader cut off from its
followers) are injected for real in tests/faults/test_server_partitions.py.
"""

import itertools
import threading
import time

import pytest

from tests.support.helpers import wait_until, zk_settings
from zklocks import zk_lock
from zklocks.client import clock, lease
from zklocks.client.pools import connections

GAP = 1.0
CREATE, DELETE, MULTI, SYNC, GET, PING = 1, 2, 14, 9, 4, 11


def evidence():
    return lease.Evidence(GAP, horizon=100.0)


def test_a_write_after_a_relayed_sync_proves_the_lease_from_the_first_request():
    ev = evidence()
    assert ev.answered(0.0, 0.01, PING, 0) is None  # Q1, answered by whichever server
    assert ev.answered(1.02, 1.03, SYNC, 0) is None  # S2, sent GAP after Q1's answer
    assert ev.answered(1.04, 1.05, MULTI, 0) == 0.0  # S3, a write sent after S2's answer


def test_answers_of_one_server_alone_prove_nothing():
    ev = evidence()
    for t in range(10):  # pings and reads only: a follower cut off from its leader answers all of them
        assert ev.answered(t, t + 0.01, PING if t % 2 else GET, 0) is None
    # A sync alone reaches the leader but does not prove that the leader still has a quorum.
    assert ev.answered(10.0, 10.01, SYNC, 0) is None


def test_the_relay_gap_is_required_between_q1_and_s2():
    ev = evidence()
    ev.answered(0.0, 0.01, PING, 0)
    ev.answered(0.5, 0.51, SYNC, 0)  # only 0.49 s after Q1's answer
    assert ev.answered(0.52, 0.53, CREATE, 0) is None
    ev.answered(1.2, 1.21, SYNC, 0)  # now GAP after Q1 (not after the first sync)
    assert ev.answered(1.22, 1.23, CREATE, 0) == 0.0


def test_s2_must_be_answered_before_s3_is_sent():
    ev = evidence()
    ev.answered(0.0, 0.01, PING, 0)
    # S2 and S3 pipelined: S3 left before S2's answer, so the follower may have forwarded it before our touch.
    assert ev.answered(1.1, 1.2, SYNC, 0) is None
    assert ev.answered(1.11, 1.21, CREATE, 0) is None


@pytest.mark.parametrize("err", [-112, -118, -4, -7])  # session expired, session moved, connection loss, timeout
def test_failed_writes_prove_nothing(err):
    ev = evidence()
    ev.answered(0.0, 0.01, PING, 0)
    ev.answered(1.1, 1.11, SYNC, 0)
    assert ev.answered(1.12, 1.13, DELETE, err) is None


@pytest.mark.parametrize("err", [-101, -110, -103])  # no node, node exists, bad version: committed error txns
def test_writes_the_leader_committed_as_errors_still_prove(err):
    ev = evidence()
    ev.answered(0.0, 0.01, PING, 0)
    ev.answered(1.1, 1.11, SYNC, 0)
    assert ev.answered(1.12, 1.13, DELETE, err) == 0.0


def test_a_write_can_relay_for_the_next_write():
    ev = evidence()
    ev.answered(0.0, 0.01, GET, 0)
    assert ev.answered(1.1, 1.11, CREATE, 0) is None  # S2 (a write)
    assert ev.answered(1.12, 1.13, DELETE, 0) == 0.0  # S3


def test_a_reconnect_revalidates_at_the_leader_and_the_next_write_completes_the_proof():
    ev = evidence()
    ev.reconnected(5.0, 5.02)
    assert ev.answered(5.03, 5.04, CREATE, 0) == 5.0


def test_thinning_only_ever_finds_older_requests():
    ev = evidence()
    ev.answered(0.0, 0.010, PING, 0)
    ev.answered(0.002, 0.012, GET, 0)
    ev.answered(0.004, 0.014, GET, 0)  # thinned: within the grain of the first, it replaces the one before it
    ev.answered(1.013, 1.02, SYNC, 0)  # GAP after the thinned GET's answer, not after the kept one's
    assert ev.answered(1.03, 1.04, CREATE, 0) == 0.0


def test_the_newest_answer_is_kept_within_the_grain():
    ev = evidence()
    ev.answered(0.0, 0.01, PING, 0)
    ev.answered(0.6, 0.61, GET, 0)
    ev.answered(1.1, 1.11, CREATE, 0)
    ev.answered(1.6, 1.612, DELETE, 0)
    # A sync answered 3 ms after the delete: the newest S2, which the GET's answer is GAP older than.
    ev.answered(1.611, 1.615, SYNC, 0)
    assert ev.answered(1.62, 1.63, CREATE, 0) == 0.6


def test_a_sync_is_worth_sending_only_for_a_request_newer_than_the_proven_one():
    ev = evidence()
    ev.answered(0.0, 0.01, PING, 0)  # Q1
    assert ev.refresh_gain(0.5) is None  # nothing answered GAP ago: a sync now proves nothing
    assert ev.refresh_gain(1.5) == 0.0  # a sync now, then a write: the lease from 0.0
    ev.answered(0.8, 0.81, GET, 0)  # a newer request, GAP old from 1.81 on
    ev.answered(1.1, 1.11, CREATE, 0)  # S2
    assert ev.answered(1.12, 1.13, DELETE, 0) == 0.0  # S3: proven from 0.0
    # Proven already, and a write alone would prove it again (the delete relays): a sync would add nothing.
    assert ev.refresh_gain(1.5) is None
    assert ev.refresh_gain(1.9) == 0.8  # the GET is old enough now: a sync would prove it


class _IndexedByTheConnectionThreadOnly(list):
    """A list of the evidence that only kazoo's connection thread may index: from another thread, a trim or a
    replacement could move the entries between a bisect and its index (an IndexError out of an acquire)."""

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise AssertionError("the caller's thread indexed the connection thread's list")
        return super().__getitem__(key)


def test_a_callers_thread_reads_the_evidence_through_copies():
    ev = evidence()
    for sent, answered, opcode in ((0.0, 0.01, PING), (0.8, 0.81, GET), (1.1, 1.11, CREATE), (1.12, 1.13, DELETE)):
        ev.answered(sent, answered, opcode, 0)
    expected = (ev.refresh_gain(1.5), ev.refresh_gain(1.9))
    for answers in (ev._any, ev._relayed):
        answers.entries = _IndexedByTheConnectionThreadOnly(answers.entries)
    assert (ev.refresh_gain(1.5), ev.refresh_gain(1.9)) == expected == (None, 0.8)


def test_old_answers_are_dropped_beyond_the_horizon():
    ev = lease.Evidence(GAP, horizon=5.0)
    for t in range(0, 1000):
        ev.answered(t * 0.1, t * 0.1 + 0.01, GET, 0)
    assert len(ev._any.entries) < 200


def test_the_credited_timeout_is_the_shortest_negotiated_on_any_connection():
    """B (20 s) -> A (6 s) -> B (20 s): A's touch may reach the leader last, so 6 s stays (B -> A -> B)."""
    credited = lease.credited_timeout(None, 20.0)  # created on B
    assert credited == 20.0
    for negotiated, expected in ((6.0, 6.0), (20.0, 6.0), (8.0, 6.0), (4.0, 4.0), (20.0, 4.0)):
        credited = lease.credited_timeout(credited, negotiated)
        assert credited == expected
    assert lease.credited_timeout(None, 20.0) == 20.0  # a new session starts over


def test_relay_gap_defaults_to_half_the_session_timeout():
    assert lease.relay_gap(10.0, None) == 5.0
    assert lease.relay_gap(10.0, 2.0) == 2.0


def test_leases_use_a_clock_that_runs_through_suspend():
    assert clock.runs_through_suspend()
    assert abs(clock.now() - time.clock_gettime(time.CLOCK_BOOTTIME)) < 0.1


# -- on a real server --


def use(hosts, **options):
    return zk_settings(hosts, "/lease", **options)


@pytest.mark.parametrize("tick, timeout", [(None, 4.0), (0.1, 2.0)])
def test_a_long_hold_is_renewed_and_never_lapses(own_long_zk, tick, timeout):
    """Three session timeouts of holding: the lease is renewed ahead of its end, at a bounded request rate.
    Without the tick (None: left out, the library's own estimate) a round starts with a quarter of (timeout -
    timeout/2) left: 0.5 s of a 4 s session, which a round trip on a loaded machine does not use up (a 2 s session
    leaves 0.25 s, which the suite's parallel load did once)."""
    with use(own_long_zk.hosts, TICK_TIME=tick, SESSION_TIMEOUT=timeout):
        with zk_lock("long") as lock:
            session = connections["default"].session()
            start_renewals = session.renewals
            lowest = float("inf")
            ends = time.monotonic() + 3 * session.timeout
            while time.monotonic() < ends:
                assert lock.is_held
                lowest = min(lowest, session.lease_remaining())
                time.sleep(0.005)
            lock.ensure_held()
            rounds = session.renewals - start_renewals
            rate = 2 * rounds / (3 * session.timeout)
            print(f"tick={tick}: {rounds} renewal rounds, {rate:.2f} requests/s, lowest remaining {lowest:.3f} s")
            assert rounds >= 2
            assert lowest > 0.05
            # The keeper does not spin: a round (two requests) at most every other spacing on average.
            assert rate < 1 / session.round_spacing()


def test_short_holds_pay_nothing_and_an_idle_session_proves_its_lease_with_one_sync(own_zk):
    with use(own_zk.hosts):
        with zk_lock("short"):
            session = connections["default"].session()
        for _ in range(200):
            with zk_lock("short") as lock:
                assert lock.is_held
        assert session.renewals == 0
        # Idle for longer than the lease: the next acquire sends one sync first, then holds a valid lease.
        wait_until(lambda: session.lease_expired(), timeout=3 * session.timeout)
        assert not session.dead
        syncs = []
        orig = session.client.sync_async
        session.client.sync_async = lambda path: syncs.append(path) or orig(path)
        try:
            with zk_lock("short") as lock:
                assert lock.is_held and session.lease_remaining() > 0
        finally:
            session.client.sync_async = orig
        assert syncs == ["/"]


def test_a_session_used_in_bursts_sends_no_sync_that_proves_nothing_new(own_zk):
    """Bursts of short holds with idle spells between them, the relay gap half the session timeout (no TICK_TIME):
    a burst begins with the lease low, and a sync sent then proves no later start than the last one did until a
    newer request is old enough to count. Each sync must move the lease: none is sent for what is proven."""
    with use(own_zk.hosts, TICK_TIME=None, SESSION_TIMEOUT=4.0):
        with zk_lock("bursts"):
            session = connections["default"].session()
        starts: list[float] = []  # the proven lease start as each sync is sent
        orig = session.client.sync_async
        session.client.sync_async = lambda path: starts.append(session.lease_start) or orig(path)
        per_burst, due_seen = [], 0
        try:
            for _ in range(6):
                before, cycles = len(starts), 0
                due_seen += session.lease_remaining() <= 2 * session.renew_ahead()
                ends = time.monotonic() + 0.1 * session.timeout
                while time.monotonic() < ends:
                    with zk_lock("bursts") as lock:
                        assert lock.is_held
                    cycles += 1
                per_burst.append((len(starts) - before, cycles))
                time.sleep(0.3 * session.timeout)
        finally:
            session.client.sync_async = orig
        print(f"(syncs, cycles) per burst: {per_burst}")
        assert due_seen >= 2  # bursts began with the lease low, where a sync may be due
        assert starts, "no burst needed a sync: the test did not reach its case"
        assert all(a < b for a, b in itertools.pairwise(starts)), "a sync was sent for a lease start proven already"
        assert session.renewals == 0


def test_a_waiter_keeps_its_lease_while_it_waits(own_zk):
    with use(own_zk.hosts, POOL_SIZE=2):
        holder = zk_lock("queue")
        holder.acquire()
        got = threading.Event()

        def wait():
            with zk_lock("queue") as lock:
                assert lock.is_held
                got.set()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(3 * 2.0)
        assert holder.is_held and not got.is_set()
        holder.release()
        assert got.wait(5)
        t.join(5)


def test_a_write_refused_without_a_new_zxid_proves_nothing():
    """A follower checking ACLs eagerly refuses a write itself (NoAuth, no new zxid): no leader saw it."""
    ev = evidence()
    ev.answered(0.0, 0.01, PING, 0)
    ev.answered(1.1, 1.11, SYNC, 0)
    assert ev.answered(1.12, 1.13, CREATE, -102, fresh_zxid=False) is None
    assert ev.answered(1.14, 1.15, CREATE, -102, fresh_zxid=True) == 0.0


def test_answers_that_never_touch_the_session_are_not_recorded():
    assert {100, 101, 102, 105} <= lease.UNTOUCHED  # auth, setWatches, SASL, setWatches2
    assert not lease.UNTOUCHED & (lease.WRITES | {lease.SYNC})


def test_a_reconnect_never_counts_on_a_longer_timeout_than_the_session_was_created_with(own_zk):
    from zklocks.testing.proxy import TcpProxy

    host, port = own_zk.hosts.split(":")
    proxy = TcpProxy(host, int(port)).start()
    try:
        with use(proxy.hosts):
            with zk_lock("t") as lock:
                session = connections["default"].session()
                created = session.timeout
                proxy.reset()  # drop the connection: kazoo reconnects with the same session
                wait_until(lambda: not session.connected, timeout=5)
                wait_until(lambda: session.connected, timeout=5)
                assert lock.is_held
                assert session.timeout <= created and session._credited_timeout == created
    finally:
        proxy.stop()

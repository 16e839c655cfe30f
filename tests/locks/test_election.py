"""zk_leader: one leader per election name, standby candidates in order, failover, and the lease rule."""

import io
import os
import socket
import threading
import time

import pytest
from django.core.management import call_command

from tests.support.helpers import wait_until
from tests.support.threads import HeldInThread
from zklocks import LockLost, signals, zk_leader, zk_lock
from zklocks.client.pools import connections
from zklocks.ops import read_model

pytestmark = pytest.mark.zk


@pytest.fixture
def two_aliases(zklocks_settings, zk_server):
    """'default' and 'standby' on the same server: two sessions, as two hosts would have."""
    alias = zklocks_settings()
    zklocks_settings(EXTRA_ALIASES={"standby": dict(alias)})
    return zk_server


@pytest.fixture
def lost_events():
    events = []

    def receiver(sender, **kw):
        events.append(kw)

    signals.lock_lost.connect(receiver)
    yield events
    signals.lock_lost.disconnect(receiver)


def test_first_candidate_leads_the_others_stand_by_and_take_over_in_order(two_aliases):
    leader = HeldInThread(zk_leader("jobs"))
    try:
        assert leader.acquired and leader.handle.is_leader is True
        assert leader.token > 0
        # A second candidate, on a session of its own, waits.
        candidate = zk_leader("jobs", using="standby")
        assert candidate.acquire(blocking=False) is False
        assert candidate.acquire(timeout=0.3) is False
        assert candidate.is_leader is False and candidate.token is None
        standby = HeldInThread(candidate.__class__("jobs", using="standby"), timeout=0.2)
        assert standby.acquired is False  # nothing held, nothing left queued
        standby.release()
        got = {}
        release_now = threading.Event()

        def run_for_it():
            got["ok"] = candidate.acquire()
            got["leader"] = candidate.is_leader
            release_now.wait(10)
            candidate.release()
            got["after"] = candidate.is_leader

        waiting = threading.Thread(target=run_for_it)
        waiting.start()
        info = wait_until(lambda: (i := read_model.lock_info("default", "jobs")[0]) and i.waiters and i, timeout=5)
        assert info.kind == "election"
        assert [h.token for h in info.holders] == [leader.token]
        assert info.holders[0].pid == os.getpid() and info.holders[0].host == socket.gethostname()
        assert len(info.waiters) == 1 and info.waiters[0].mode == "election"
        out = io.StringIO()
        call_command("zklocks_status", stdout=out)
        row = next(line for line in out.getvalue().splitlines() if " jobs " in f" {line} ")
        assert "election" in row and str(leader.token) in row
        started = time.monotonic()
        leader.release()
        wait_until(lambda: "leader" in got, timeout=5)
        assert got["ok"] is True and got["leader"] is True and time.monotonic() - started < 2.0
        assert candidate.token > leader.token
        info, _ = read_model.lock_info("default", "jobs")
        assert [h.token for h in info.holders] == [candidate.token] and info.waiters == []
        release_now.set()
        waiting.join(10)
        assert got["after"] is False
    finally:
        leader.release()


def test_context_manager_nests_and_an_election_is_not_a_lock(two_aliases):
    with zk_leader("solo") as leader:
        assert leader.is_leader
        leader.ensure_leader()
        with leader:  # nested: same candidacy, no second node
            assert leader.is_leader
        assert leader.is_leader
        info, _ = read_model.lock_info("default", "solo")
        assert info.kind == "election" and len(info.holders) == 1
        # A plain lock of the same name waits behind the leader (one queue per node).
        assert zk_lock("solo", blocking=False, using="standby").acquire() is False
    assert not leader.is_leader
    with pytest.raises(LockLost):
        leader.ensure_leader()


def test_expired_leader_is_no_leader_at_once_and_a_standby_takes_over(two_aliases, zk_expire, lost_events):
    leader = zk_leader("expiring")
    seen = {}
    expired = threading.Event()

    def lead():
        leader.acquire(timeout=5)
        seen["token"] = leader.token
        expired.wait(20)
        wait_until(lambda: not leader.is_leader, timeout=5)
        try:
            leader.ensure_leader()
        except LockLost as exc:
            seen["error"] = exc
        leader.release()  # never raises for a lost leadership, never touches the new leader's node

    thread = threading.Thread(target=lead)
    thread.start()
    wait_until(lambda: "token" in seen, timeout=5)
    waiting = threading.Thread(target=lambda: expired.set())
    candidate = zk_leader("expiring", using="standby")
    zk_expire(two_aliases.hosts, connections["default"].session().client)
    started = time.monotonic()
    waiting.start()
    assert candidate.acquire(timeout=20) is True
    assert time.monotonic() - started < 2.0
    # expire_session closes the session at once (no timeout runs out): the old client learns it on reconnecting.
    wait_until(lambda: not leader.is_leader, timeout=5)
    thread.join(10)
    assert isinstance(seen.get("error"), LockLost) and "expiring" in str(seen["error"])
    wait_until(lambda: lost_events, timeout=20)  # sent from the worker thread: late on a loaded machine
    assert lost_events[0]["kind"] == "election" and lost_events[0]["name"] == "expiring"
    assert lost_events[0]["token"] == seen["token"] and lost_events[0]["reason"] == "expired"
    assert candidate.is_leader and candidate.token > seen["token"]
    candidate.ensure_leader()
    info, _ = read_model.lock_info("default", "expiring")
    assert [h.token for h in info.holders] == [candidate.token]
    candidate.release()

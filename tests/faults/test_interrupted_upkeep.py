"""The upkeep of a session outlives an exception at any point of the call that set it up.

Each background duty (the lease keeper, the silent-server watch, the loss of every hold, the health summary's read)
is scheduled by a call on the caller's thread behind a flag that keeps others from scheduling it twice. A signal
handler's exception (SoftTimeLimitExceeded, KeyboardInterrupt) that lands between the flag and the schedule must
not leave the flag set with nothing scheduled: every later lock of the process would go without that duty. A
tracer raises at the exact point (tests/support/interrupts.py).
"""

import threading
import time

import pytest

from tests.support.helpers import raw_client, wait_until, zk_settings
from tests.support.interrupts import Interrupted, interrupted_acquire, interrupted_call, raise_at, traced
from tests.support.threads import HeldInThread, queue_behind
from zklocks import ZkUnavailable, health, signals, zk_lock
from zklocks.client import clock
from zklocks.client.pools import connections
from zklocks.client.session import Session, every_step
from zklocks.client.worker_threads import WorkerThread
from zklocks.handles.hold_registry import Hold
from zklocks.testing import ZkServer

pytestmark = pytest.mark.zk


@pytest.fixture(scope="module")
def slow_zk():
    """A server of this module's own whose sessions may last up to 10 s (tickTime 500 ms): a silent server is then
    noticed by kazoo only after seconds, and our own watch, within CONNECT_TIMEOUT, is told apart from it."""
    server = ZkServer(tick_time=500)
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def lost_at():
    """The moments (on the lease clock) at which lock_lost was sent, in order."""
    moments: list[float] = []

    def receiver(sender, **kw):
        moments.append(clock.now())

    signals.lock_lost.connect(receiver, weak=False)
    yield moments
    signals.lock_lost.disconnect(receiver)


def test_an_interrupted_arming_of_the_lease_keeper_leaves_later_holds_kept(slow_zk, lost_at):
    with zk_settings(slow_zk.hosts, "/upkeep", SESSION_TIMEOUT=6.0, TICK_TIME=0.5):
        tracer, seen = raise_at(WorkerThread.call_at.__code__, caller=Session._arm_keeper.__code__)
        box = interrupted_acquire(zk_lock("keeper-first"), tracer)
        assert seen and "interrupted" in box, "the tracer never fired in Session._arm_keeper"
        lock = zk_lock("keeper-later")
        lock.acquire()
        session = connections["default"].session()
        slow_zk.pause()
        try:
            time.sleep(0.2)  # an answer on its way may still renew the lease; none comes after it
            deadline = session.lease_deadline()
            wait_until(lambda: lost_at, timeout=2 * session.timeout + 2)
            # The keeper declares the loss at the lease deadline. Without it, the loss waited for kazoo to give
            # up on the connection and a whole session timeout more, long after a server could have expired us.
            assert lost_at[0] <= deadline + 1.0, (lost_at[0] - deadline, session.timeout)
        finally:
            slow_zk.resume()
        lock.release()


def test_an_interrupted_start_of_the_silent_server_watch_leaves_later_waiters_watched(slow_zk):
    with zk_settings(slow_zk.hosts, "/upkeep", SESSION_TIMEOUT=10.0, CONNECT_TIMEOUT=1.0, TICK_TIME=0.5):
        holder = HeldInThread(zk_lock("watched"), name="holder")
        assert holder.wait(10), holder.error
        try:
            waking = Session.waking.__wrapped__.__code__  # type: ignore[attr-defined]
            tracer, seen = raise_at(WorkerThread.call_later.__code__, caller=waking)
            box = interrupted_acquire(zk_lock("watched", timeout=30), tracer)
            assert seen and "interrupted" in box, "the tracer never fired in Session.waking"
            waiter = queue_behind("watched", "waiter", 1)
            time.sleep(0.5)  # its requests answered: it waits for its predecessor, asking nothing
            slow_zk.pause()
            try:
                paused = time.monotonic()
                assert waiter.returned.wait(15), "the waiter never heard of the silent server"
                heard = time.monotonic() - paused
                assert isinstance(waiter.error, ZkUnavailable), waiter.error
                # Within CONNECT_TIMEOUT (and a look every quarter of it); kazoo itself would take two thirds of
                # the 10 s session timeout.
                assert heard < 1.0 + 2.0, heard
            finally:
                slow_zk.resume()
        finally:
            holder.release()


def test_an_interrupted_loss_still_loses_every_hold_and_closes_the_session(zk_server):
    first, second = zk_lock("loss-a"), zk_lock("loss-b")
    first.acquire()
    second.acquire()
    holds = [first._hold(), second._hold()]
    session = connections["default"].session()
    # After the first hold is marked lost, before its signal is sent: the loop over the holds is cut there.
    tracer, seen = raise_at(signals.send_async.__code__, caller=Hold.mark_lost.__code__)
    box = interrupted_call(lambda: session.declare_lost("suspended"), tracer)
    assert seen and "interrupted" in box
    assert [hold.lost_reason for hold in holds] == ["suspended", "suspended"]
    # The session is closed as well: its nodes go at once, not a session timeout after this process exits.
    wait_until(lambda: session.client._stopped.is_set(), timeout=15)
    client = raw_client(zk_server.hosts)
    try:
        wait_until(lambda: not client.get_children(first.path) and not client.get_children(second.path), timeout=10)
    finally:
        client.stop()
    first.release()
    second.release()


def test_an_interrupted_start_of_the_health_read_costs_later_requests_nothing(zk_server):
    with zk_lock("held-long"):
        time.sleep(0.3)
        tracer, seen = raise_at(threading.Thread.start.__code__, caller=health.summary.__code__)
        with traced(tracer), pytest.raises(Interrupted):
            health.summary(["default"], 0.2)
        assert seen
        # The next request reads the locks itself: it neither waits for a read that never started nor answers
        # from nothing.
        assert [text for text in health.summary(["default"], 0.2) if "held-long" in text]


def test_a_loss_cut_short_before_its_first_step_is_completed_by_the_close(zk_server):
    lock = zk_lock("loss-cut")
    lock.acquire()
    hold = lock._hold()
    session = connections["default"].session()
    tracer, seen = raise_at(every_step.__code__, caller=Session.declare_lost.__code__)
    with traced(tracer), pytest.raises(Interrupted):
        session.declare_lost("suspended")
    assert seen and session.dead and hold.lost_reason is None  # marked dead, nothing else done yet
    session.close()  # what the pool or the exit does with a dead session
    assert hold.lost_reason == "suspended"
    assert session.client._stopped.is_set()
    lock.release()

"""A signal handler's exception right after a call returns, where CPython runs Python signal handlers (a C call
such as ``set.add`` too): the beat's SIGTERM (Celery's handler closes the scheduler, then raises SystemExit) and a
task's soft time limit must leave no record behind that outlives the step they cut off. In process, on real
ZooKeeper; the exception comes from a profile function at the call's return, as the handler's would."""

import logging
import sys
import uuid

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from tests.support.beat_in_process import elected, memory_app
from tests.support.celery_app import rec_skip
from tests.support.interrupts import after_c_call, at_entry, traced
from zklocks import zk_lock
from zklocks.celery import task as task_module
from zklocks.celery.beat import LeaderScheduler
from zklocks.client.pools import connections
from zklocks.recipes import node_data

pytestmark = pytest.mark.zk

NOTED = "may have committed unsent; noted for the leader"


@pytest.fixture
def app(settings):
    return memory_app(settings, "beat-stop")


def test_a_sigterm_as_the_loop_step_begins_still_closes_the_beat(app):
    beat = elected(app)

    def celery_sigterm():
        beat.close()  # Celery's handler: service.sync() closes the scheduler ...
        raise SystemExit()  # ... then raises, wherever the main thread was

    # Right after _in_loop noted the step (set.add returned): the close is deferred to the step's end.
    with pytest.raises(SystemExit), traced(after_c_call("add", LeaderScheduler._in_loop.__code__, celery_sigterm),
                                           install=sys.setprofile):  # fmt: skip
        beat.tick()
    beat.close()  # Celery's Service.start syncs once more on its way out
    assert beat._closed and not beat._looping
    assert not beat.leader.is_leader


def test_a_sigterm_between_a_committed_claim_and_its_send_leaves_the_claim_noted(app, caplog):
    caplog.set_level(logging.WARNING)
    beat = elected(app)
    entry = beat._inner.schedule["nightly"]
    beat._inner.apply_entry(entry)  # a send that is published leaves nothing in doubt
    assert not beat._doubt

    def celery_sigterm():
        beat.close()
        raise SystemExit()

    # The claim committed in ZooKeeper; the stop lands before the send's own guard is in place.
    with pytest.raises(SystemExit), traced(at_entry(LeaderScheduler.stamp.__code__, celery_sigterm),
                                           install=sys.setprofile):  # fmt: skip
        beat._inner.apply_entry(entry)
    beat.close()
    noted = [r.getMessage() for r in caplog.records if NOTED in r.getMessage()]
    assert len(noted) == 1 and "nightly" in noted[0], noted  # the next leader sends it (test_beat_claims.py)
    assert not beat.leader.is_leader


def test_a_soft_time_limit_as_a_task_begins_leaves_no_record_on_the_thread(zklocks_settings):
    key = f"soft-{uuid.uuid4().hex[:8]}"

    def soft_time_limit():
        raise SoftTimeLimitExceeded()

    # Right after the task noted its lock as held by this thread (set.add returned), before its body ran.
    run_holding = task_module.SingleExecutionTask._run_holding.__code__
    with traced(after_c_call("add", run_holding, soft_time_limit), install=sys.setprofile):
        result = rec_skip.apply(args=(key, 0.0))
    assert isinstance(result.result, SoftTimeLimitExceeded)
    assert not [held for held in task_module._held_here() if held[1] == f"rec:{key}"]
    assert node_data.current_task.get() is None  # later locks of this thread name no task as their holder
    with zk_lock(f"rec:{key}", blocking=False):  # and the lock is free
        pass


@pytest.mark.parametrize("var", ["current_task", "current_call"])
def test_a_soft_time_limit_as_a_task_names_its_lock_attempt_leaves_no_record_on_the_thread(zklocks_settings, var):
    key = f"soft-{uuid.uuid4().hex[:8]}"
    fired = []

    def soft_time_limit():
        fired.append(True)
        raise SoftTimeLimitExceeded()

    # Right after the task named itself for the node it is about to create (ContextVar.set returned).
    acquire = task_module.SingleExecutionTask._acquire.__code__
    skip = 0 if var == "current_task" else 1

    def profile(frame, event, arg):
        nonlocal skip
        if event == "c_return" and frame.f_code is acquire and getattr(arg, "__name__", "") == "set":
            if skip:
                skip -= 1
                return
            sys.setprofile(None)
            soft_time_limit()

    with traced(profile, install=sys.setprofile):
        result = rec_skip.apply(args=(key, 0.0))
    assert fired and isinstance(result.result, SoftTimeLimitExceeded)
    assert node_data.current_task.get() is None  # later locks of this thread name no task as their holder
    assert node_data.current_call.get() is None
    with zk_lock(f"rec:{key}", blocking=False):  # and the lock is free
        pass


def test_a_claim_left_unknown_by_a_short_outage_is_sent_once_by_the_same_leader(settings, long_sessions_zk):
    """The leader's claim commits, its answer is lost with the link, and the link stays away longer than
    CONNECT_TIMEOUT but shorter than the lease: the claim stays unknown while the beat leads on. Once ZooKeeper
    is back, the same leader notes it and must send it (before: its own adopt_orphans dropped it as "never
    committed", since a leader inherits only other tokens' claims); and the entry's next due, earlier, must not
    replace the unresolved claim in ZooKeeper (its outcome could then never be told)."""
    from celery.signals import after_task_publish

    from tests.support.helpers import wait_until, zk_settings
    from zklocks.celery.beat import HEADER
    from zklocks.testing.proxy import TcpProxy

    proxy = TcpProxy("127.0.0.1", long_sessions_zk.port).start()
    published: list = []

    def on_published(headers=None, **kwargs):
        published.append(((headers or {}).get(HEADER) or {}).get("sent_at"))

    after_task_publish.connect(on_published, weak=False)
    try:
        with zk_settings(proxy.hosts, f"/beat-unknown-{uuid.uuid4().hex[:8]}", SESSION_TIMEOUT=12.0,
                         CONNECT_TIMEOUT=1.0, TICK_TIME=0.1):  # fmt: skip
            beat = elected(memory_app(settings, "beat-unknown"))
            try:
                entry = beat._inner.schedule["nightly"]
                proxy.drop_after_next_request((14,), contains=b"nightly", then_partition=True, settle=0.3)
                beat._inner.apply_entry(entry)  # the claim commits; its answer and the resolving reads are lost
                assert proxy.dropped.is_set() and len(beat._doubt) == 1 and published == []
                ((_, sent_at, _),) = beat._doubt
                proxy.heal()
                client = connections["default"].session().client
                wait_until(lambda: client.connected, timeout=10)
                assert beat.leader.is_leader
                beat._inner.apply_entry(entry)  # the entry is due again before the next look around
                assert published == []
                beat.tick()  # the look around notes the unknown claim, and takes it up
                assert [round(p, 5) for p in published] == [round(sent_at, 5)], (published, sent_at)
                assert not beat._doubt
            finally:
                beat.close()
    finally:
        after_task_publish.disconnect(on_published)
        proxy.stop()

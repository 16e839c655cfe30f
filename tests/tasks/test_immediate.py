"""zklocks.tasks over Django's ImmediateBackend and DummyBackend, in process, against the suite's ZooKeeper."""

import threading

import pytest

from tests.support.threads import free_for_others
from tests.tasks.conftest import REQUIRES, wait_for

pytestmark = [pytest.mark.zk, pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

pytest.importorskip(**REQUIRES, exc_type=ImportError)


def overlapping(runs) -> bool:
    spans = sorted((start, end) for _, _, start, end, _ in runs)
    return any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))


def in_threads(*calls):
    """Run the calls at once, each on its own thread; their return values (or exceptions) in order."""
    out: list = [None] * len(calls)

    def run(i, fn):
        try:
            out[i] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    return threads, out


def test_the_function_runs_under_the_lock_with_its_token_in_the_context(djtasks):
    from zklocks.tasks.compat import TaskResultStatus

    first = djtasks.report.enqueue(7)
    second = djtasks.report.enqueue(7)
    assert first.status == second.status == TaskResultStatus.SUCCESSFUL
    assert isinstance(first.return_value, int) and second.return_value > first.return_value
    assert [r[4] for r in djtasks.RUNS] == [first.return_value, second.return_value]


def test_a_second_execution_of_a_running_key_is_skipped(djtasks, outcomes):
    djtasks.GATES["report:1"] = threading.Event()
    threads, out = in_threads(lambda: djtasks.report.enqueue(1))
    assert wait_for(lambda: djtasks.ENTERED.get("report:1") and djtasks.ENTERED["report:1"].is_set())
    other_key = djtasks.report.enqueue(2)  # another key runs meanwhile
    skipped = djtasks.report.enqueue(1)
    djtasks.GATES["report:1"].set()
    threads[0].join(20)
    assert other_key.return_value is not None
    assert skipped.return_value is None and out[0].return_value is not None
    assert [r[0] for r in djtasks.RUNS] == ["report:2", "report:1"] and djtasks.PEAK["report:1"] == 1
    assert wait_for(lambda: ("tests.support.djtasks.report", "skipped", skipped.id) in outcomes)


def test_without_the_backend_the_same_calls_overlap(djtasks):
    # The control of the test above: the plain ImmediateBackend runs both executions of one key at once.
    djtasks.GATES["report:1"] = threading.Event()
    threads, _ = in_threads(lambda: djtasks.plain_report.enqueue(1), lambda: djtasks.plain_report.enqueue(1))
    assert wait_for(lambda: djtasks.PEAK.get("report:1") == 2)
    djtasks.GATES["report:1"].set()
    for t in threads:
        t.join(10)
    assert overlapping(djtasks.RUNS)


def test_on_locked_raise_fails_the_result_with_lock_not_acquired(djtasks, outcomes):
    from zklocks.tasks.compat import TaskResultStatus

    djtasks.GATES["strict:3"] = threading.Event()
    threads, out = in_threads(lambda: djtasks.strict.enqueue(3))
    assert wait_for(lambda: djtasks.ENTERED.get("strict:3") and djtasks.ENTERED["strict:3"].is_set())
    refused = djtasks.strict.enqueue(3)
    djtasks.GATES["strict:3"].set()
    threads[0].join(10)
    assert refused.status == TaskResultStatus.FAILED
    assert refused.errors[0].exception_class_path == "zklocks.exceptions.LockNotAcquired"
    assert out[0].status == TaskResultStatus.SUCCESSFUL
    assert wait_for(lambda: ("tests.support.djtasks.strict", "raised", refused.id) in outcomes)


def test_unique_queued_returns_the_running_result(djtasks, outcomes):
    """A second enqueue while the first runs returns the first's TaskResult (same id) and runs nothing."""
    from zklocks.execution.holder_task import holder_task_id
    from zklocks.tasks import markers

    djtasks.GATES["unique:5"] = threading.Event()
    threads, out = in_threads(lambda: djtasks.unique_report.enqueue(5))
    assert wait_for(lambda: djtasks.ENTERED.get("unique:5") and djtasks.ENTERED["unique:5"].is_set())
    record, _ = markers.read("default", "unique:5")
    assert record["state"] == "running"
    # The lock's holder data names the running result, as the admin shows it.
    assert holder_task_id("default", "unique:5") == record["task_id"]
    shared = [djtasks.unique_report.enqueue(5) for _ in range(3)]
    djtasks.GATES["unique:5"].set()
    threads[0].join(10)
    first = out[0]
    assert {r.id for r in shared} == {first.id} == {record["task_id"]}
    assert [r[0] for r in djtasks.RUNS] == ["unique:5"]
    assert wait_for(lambda: outcomes.count(("tests.support.djtasks.unique_report", "shared", first.id)) == 3)
    # Finished: the record is gone and the next enqueue runs again.
    assert markers.read("default", "unique:5") is None
    again = djtasks.unique_report.enqueue(5)
    assert again.id != first.id and len(djtasks.RUNS) == 2


def test_another_calls_record_is_left_alone_by_a_run_inside_the_enqueue(djtasks):
    """The key's live record is another call's (other arguments): the immediate run of this call neither takes it
    over nor removes it, and that call's producers still share its execution."""
    from zklocks.tasks import markers

    markers.write("default", "unique:6", "other-id", "tests.support.djtasks.unique_report", "queued", 60, "other")
    before, _ = markers.read("default", "unique:6")
    result = djtasks.unique_report.enqueue(6, seconds=0.01)
    assert result.return_value is not None and [r[0] for r in djtasks.RUNS] == ["unique:6"]  # it ran, locked
    after, _ = markers.read("default", "unique:6")
    assert after == before


def test_dummy_backend_unique_queued_keeps_one_queued_task(djtasks, outcomes):
    from zklocks.tasks.compat import task_backends

    first = djtasks.dummy_unique.enqueue(1)
    again = [djtasks.dummy_unique.enqueue(1) for _ in range(3)]
    other = djtasks.dummy_unique.enqueue(2)
    assert {r.id for r in again} == {first.id} and other.id != first.id
    assert len(task_backends["dummy"].results) == 2
    # The control: the same backend without unique_queued queues every call.
    for _ in range(3):
        djtasks.dummy_plain.enqueue(1)
    assert len(task_backends["dummy"].results) == 5
    # A queued task that is gone from the store no longer blocks.
    task_backends["dummy"].clear()
    fresh = djtasks.dummy_unique.enqueue(1)
    assert fresh.id != first.id and len(task_backends["dummy"].results) == 1


def test_an_exception_as_the_record_goes_still_releases_the_lock(djtasks):
    """A signal handler's exception (a time limit) that lands as the run removes its unique_queued record, after
    the function: the lock is released all the same."""
    from tests.support.interrupts import Interrupted, raise_at, traced
    from zklocks import zk_lock
    from zklocks.tasks import runner

    tracer, seen = raise_at(runner._forget.__code__, caller=runner.run_single.__code__)
    with traced(tracer):
        try:
            djtasks.unique_report.enqueue(8, seconds=0.01)
        except Interrupted:
            pass  # or recorded as the task's failure, as the backend chooses
    assert len(seen) == 1 and [r[0] for r in djtasks.RUNS] == ["unique:8"]
    assert free_for_others(lambda: zk_lock("unique:8")) is True


ENQUEUE_POINTS = [
    # (where, the C call, which of its returns in that frame, another call's record is live)
    ("enqueue", "set", 1, False),  # the claim of the enqueue lock
    ("enqueue", "get", 1, False),  # whether a run inside the enqueue took the lock over
    ("enqueue", "reset", 1, False),  # the finally's
    ("enqueue", "set", 2, True),  # another call's record: the enqueue lock goes before the call is queued
    ("hand_over", "set", 1, False),  # the run inside the enqueue takes the enqueue lock over
]


@pytest.mark.parametrize("point", range(len(ENQUEUE_POINTS)))
def test_an_exception_around_the_enqueue_lock_lets_it_go(djtasks, point):
    """A signal handler's exception lands as one of the C calls around the unique_queued enqueue lock returns:
    the enqueue lock and the task's lock are free afterwards (an enqueue lock left held would block every later
    enqueue of the key for ENQUEUE_WAIT), and the enqueue's claim is not left in the caller's context."""
    import sys

    from tests.support.interrupts import Interrupted, traced
    from zklocks import zk_lock
    from zklocks.tasks import markers, runner
    from zklocks.tasks.backend import SingleExecutionBackend

    where, call, nth, other = ENQUEUE_POINTS[point]
    key = 20 + point
    if other:
        markers.write("default", f"unique:{key}", "other-id", "tests.support.djtasks.unique_report", "queued", 60, "x")
    target = {"enqueue": SingleExecutionBackend.enqueue, "hand_over": runner._hand_over_record}[where].__code__
    seen: list = []

    def profiler(frame, event, arg):
        if event == "c_return" and frame.f_code is target and getattr(arg, "__name__", "") == call:
            seen.append(arg)
            if len(seen) == nth:
                raise Interrupted(f"injected as {call} returned in {where}")

    with traced(profiler, sys.setprofile):
        try:
            djtasks.unique_report.enqueue(key, seconds=0.0)
        except Interrupted:
            pass
    assert len(seen) >= nth
    assert runner.enqueuing.get() is None
    for name in (f"unique:{key}", markers.enqueue_lock_name(f"unique:{key}")):
        assert free_for_others(lambda n=name: zk_lock(n)) is True, name


def test_a_newline_in_a_forged_records_task_id_forges_no_log_line(djtasks, caplog):
    """A record written by anyone who can write the namespace names a task id with a newline in it: the enqueue
    finds it stale and logs its removal with the id through repr, so no line of its own starts (the request path's
    case is tests/faults/test_log_injection.py)."""
    import logging

    from zklocks.tasks import markers

    forged = "f00d\nERROR zklocks: forged line"
    markers.write("default", "unique:40", forged, "tests.support.djtasks.unique_report", "running", 60, "x")
    caplog.set_level(logging.INFO, logger="zklocks")
    djtasks.unique_report.enqueue(40, seconds=0.0)
    removals = [r.getMessage() for r in caplog.records if "stale queued record" in r.getMessage()]
    assert len(removals) == 1 and "\n" not in removals[0], removals
    assert "\\nERROR zklocks: forged line" in removals[0]

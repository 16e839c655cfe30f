"""A de-duplicated call shares only the execution of the same call: the same task with the same arguments
(docs/celery.md, "De-duplication"). A lock_key may be the same for other calls (another task with the same
template, or arguments the key leaves out); they are queued and run under the lock, never handed another's result.
Real ZooKeeper; the records are the ones SingleExecutionTask and zklocks.tasks write."""

import pytest

from zklocks import zk_lock
from zklocks.execution import keys, unique
from zklocks.execution.holder_task import holder_task_id
from zklocks.recipes import node_data

pytestmark = pytest.mark.zk


def report(account_id, fmt="pdf"):
    pass


def test_call_digests_tell_calls_apart():
    same = keys.call_digest("t.report", report, (7,), {})
    assert same == keys.call_digest("t.report", report, (), {"account_id": 7, "fmt": "pdf"})  # bound, defaults
    assert same != keys.call_digest("t.report", report, (7,), {"fmt": "csv"})
    assert same != keys.call_digest("t.other", report, (7,), {})
    assert keys.call_digest("t.report", report, (object(),), {})  # not JSON: no error


def test_a_queued_marker_is_shared_only_with_the_same_call(zklocks_settings):
    pdf, csv = (keys.call_digest("t.report", report, (7,), {"fmt": f}) for f in ("pdf", "csv"))
    assert unique.claim("default", "report:7", "id-1", "t.report", 60, pdf) == "id-1"
    assert unique.claim("default", "report:7", "id-2", "t.report", 60, pdf) == "id-1"  # the same call
    assert unique.claim("default", "report:7", "id-3", "t.report", 60, csv) is None  # other arguments
    other_task = keys.call_digest("t.other", report, (7,), {"fmt": "pdf"})
    assert unique.claim("default", "report:7", "id-4", "t.other", 60, other_task) is None  # another task
    assert unique.mark_running("default", "report:7", "id-1", "t.report", 60)
    assert node_data.parse(unique_marker("report:7"))["call"] == pdf  # "running" keeps which call it is


def unique_marker(name):
    from zklocks.client.pools import connections

    pool = connections["default"]
    return pool.session().client.get(unique.marker_path(pool, name))[0]


def test_a_running_execution_is_shared_only_with_the_same_call(zklocks_settings):
    pdf, csv = (keys.call_digest("t.report", report, (7,), {"fmt": f}) for f in ("pdf", "csv"))
    task = node_data.current_task.set(("id-1", "t.report"))
    call = node_data.current_call.set(pdf)
    try:
        lock = zk_lock("report:7")
        lock.acquire()
    finally:
        node_data.current_call.reset(call)
        node_data.current_task.reset(task)
    try:
        assert holder_task_id("default", "report:7") == "id-1"
        assert holder_task_id("default", "report:7", same_call=pdf) == "id-1"
        assert holder_task_id("default", "report:7", same_call=csv) is None
    finally:
        lock.release()


@pytest.mark.parametrize(
    "fields",
    [
        '"ttl":NaN,"task_id":"ghost"',
        '"ttl":true,"task_id":"ghost"',
        '"ttl":60',  # live by its age, but with no task to share: KeyError before
        '"ttl":60,"task_id":["not","a","string"]',
    ],
    ids=["nan", "true", "no task id", "task id a list"],
)
def test_a_queued_marker_written_by_someone_else_blocks_no_key(zklocks_settings, kz, fields):
    """A queued marker in the namespace that zklocks did not write (on an open alias anyone may): one whose ttl is
    not a number of seconds, or that names no task, is stale, and the next task of the key claims the marker."""
    from zklocks.client.pools import connections

    pool = connections["default"]
    path = unique.marker_path(pool, "report:9")
    kz.create(path, ('{"v":1,"kind":"unique","state":"queued","call":"c",' + fields + "}").encode(), makepath=True)
    assert unique.claim("default", "report:9", "id-1", "t.report", 60, "c") == "id-1"

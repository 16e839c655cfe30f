"""The admin's "Tasks by key" section reads the policies' nodes as data from anyone: a task id of the
wrong type, a damaged node or a marker of a running task never shows as queued, and every value is escaped."""

import json

import pytest

from zklocks import lock_path, zk_lock
from zklocks.ops import read_model
from zklocks.ops.snapshots import QueuedTask

pytestmark = [pytest.mark.zk, pytest.mark.django_db]

XSS = "<script>alert(1)</script>"


def data(**fields):
    return json.dumps({"v": 1, **fields}).encode()


@pytest.mark.timeout(30)
def test_policy_nodes_with_hostile_data(admin_client, kz):
    path = lock_path("pol:hostile")
    kz.create(f"{path}/__latest__", data(kind="debounce", state="queued", task_id=XSS, task_name=7), makepath=True)
    kz.create(f"{path}/__retry__", b"\xff not json")
    kz.create(f"{path}/__queued__", data(kind="unique", state="queued", task_id=["a list"], task_name="t"))
    info, error = read_model.lock_info("default", "pol:hostile")
    assert error is None
    assert info.queued_tasks == [QueuedTask("debounce", XSS, None)]
    html = admin_client.get("/admin/zklocks/lock/").content.decode()
    assert XSS not in html
    assert 'data-task-id="&lt;script&gt;alert(1)&lt;/script&gt;"' in html


@pytest.mark.timeout(30)
def test_a_marker_of_the_running_task_is_not_queued(admin_client, kz):
    with zk_lock("pol:running"):
        kz.create(
            f"{lock_path('pol:running')}/__queued__", data(kind="unique", state="running", task_id="t-1", task_name="x")
        )
        info, _ = read_model.lock_info("default", "pol:running")
        assert info.queued_tasks == []
        assert info.to_dict()["queued_tasks"] == []

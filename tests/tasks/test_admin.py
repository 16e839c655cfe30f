"""The admin's tasks-by-key table shows zklocks.tasks keys: the result queued under a key (its ``__queued__``
record) and the result running under it (the holder's task id)."""

import threading

import pytest

from tests.tasks.conftest import REQUIRES, wait_for

pytestmark = [pytest.mark.zk, pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

pytest.importorskip(**REQUIRES, exc_type=ImportError)

LIST = "/admin/zklocks/lock/"


def test_a_queued_task_is_listed_under_its_key(djtasks, admin_client):
    from zklocks.ops import read_model

    queued = djtasks.dummy_unique.enqueue(9)
    info, error = read_model.lock_info("default", "dummy:9")
    assert error is None
    assert [(q.policy, q.task_id, q.task_name) for q in info.queued_tasks] == [
        ("unique_queued", queued.id, "tests.support.djtasks.dummy_unique")
    ]
    listing = admin_client.get(LIST, {"q": "dummy:9"}).content.decode()
    assert f'class="zk-queued" data-task-id="{queued.id}"' in listing


def test_a_running_task_is_listed_as_running_not_queued(djtasks, admin_client):
    from zklocks.ops import read_model

    djtasks.GATES["unique:11"] = threading.Event()
    worker = threading.Thread(target=lambda: djtasks.unique_report.enqueue(11))
    worker.start()
    try:
        assert wait_for(lambda: djtasks.ENTERED.get("unique:11") and djtasks.ENTERED["unique:11"].is_set())
        info, _ = read_model.lock_info("default", "unique:11")
        (running,) = info.running_tasks
        assert running.task_name == "tests.support.djtasks.unique_report" and info.queued_tasks == []
        listing = admin_client.get(LIST, {"q": "unique:11"}).content.decode()
        assert f'class="zk-running" data-task-id="{running.task_id}"' in listing
    finally:
        djtasks.GATES["unique:11"].set()
        worker.join(10)
    info, _ = read_model.lock_info("default", "unique:11")
    assert info is None or not (info.queued_tasks or info.running_tasks)  # gone once the task finished

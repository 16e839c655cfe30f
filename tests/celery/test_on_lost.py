"""on_lost and max_hold of SingleExecutionTask with real workers: "terminate" ends the prefork child or the solo
worker before the lease ends and records LockLost; "cancel" raises LockLost in the task; max_hold caps a hold."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.celery_app import (
    cancel_on_loss,
    capped_cancel,
    capped_terminate,
    rec_wait,
    terminate_on_loss,
)
from tests.support.celery_harness import new_key, running_workers
from tests.support.helpers import wait_until
from zklocks import LockLost
from zklocks.celery.terminate import TERMINATE_EXIT
from zklocks.client import lease
from zklocks.testing import ZkServer, expire_session

pytestmark = pytest.mark.celery


def gone(pid: int) -> bool:
    """Ended (a zombie not yet reaped by its parent counts as ended: it runs no instruction)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_gone(pid: int, timeout: float) -> float:
    """time.time() at which ``pid`` was first seen ended (polled every millisecond)."""
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        if gone(pid):
            return time.time()
        time.sleep(0.001)
    raise AssertionError(f"process {pid} still runs {timeout} s after the loss")


def final_meta(app, task_id: str, settle: float = 2.0) -> dict:
    """The task's record once the pool's own handling of the lost child is over."""
    time.sleep(settle)
    return app.backend.get_task_meta(task_id)


@pytest.fixture
def frozen_zk():
    server = ZkServer(tick_time=100)
    server.start()
    yield server
    server.cleanup()


def check_stopped_before_lease_end(env, key: str, dead_at: float) -> None:
    beats = env.records_of(f"beat-{key}")
    assert beats, "the task never reported"
    lease_end = beats[-1]["lease_end"]
    margin = lease_end - dead_at
    print(f"process ended {1000 * margin:.1f} ms before the lease's end")
    # Decided TERMINATE_AHEAD (at most half the renewal lead) before the lease's end; the bound is the leader's
    # earliest expiry (lease.py's margin), room for a process starved of CPU on a loaded machine.
    assert dead_at <= lease_end + lease.loss_margin(env.session_timeout)


@pytest.mark.timeout(120)
def test_terminate_ends_the_prefork_child_before_the_lease_of_a_frozen_server_ends(frozen_zk, redis_server, celery_app):
    prefork = {"pool": "prefork", "concurrency": 1, "queue": "zk-terminate"}
    with running_workers(frozen_zk.hosts, redis_server.url, prefork) as env:
        key = new_key()
        result = terminate_on_loss.apply_async((key,), queue="zk-terminate")
        pid = env.wait_records(f"started-{key}", 1)[0]["pid"]
        env.wait_records(f"beat-{key}", 3)
        frozen_zk.pause()
        try:
            dead_at = wait_gone(pid, 20)
        finally:
            frozen_zk.resume()
        check_stopped_before_lease_end(env, key, dead_at)
        meta = final_meta(celery_app, result.id)
        assert meta["status"] == "FAILURE"
        assert isinstance(meta["result"], LockLost), meta["result"]
        # the pool replaced its child, which runs the next task
        worker = env.workers[0]
        assert wait_until(lambda: worker.children() and pid not in worker.children(), timeout=20)
        assert rec_wait.apply_async((new_key(), 0.05), queue="zk-terminate").get(timeout=30)


@pytest.mark.timeout(120)
def test_terminate_ends_a_solo_worker_before_the_lease_ends(frozen_zk, redis_server, celery_app):
    solo = {"pool": "solo", "concurrency": 1, "queue": "zk-terminate-solo"}
    with running_workers(frozen_zk.hosts, redis_server.url, solo) as env:
        key = new_key()
        result = terminate_on_loss.apply_async((key,), queue="zk-terminate-solo")
        started = env.wait_records(f"started-{key}", 1)[0]
        worker = env.workers[0]
        assert started["pid"] == worker.proc.pid  # solo: the task runs in the worker process itself
        env.wait_records(f"beat-{key}", 3)
        frozen_zk.pause()
        try:
            dead_at = wait_gone(worker.proc.pid, 20)
        finally:
            frozen_zk.resume()
        check_stopped_before_lease_end(env, key, dead_at)
        assert worker.proc.wait(10) == TERMINATE_EXIT
        meta = final_meta(celery_app, result.id, settle=0.5)
        assert meta["status"] == "FAILURE" and isinstance(meta["result"], LockLost), meta["result"]


@pytest.mark.timeout(120)
def test_cancel_raises_lock_lost_in_a_prefork_task_on_a_real_expiry(zk_server, redis_server, celery_app):
    prefork = {"pool": "prefork", "concurrency": 1, "queue": "zk-cancel"}
    with running_workers(zk_server.hosts, redis_server.url, prefork) as env:
        key = new_key()
        result = cancel_on_loss.apply_async((key,), queue="zk-cancel")
        started = env.wait_records(f"started-{key}", 1)[0]
        expire_session(zk_server.hosts, (started["session_id"], bytes.fromhex(started["password"])))
        with pytest.raises(LockLost):
            result.get(timeout=20)
        stopped = env.wait_records(f"stopped-{key}", 1)[0]
        assert stopped["reason"] == "expired"
        assert started["pid"] in env.workers[0].children()  # cancel ends the task, not the process


@pytest.mark.timeout(120)
def test_max_hold_ends_a_task_and_the_next_one_takes_over_at_once(zk_server, redis_server, celery_app):
    prefork = {"pool": "prefork", "concurrency": 2, "queue": "zk-capped"}
    with running_workers(zk_server.hosts, redis_server.url, prefork) as env:
        for task in (capped_cancel, capped_terminate):
            key = new_key()
            capped = task.apply_async((key,), queue="zk-capped")
            started = env.wait_records(f"started-{key}", 1)[0]
            waiting = rec_wait.apply_async((key, 0.05), queue="zk-capped")  # lock_timeout=30: waits behind it
            value = waiting.get(timeout=30)
            meta = final_meta(celery_app, capped.id, settle=1.0)
            assert meta["status"] == "FAILURE" and isinstance(meta["result"], LockLost), (task.name, meta)
            assert "max_hold" in str(meta["result"])
            # the waiter held after the cap (0.6 s), and at once: a clean release, not a session timeout (2 s)
            handover = value["start"] - started["mono"]
            print(f"{task.name}: the next task held {handover:.3f} s after the capped one started")
            assert 0.6 <= handover < 0.6 + 1.0, handover
            if task is capped_cancel:
                assert env.wait_records(f"stopped-{key}", 1)[0]["mono"] <= value["start"]  # work stopped first
            else:
                assert gone(started["pid"])

"""Faults with real workers: a SIGKILLed pool child, acks_late redelivery, a ZooKeeper outage, worker shutdown."""

import os
import signal
import time

import pytest

from tests.support.celery_app import (
    hold_for,
    late_retry,
    late_skip,
    rec_skip,
    rec_wait,
    session_info,
    unavailable_retry,
)
from tests.support.celery_harness import new_key, running_workers
from tests.support.helpers import assert_no_overlap, wait_until
from zklocks.names import join_path
from zklocks.recipes.layout import KAZOO
from zklocks.testing import four_letter
from zklocks.testing.proxy import TcpProxy

pytestmark = pytest.mark.celery

SESSION_TIMEOUT = 2.0
TICK = 0.2  # the suite's ZooKeeper tickTime
SLACK = 1.0  # scheduling on a loaded two-core machine


@pytest.fixture(scope="module")
def celery_env(zk_server, redis_server, celery_app):
    prefork = {"pool": "prefork", "concurrency": 2, "queue": "zk-faults"}
    with running_workers(zk_server.hosts, redis_server.url, prefork, prefork, session_timeout=SESSION_TIMEOUT) as env:
        yield env


def holder_node(client, namespace, name):
    contenders = KAZOO.sort_contenders(client.get_children(join_path(namespace, name)))
    return contenders[0][2] if contenders else None


def kill_holder(celery_env, kz, key):
    """SIGKILL the pool child that runs the first execution of ``key``; return (kill time, its node)."""
    started = celery_env.wait_records(f"started-{key}", 1)[0]
    node = holder_node(kz, celery_env.namespace, f"rec:{key}")
    assert node is not None
    os.kill(started["pid"], signal.SIGKILL)
    return time.monotonic(), node, started


def test_sigkilled_pool_child_frees_the_lock_within_session_timeout(celery_env, kz):
    key = new_key()
    first = hold_for.apply_async((key, 60.0), queue="zk-faults")
    celery_env.wait_records(f"started-{key}", 1)
    waiting = rec_wait.apply_async((key, 0.05), queue="zk-faults")  # lock_timeout=30: queues behind the holder
    parent = join_path(celery_env.namespace, f"rec:{key}")
    wait_until(lambda: len(kz.get_children(parent)) == 2, timeout=10)
    killed_at, node, started = kill_holder(celery_env, kz, key)
    wait_until(lambda: node not in kz.get_children(parent), timeout=SESSION_TIMEOUT + TICK + SLACK + 5)
    freed_after = time.monotonic() - killed_at
    assert freed_after <= SESSION_TIMEOUT + TICK + SLACK, freed_after
    value = waiting.get(timeout=30)
    assert value["start"] >= killed_at and value["token"] > started["token"]
    assert first.get(timeout=10, propagate=False) is not None and first.state == "FAILURE"
    assert type(first.result).__name__ == "WorkerLostError"


@pytest.mark.parametrize("task", [late_retry, late_skip], ids=["on_locked=retry", "on_locked=skip"])
def test_acks_late_redelivery_runs_after_the_dead_holder_session_ends(celery_env, kz, task):
    """acks_late + reject_on_worker_lost: the message comes back at once, while the killed child's session
    still holds the lock. The redelivery waits for it (its own earlier attempt is the holder) instead of
    being skipped, and runs exactly once."""
    key = new_key()
    r = task.apply_async((key,), queue="zk-faults")
    killed_at, node, started = kill_holder(celery_env, kz, key)
    value = r.get(timeout=40)
    assert value["task_id"] == r.id == started["task_id"]
    # it ran only once the dead session's node was gone: after the kill, by roughly a session timeout
    assert value["start"] - killed_at >= SESSION_TIMEOUT / 3, value["start"] - killed_at
    assert value["token"] > started["token"]
    runs = celery_env.records_of(f"run-{key}")
    assert [x["task_id"] for x in runs] == [r.id]
    assert not [s for s in celery_env.records_of("skipped") if s["task_id"] == r.id]


def test_outage_during_acquisition_fails_or_retries_never_skips(zk_server, redis_server, celery_app, celery_env):
    proxy = TcpProxy("127.0.0.1", zk_server.port).start()
    solo = {"pool": "solo", "concurrency": 1, "queue": "zk-outage"}
    try:
        with running_workers(
            proxy.hosts, redis_server.url, solo, session_timeout=SESSION_TIMEOUT, connect_timeout=1.0
        ) as env:
            key = new_key()
            assert rec_skip.apply_async((key, 0), queue="zk-outage").get(timeout=30)["held"] is True
            proxy.partition()
            failed = rec_skip.apply_async((key, 0), queue="zk-outage")
            failed.get(timeout=40, propagate=False)
            assert failed.state == "FAILURE"
            assert type(failed.result).__name__ == "ZkUnavailable"
            assert not [s for s in env.records_of("skipped") if s["task_id"] == failed.id]
            retried = unavailable_retry.apply_async((key,), queue="zk-outage")
            time.sleep(3.0)
            assert retried.state == "PENDING" or retried.state == "RETRY"
            proxy.heal()
            value = retried.get(timeout=60)
            assert value["held"] is True and value["retries"] >= 1
    finally:
        proxy.stop()


def session_ids_in_dump(port):
    return four_letter(port, "dump").lower()


def test_worker_shutdown_closes_the_sessions_of_pool_children(zk_server, redis_server, celery_app):
    """Children leave through os._exit (no atexit): worker_process_shutdown must close their sessions, or
    each would linger on the server for a session timeout (4 s here)."""
    with running_workers(zk_server.hosts, redis_server.url, session_timeout=4.0) as env:
        worker = env.worker(pool="prefork", concurrency=2, queue="zk-shutdown")
        infos = [r.get(timeout=30) for r in [session_info.apply_async((n,), queue="zk-shutdown") for n in range(8)]]
        sessions = {hex(i["session_id"]) for i in infos}
        assert sessions and all(s in session_ids_in_dump(zk_server.port) for s in sessions)
        assert worker.stop() is not None
        stopped_at = time.monotonic()
        wait_until(lambda: not any(s in session_ids_in_dump(zk_server.port) for s in sessions), timeout=10)
        assert time.monotonic() - stopped_at < 1.5


def test_contention_records_survive_the_faults(celery_env):
    """The module's faults left the locks usable: a burst on one key still never overlaps."""
    key = new_key()
    sent = [rec_wait.apply_async((key, 0.05), queue="zk-faults") for _ in range(6)]
    assert all(r.get(timeout=60) for r in sent)
    assert_no_overlap(celery_env.records_of(f"run-{key}"))

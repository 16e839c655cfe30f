"""unique_queued: enqueue-time de-duplication, marker clean-up, and the stale-marker bounds."""

import os
import signal
import time

import pytest
import redis
from kombu.exceptions import SerializerNotInstalled

from tests.support.celery_app import unique_long, unique_short
from tests.support.celery_harness import new_key, running_workers
from tests.support.helpers import wait_until
from zklocks.execution import unique

pytestmark = [pytest.mark.celery, pytest.mark.zk]

SESSION_TIMEOUT = 2.0
IDLE = "zk-idle"  # a queue nobody consumes: tasks stay queued


@pytest.fixture(scope="module")
def celery_env(zk_server, redis_server, celery_app):
    prefork = {"pool": "prefork", "concurrency": 2, "queue": "zk-unique"}
    try:
        with running_workers(
            zk_server.hosts, redis_server.url, prefork, prefork, session_timeout=SESSION_TIMEOUT
        ) as env:
            yield env
    finally:
        redis.Redis.from_url(f"{redis_server.url}/0").delete(IDLE)


def marker(key):
    return unique.read("default", f"u:{key}")


def send(task, *args, queue="zk-unique", kwargs=None, **options):
    return task.apply_async(args, kwargs, queue=queue, **options)


def test_duplicate_while_queued_returns_the_queued_task_until_the_marker_is_stale(celery_settings):
    key = new_key()
    sent_at = time.monotonic()
    first = send(unique_short, key, queue=IDLE)  # unique_timeout=3
    assert marker(key)["task_id"] == first.id and marker(key)["state"] == "queued"
    assert send(unique_short, key, queue=IDLE).id == first.id
    # The producer that wrote the marker is gone for good (the message is never consumed): the marker
    # blocks new tasks for unique_timeout, and no longer.
    while True:
        again = send(unique_short, key, queue=IDLE)
        if again.id != first.id:
            break
        assert time.monotonic() - sent_at < 3.0 + 2.0, "stale marker outlived its bound"
        time.sleep(0.1)
    stale_after = time.monotonic() - sent_at
    assert 3.0 - 0.3 <= stale_after <= 3.0 + 1.0, stale_after
    assert marker(key)["task_id"] == again.id


def test_duplicate_while_running_returns_the_running_task_and_the_marker_goes_with_it(celery_settings):
    key = new_key()
    first = send(unique_long, key, 1.5)
    wait_until(lambda: (marker(key) or {}).get("state") == "running", timeout=20)
    assert marker(key)["task_id"] == first.id
    duplicate = send(unique_long, key, 1.5)  # the same call: shared (another call would not be)
    assert duplicate.id == first.id
    assert first.get(timeout=30)["task_id"] == first.id
    wait_until(lambda: marker(key) is None, timeout=5)
    after = send(unique_long, key, 0)
    assert after.id != first.id and after.get(timeout=30)["task_id"] == after.id
    assert marker(key) is None
    assert [r["task_id"] for r in celery_env_records(celery_settings, key)] == [first.id, after.id]


def celery_env_records(env, key):
    return sorted(env.records_of(f"run-{key}"), key=lambda r: r["start"])


def test_marker_is_removed_when_the_task_fails(celery_settings):
    key = new_key()
    failing = send(unique_long, key, 0, kwargs={"fail": True})
    failing.get(timeout=30, propagate=False)
    assert failing.state == "FAILURE"
    wait_until(lambda: marker(key) is None, timeout=5)
    assert send(unique_long, key, 0).id != failing.id


def test_marker_is_removed_when_the_task_is_revoked(celery_settings, celery_app):
    key = new_key()
    later = send(unique_long, key, 0, countdown=2)
    assert marker(key)["task_id"] == later.id
    celery_app.control.revoke(later.id)
    wait_until(lambda: marker(key) is None, timeout=15)
    assert celery_env_records(celery_settings, key) == []


def test_marker_of_a_killed_worker_goes_stale_within_the_session_timeout(celery_settings):
    """The marker of a running task lives as long as the task's lock, not for unique_timeout (120 s)."""
    key = new_key()
    first = send(unique_long, key, 6.0)  # longer than the bound below: only the kill ends it in time
    running = wait_until(lambda: (marker(key) or {}).get("state") == "running" and marker(key), timeout=20)
    assert send(unique_long, key, 6.0).id == first.id
    os.kill(running["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    while True:
        again = send(unique_long, key, 6.0)
        if again.id != first.id:
            break
        assert time.monotonic() - killed_at < 10, "stale marker outlived the holder's session"
        time.sleep(0.1)
    stale_after = time.monotonic() - killed_at
    assert stale_after <= SESSION_TIMEOUT + 0.2 + 1.0, stale_after
    assert again.get(timeout=30)["task_id"] == again.id


def test_refused_send_leaves_no_marker(celery_settings):
    key = new_key()
    with pytest.raises(SerializerNotInstalled):
        send(unique_long, key, 0, serializer="no-such-serializer")
    assert marker(key) is None

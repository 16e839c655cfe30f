"""SingleExecutionTask under real contention: two prefork workers (concurrency 2 each) on a real Redis broker.

Executions record their intervals from the worker processes; no two intervals of one key may overlap.
"""

import datetime
import time

import pytest

from tests.support.celery_app import (
    hold_for,
    hold_until_lost,
    rec_default_key,
    rec_raise,
    rec_retry,
    rec_skip,
    rec_wait,
    retry_self,
    self_call,
    session_info,
)
from tests.support.celery_harness import new_key, running_workers
from tests.support.helpers import assert_no_overlap, raw_client, wait_until
from zklocks.names import join_path
from zklocks.recipes import node_data
from zklocks.recipes.layout import KAZOO
from zklocks.testing import expire_session

pytestmark = pytest.mark.celery


@pytest.fixture(scope="module")
def celery_env(zk_server, redis_server, celery_app):
    prefork = {"pool": "prefork", "concurrency": 2}
    with running_workers(zk_server.hosts, redis_server.url, prefork, prefork) as env:
        yield env


def results(async_results, timeout=60):
    return [r.get(timeout=timeout, propagate=False) for r in async_results]


def test_skip_under_contention(celery_env):
    key = new_key()
    sent = [rec_skip.delay(key, 0.5) for _ in range(8)]
    values = results(sent)
    ran = [v for v in values if v is not None]
    skipped = {r.id for r, v in zip(sent, values, strict=True) if v is None}
    assert ran and skipped, values
    records = celery_env.records_of(f"run-{key}")
    assert sorted(r["task_id"] for r in records) == sorted(v["task_id"] for v in ran)
    assert_no_overlap(records)

    # every skip was announced through the task_skipped signal, with its task id
    def skip_records():
        found = [s for s in celery_env.records_of("skipped") if s["task_id"] in skipped]
        return found if len(found) == len(skipped) else None

    signalled = wait_until(skip_records)
    assert {s["name"] for s in signalled} == {f"rec:{key}"}
    assert all(s["task"] == "tests.support.celery_app.rec_skip" for s in signalled)
    assert len({s["pid"] for s in signalled} | {r["pid"] for r in records}) >= 2  # contention across processes


def test_retry_under_contention_runs_every_task_once(celery_env):
    key = new_key()
    sent = [rec_retry.delay(key, 0.15) for _ in range(6)]
    values = results(sent)
    assert all(v is not None for v in values), values
    records = celery_env.records_of(f"run-{key}")
    assert sorted(r["task_id"] for r in records) == sorted(r.id for r in sent)
    assert_no_overlap(records)
    assert max(r["retries"] for r in records) >= 1  # some met the lock and came back later


def test_raise_under_contention(celery_env):
    key = new_key()
    sent = [rec_raise.delay(key, 0.5) for _ in range(6)]
    results(sent)
    failed = [r for r in sent if r.state == "FAILURE"]
    succeeded = [r for r in sent if r.state == "SUCCESS"]
    assert failed and succeeded
    assert len(failed) + len(succeeded) == 6
    for r in failed:
        assert type(r.result).__name__ == "LockNotAcquired"
        assert f"lock 'rec:{key}' is held by another execution" in str(r.result)
    records = celery_env.records_of(f"run-{key}")
    assert sorted(r["task_id"] for r in records) == sorted(r.id for r in succeeded)
    assert_no_overlap(records)


def test_lock_timeout_waits_in_turn(celery_env):
    key = new_key()
    sent = [rec_wait.delay(key, 0.2) for _ in range(5)]
    values = results(sent)
    assert all(v is not None for v in values), values
    records = celery_env.records_of(f"run-{key}")
    assert len(records) == 5
    assert_no_overlap(records)
    assert len({r["pid"] for r in records}) >= 2


def test_default_key_covers_all_arguments(celery_env):
    key = new_key()
    same = [rec_default_key.delay(key, 1.0) for _ in range(2)] + [rec_default_key.delay(key, hold=1.0)]
    other = rec_default_key.delay(key, 1.0, extra=[1, 2])
    values = results(same + [other])
    assert sum(v is not None for v in values[:3]) == 1  # one key: one runs, the others were skipped
    assert values[3] is not None  # another argument value: another key, not blocked
    expected = rec_default_key.lock_name((key,), {"hold": 1.0})  # the producer computes the worker's key
    assert [v["lock"] for v in values[:3] if v] == [expected]
    assert values[3]["lock"] == rec_default_key.lock_name((key, 1.0), {"extra": (1, 2)}) != expected


def test_holder_data_names_the_task(celery_env):
    key = new_key()
    r = hold_for.delay(key, 1.0)
    celery_env.wait_records(f"started-{key}", 1)
    client = raw_client(celery_env.hosts)
    try:
        found = []
        for name in (f"rec:{key}", f"inner:{key}"):  # the task's lock, and a lock its body took
            parent = join_path(celery_env.namespace, name)
            first = KAZOO.sort_contenders(client.get_children(parent))[0][2]
            found.append(node_data.parse(client.get(f"{parent}/{first}")[0]))
    finally:
        client.stop()
        client.close()
    for data in found:
        assert data["task_id"] == r.id
        assert data["task_name"] == "tests.support.celery_app.hold_for"
    assert r.get(timeout=30)["task_id"] == r.id


def test_a_task_calling_itself_meets_contention(celery_env):
    result = self_call.delay(new_key()).get(timeout=30)
    assert result["inner"] == "LockNotAcquired"
    assert result["held"] is True
    assert result["seconds"] < 1.0


def test_retry_from_the_body_does_not_fight_its_own_lock(celery_env):
    """The retry is queued while the first attempt still holds the lock: it waits for it, it is not skipped."""
    key = new_key()
    r = retry_self.delay(key)
    value = r.get(timeout=30)
    assert value["retries"] == 1 and value["task_id"] == r.id
    records = celery_env.records_of(f"run-{key}")
    assert [rec["retries"] for rec in sorted(records, key=lambda rec: rec["start"])] == [0, 1]
    assert_no_overlap(records)
    assert not [s for s in celery_env.records_of("skipped") if s["task_id"] == r.id]


def test_bad_key_fails_the_task_at_once_in_the_worker(celery_env, celery_app, bad_tasks):
    started = time.monotonic()
    missing = celery_app.send_task("tests.support.celery_bad_tasks.bad_key_missing", args=[1])
    unformattable = celery_app.send_task("tests.support.celery_bad_tasks.bad_key_format", args=["abc"])
    not_json = celery_app.send_task(
        "tests.support.celery_app.rec_default_key", args=["k"], kwargs={"extra": datetime.datetime(2024, 1, 1)}
    )
    results([missing, unformattable, not_json], timeout=30)
    assert time.monotonic() - started < 15
    for r, task, words in (
        (missing, "tests.support.celery_bad_tasks.bad_key_missing", "acount_id"),
        (unformattable, "tests.support.celery_bad_tasks.bad_key_format", "cannot fill"),
        (not_json, "tests.support.celery_app.rec_default_key", "not JSON-serialisable"),
    ):
        assert r.state == "FAILURE"
        assert type(r.result).__name__ == "InvalidLockName"
        assert f"task '{task}'" in str(r.result)
        assert words in str(r.result)


def test_lock_lost_fires_with_the_task_id(celery_env):
    key = new_key()
    r = hold_until_lost.delay(key)
    started = celery_env.wait_records(f"started-{key}", 1)[0]
    expire_session(celery_env.hosts, (started["session_id"], bytes.fromhex(started["password"])))
    value = r.get(timeout=30)
    assert value["reason"] in ("expired", "deleted", "suspended") and value["is_held"] is False
    lost = wait_until(lambda: [x for x in celery_env.records_of("lost") if x["task_id"] == r.id], timeout=10)
    assert lost[0]["name"] == f"rec:{key}" and lost[0]["token"] == started["token"]


def test_prefork_children_open_their_own_sessions(celery_env):
    infos = results([session_info.delay(n) for n in range(12)])
    by_pid = {}
    for info in infos:
        by_pid.setdefault(info["pid"], set()).add(info["session_id"])
    assert len(by_pid) >= 2
    assert all(len(ids) == 1 for ids in by_pid.values())  # one session per child, kept
    sessions = [next(iter(ids)) for ids in by_pid.values()]
    assert len(set(sessions)) == len(sessions)  # never shared across processes
    parents = {w.proc.pid for w in celery_env.workers}
    assert not parents & set(by_pid)

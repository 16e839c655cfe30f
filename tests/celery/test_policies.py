"""The de-duplication policies of SingleExecutionTask under real contention: two prefork workers (concurrency 2
each) on a real Redis broker, calls sent from several threads at once. Each test fails without its policy."""

import re
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import pytest
import redis

from tests.support.celery_app import app, rec_raise, rec_retry, rec_skip, unique_short
from tests.support.celery_harness import new_key, running_workers
from tests.support.celery_policy_tasks import debounced, kept, limited, not_kept, shared_run, throttled
from tests.support.helpers import assert_no_overlap, wait_until
from zklocks import signals
from zklocks.celery import policies
from zklocks.execution.holder_task import holder_task_id
from zklocks.recipes import layout

pytestmark = [pytest.mark.celery, pytest.mark.zk]

QUEUE = "zk-policy"
IDLE = "zk-policy-idle"  # a queue nobody consumes


@pytest.fixture(scope="module")
def celery_env(zk_server, redis_server, celery_app):
    prefork = {"pool": "prefork", "concurrency": 2, "queue": QUEUE}
    try:
        with running_workers(zk_server.hosts, redis_server.url, prefork, prefork) as env:
            yield env
    finally:
        redis.Redis.from_url(f"{redis_server.url}/0").delete(IDLE)


def send(task, *args, **options):
    return task.apply_async(args, queue=QUEUE, **options)


def runs(env, key):
    return sorted(env.records_of(f"run-{key}"), key=lambda r: r["start"])


def outcomes(env, key, outcome):
    return [r for r in env.records_of("dedup") if r["name"] == f"pol:{key}" and r["outcome"] == outcome]


def at_once(calls, workers=4):
    """Send from ``workers`` threads at once: ``calls`` are no-argument callables returning an AsyncResult; the
    results in order, rebuilt on this thread (a sending thread's result backend, and its Redis connections, stay
    with that thread, and would be torn down at exit, after Redis)."""
    with ThreadPoolExecutor(workers) as pool:
        ids = list(pool.map(lambda call: call().id, calls))
    return [app.AsyncResult(task_id) for task_id in ids]


@pytest.fixture
def reported():
    """The task_deduplicated signals sent in this (the producing) process."""
    seen = []

    def receiver(sender, **kwargs):
        seen.append(kwargs)

    signals.task_deduplicated.connect(receiver, weak=False)
    try:
        yield seen
    finally:
        signals.task_deduplicated.disconnect(receiver)


@pytest.mark.timeout(90)
def test_share_running_returns_the_running_execution(celery_settings, reported):
    env, key = celery_settings, new_key()
    first = send(shared_run, key, 2.0)
    wait_until(lambda: holder_task_id("default", f"pol:{key}") == first.id, timeout=30)
    calls = at_once([lambda: send(shared_run, key, 2.0) for _ in range(8)])  # the same call: shared
    assert {c.id for c in calls} == {first.id}  # the same execution's handle, nothing queued
    assert all(c.get(timeout=30)["task_id"] == first.id for c in calls)
    assert [r["task_id"] for r in runs(env, key)] == [first.id]
    wait_until(lambda: len(reported) >= 8, timeout=5)
    assert {(r["outcome"], r["task_id"], r["task"]) for r in reported} == {("shared", first.id, shared_run.name)}
    # Once it has ended, a call runs again.
    wait_until(lambda: holder_task_id("default", f"pol:{key}") is None, timeout=10)
    after = send(shared_run, key, 0.0)
    assert after.id != first.id and after.get(timeout=30)["task_id"] == after.id


@pytest.mark.timeout(90)
def test_debounce_runs_only_the_latest_call(celery_settings):
    env, key = celery_settings, new_key()
    sent = [send(debounced, key, n) for n in range(6)]  # each replaces the one before (countdown: 1 s)
    assert policies.latest_task("default", f"pol:{key}") == sent[-1].id
    # A burst from several threads at once: one of them is the latest, whichever ZooKeeper ordered last.
    burst = at_once([lambda n=n: send(debounced, key, 10 + n) for n in range(6)])
    latest = policies.latest_task("default", f"pol:{key}")
    assert latest in {b.id for b in burst}
    values = [r.get(timeout=60) for r in sent + burst]
    ran = [v for v in values if v is not None]
    assert [v["task_id"] for v in ran] == [latest]
    assert [r["task_id"] for r in runs(env, key)] == [latest]
    noops = wait_until(lambda: len(outcomes(env, key, "debounced")) >= 11 and outcomes(env, key, "debounced"))
    assert sorted(r["task_id"] for r in noops) == sorted(r.id for r in sent + burst if r.id != latest)
    wait_until(lambda: policies.latest_task("default", f"pol:{key}") is None, timeout=5)  # the latest cleans up


@pytest.mark.timeout(90)
def test_throttle_starts_at_most_once_per_window(celery_settings):
    env, key = celery_settings, new_key()
    started = time.monotonic()
    sent = []
    while time.monotonic() - started < 4.5:  # 2 threads, a call every ~0.15 s each, over two windows and more
        sent.extend(at_once([lambda: send(throttled, key), lambda: send(throttled, key)], workers=2))
        time.sleep(0.15)
    for r in sent:
        r.get(timeout=60, propagate=False)
    starts = [r["start"] for r in runs(env, key)]
    assert 2 <= len(starts) <= 3, starts
    gaps = [b - a for a, b in pairwise(starts)]
    # The window is measured on ZooKeeper's clock (a node's mtime); the offset to it is known within half a
    # round trip, so a start may come that much early on the local clock.
    assert all(gap >= 2.0 - 0.25 for gap in gaps), gaps
    throttled_ids = {r["task_id"] for r in wait_until(lambda: outcomes(env, key, "throttled"))}
    assert throttled_ids and not throttled_ids & {r["task_id"] for r in runs(env, key)}


def max_overlap(records):
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.timeout(120)
def test_concurrency_limit_per_key(celery_settings):
    env, key = celery_settings, new_key()
    sent = at_once([lambda: send(limited, key) for _ in range(8)])  # 4 worker processes, 2 leases
    values = [r.get(timeout=90) for r in sent]
    assert all(v is not None for v in values)
    records = runs(env, key)
    assert sorted(r["task_id"] for r in records) == sorted(r.id for r in sent)
    assert max_overlap(records) == 2, records
    assert len({r["pid"] for r in records}) >= 2


def _gap_starts(env, key, task):
    """Send ``task(first=True)``, which retries after 1 s, and competitors every 0.1 s until it has ended; the
    competitors' run records, and those that started between the first attempt's end and the retry's start."""
    first = send(task, key, True)
    attempt = env.wait_records(f"attempt-{key}", 1, timeout=30)[0]
    competitors = []
    while not first.ready():
        competitors.extend(at_once([lambda: send(task, key), lambda: send(task, key)], workers=2))
        assert time.monotonic() - attempt["end"] < 20, "the retry never ended"
        time.sleep(0.1)
    for r in competitors:
        r.get(timeout=30, propagate=False)
    retry = [r for r in runs(env, key) if r["task_id"] == first.id]
    retry_start = retry[0]["start"] if retry else float("inf")  # without the policy a competitor may skip it
    others = [r for r in runs(env, key) if r["task_id"] != first.id]
    return first, [r["start"] for r in others if attempt["end"] < r["start"] < retry_start]


@pytest.mark.timeout(120)
def test_keep_lock_on_retry_lets_nothing_start_between_the_tries(celery_settings):
    env, key = celery_settings, new_key()
    first, between = _gap_starts(env, key, kept)
    assert first.get(timeout=30)["retries"] == 1
    assert between == []
    assert len(outcomes(env, key, "skipped")) >= 5  # the competitors met the kept lock
    # The lock is free once the retry has ended: a new call runs.
    after = send(kept, key)
    assert after.get(timeout=30)["task_id"] == after.id
    assert policies.read("default", f"pol:{key}", layout.RETRY) is None
    assert_no_overlap([r for r in runs(env, key)])


@pytest.mark.timeout(120)
def test_without_keep_lock_on_retry_another_execution_starts_between_the_tries(celery_settings):
    """The control: the same workload without the policy lets competitors in between the tries."""
    env, key = celery_settings, new_key()
    _, between = _gap_starts(env, key, not_kept)
    assert between


def _free_after(env, key):
    """Seconds from the first attempt's end until a new call of ``kept`` runs (probing every 0.1 s)."""
    attempt = env.wait_records(f"attempt-{key}", 1, timeout=30)[0]
    while True:
        probe = send(kept, key)
        if probe.get(timeout=30) is not None:
            break
        assert time.monotonic() - attempt["end"] < 15, "the reservation outlived its bound"
        time.sleep(0.1)
    assert [r["task_id"] for r in runs(env, key)] == [probe.id]  # the retry never ran
    return next(r["start"] for r in runs(env, key) if r["task_id"] == probe.id) - attempt["end"]


@pytest.mark.timeout(90)
def test_kept_lock_of_a_retry_that_never_comes_is_free_after_countdown_plus_grace(celery_settings):
    env, key = celery_settings, new_key()
    send(kept, key, True, 1.0, IDLE)  # countdown 1 s, retry_lock_grace 2 s; the retry goes where nobody consumes
    free_after = _free_after(env, key)
    assert 3.0 - 0.5 <= free_after <= 3.0 + 2.0, free_after


@pytest.mark.timeout(90)
def test_kept_lock_of_a_revoked_retry_is_free_when_the_worker_drops_it(celery_settings, celery_app):
    env, key = celery_settings, new_key()
    first = send(kept, key, True, 1.0)
    env.wait_records(f"attempt-{key}", 1, timeout=30)
    celery_app.control.revoke(first.id)
    # The worker that holds the retry's message (waiting for its countdown) drops it when the revoke arrives,
    # and its task_revoked hook removes the reservation: the key is free then, not after countdown + grace.
    free_after = _free_after(env, key)
    assert free_after <= 1.0 + 1.0, free_after


@pytest.mark.timeout(90)
def test_skip_retry_and_raise_are_reported(celery_settings):
    env = celery_settings
    for task, outcome in ((rec_skip, "skipped"), (rec_retry, "retried"), (rec_raise, "raised")):
        key = new_key()
        sent = at_once([lambda task=task, key=key: send(task, key, 0.5) for _ in range(4)])
        for r in sent:
            r.get(timeout=60, propagate=False)
        found = wait_until(
            lambda key=key, outcome=outcome: [r for r in env.records_of("dedup") if r["name"] == f"rec:{key}"]
        )
        assert {r["outcome"] for r in found} == {outcome}, found
        assert {r["task"] for r in found} == {task.name}


@pytest.mark.timeout(90)
@pytest.mark.django_db
def test_admin_lists_running_and_queued_tasks_by_key(celery_settings, admin_client):
    env = celery_settings
    running_key, debounce_key, retry_key = new_key(), new_key(), new_key()
    running = send(shared_run, running_key, 4.0)
    first = send(debounced, debounce_key, 0, 4.0)
    kept_first = send(kept, retry_key, True, 4.0)  # retries after 4 s: the lock is kept for it meanwhile
    wait_until(lambda: holder_task_id("default", f"pol:{running_key}") == running.id, timeout=30)
    wait_until(lambda: holder_task_id("default", f"pol:{debounce_key}") == first.id, timeout=30)
    env.wait_records(f"attempt-{retry_key}", 1, timeout=30)
    latest = send(debounced, debounce_key, 1)  # queued behind the running one, and the latest now
    unique_key = new_key()
    waiting = unique_short.apply_async((unique_key,), queue=IDLE)  # unique_queued, never consumed

    page = admin_client.get("/admin/zklocks/lock/").content.decode()
    rows = dict(re.findall(r'<tr class="zk-task-key" data-name="([^"]+)">(.*?)</tr>', page, re.S))

    def ids(row, css):
        return re.findall(rf'class="{css}" data-task-id="([^"]+)"', row)

    assert ids(rows[f"pol:{running_key}"], "zk-running") == [running.id]
    assert ids(rows[f"pol:{running_key}"], "zk-queued") == []
    assert ids(rows[f"pol:{debounce_key}"], "zk-running") == [first.id]
    assert ids(rows[f"pol:{debounce_key}"], "zk-queued") == [latest.id]
    assert "(debounce)" in rows[f"pol:{debounce_key}"]
    assert ids(rows[f"pol:{retry_key}"], "zk-running") == []
    assert ids(rows[f"pol:{retry_key}"], "zk-queued") == [kept_first.id]
    assert "(keep_lock_on_retry)" in rows[f"pol:{retry_key}"]
    assert ids(rows[f"u:{unique_key}"], "zk-queued") == [waiting.id]
    assert "(unique_queued)" in rows[f"u:{unique_key}"]
    for r in (running, first, latest, kept_first):
        r.get(timeout=60, propagate=False)

"""Tasks with de-duplication policies (tests/celery/test_policies.py). Workers import this module through the
app's ``imports``; every outcome a worker reports is recorded in <records>/dedup.jsonl."""

import time

from tests.support.celery_app import _run, app, record
from zklocks import signals
from zklocks.celery import SingleExecutionTask


def _on_outcome(sender, task, outcome, name, alias, task_id, **kwargs):
    record("dedup", task=task, outcome=outcome, name=name, alias=alias, task_id=task_id, at=time.monotonic())


signals.task_deduplicated.connect(_on_outcome, weak=False)


@app.task(bind=True, base=SingleExecutionTask, lock_key="pol:{key}", share_running=True)
def shared_run(self, key, hold=0.2):
    return _run(self, key, hold)


@app.task(
    bind=True,
    base=SingleExecutionTask,
    lock_key="pol:{key}",
    debounce=1.0,
    on_locked="retry",
    lock_retry_countdown=0.3,
    lock_max_retries=100,
)
def debounced(self, key, n, hold=0.2):
    return {**_run(self, key, hold), "n": n}


@app.task(bind=True, base=SingleExecutionTask, lock_key="pol:{key}", throttle=2.0)
def throttled(self, key, hold=0.05):
    return _run(self, key, hold)


@app.task(
    bind=True,
    base=SingleExecutionTask,
    lock_key="pol:{key}",
    lock_concurrency=2,
    on_locked="retry",
    lock_retry_countdown=0.2,
    lock_max_retries=200,
)
def limited(self, key, hold=0.6):
    return _run(self, key, hold)


def _retry_once(task, key, countdown, queue=None):
    """First attempt: hold the lock a little, then ``self.retry(countdown=...)`` (to ``queue``, if given); the
    retry runs normally."""
    if task.request.retries == 0:
        record(f"attempt-{key}", task_id=task.request.id, end=time.monotonic(), token=task.request.zk_lock.token)
        raise task.retry(countdown=countdown, max_retries=3, **({"queue": queue} if queue else {}))
    return _run(task, key, 0.2)


@app.task(bind=True, base=SingleExecutionTask, lock_key="pol:{key}", keep_lock_on_retry=True, retry_lock_grace=2.0)
def kept(self, key, first=False, countdown=1.0, retry_queue=None):
    if first:
        return _retry_once(self, key, countdown, retry_queue)
    return _run(self, key, 0.05)


@app.task(bind=True, base=SingleExecutionTask, lock_key="pol:{key}")
def not_kept(self, key, first=False, countdown=1.0):
    """The same as ``kept`` without keep_lock_on_retry: what the policy prevents happens here."""
    if first:
        return _retry_once(self, key, countdown)
    return _run(self, key, 0.05)

"""The Celery app of the Celery tests: real workers run ``celery -A tests.support.celery_app worker``.

Configured from the environment so that worker processes use the suite's ZooKeeper and Redis:
ZKLOCKS_TEST_HOSTS, ZKLOCKS_TEST_NAMESPACE, ZKLOCKS_TEST_SESSION_TIMEOUT, ZKLOCKS_TEST_CONNECT_TIMEOUT,
ZKLOCKS_TEST_BROKER (a redis:// URL, also the result backend) and ZKLOCKS_TEST_RECORDS (a directory).
Executions record themselves as JSON lines in ZKLOCKS_TEST_RECORDS/<file>.jsonl; monotonic clocks are
system-wide on Linux, so intervals recorded by different processes compare.
"""

import json
import os
import threading
import time
from pathlib import Path

import django
from django.conf import settings

if not settings.configured and "DJANGO_SETTINGS_MODULE" not in os.environ:
    settings.configure(
        SECRET_KEY="zklocks-tests",  # tests/settings.py's: the aliases derive their identity from it
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "zklocks"],
        DATABASES={},
        USE_TZ=True,
        ZKLOCKS={
            "default": {
                "HOSTS": os.environ.get("ZKLOCKS_TEST_HOSTS", "127.0.0.1:2181"),
                "NAMESPACE": os.environ.get("ZKLOCKS_TEST_NAMESPACE", "/zklocks-test/celery"),
                "SESSION_TIMEOUT": float(os.environ.get("ZKLOCKS_TEST_SESSION_TIMEOUT", "2.0")),
                "CONNECT_TIMEOUT": float(os.environ.get("ZKLOCKS_TEST_CONNECT_TIMEOUT", "2.0")),
                "REAP_INTERVAL": 0,
            }
        },
    )
    django.setup()

from celery import Celery  # noqa: E402
from celery.exceptions import SoftTimeLimitExceeded  # noqa: E402
from celery.signals import task_prerun  # noqa: E402

from zklocks import LockLost, LockNotAcquired, checkpoint, signals, zk_lock  # noqa: E402
from zklocks.celery import SingleExecutionTask  # noqa: E402

BROKER = os.environ.get("ZKLOCKS_TEST_BROKER", "redis://127.0.0.1:6379")

app = Celery("zklocks_tests")
app.conf.update(
    broker_url=f"{BROKER}/0",
    result_backend=f"{BROKER}/1",
    task_default_queue="zk-prefork",
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    result_expires=600,
    task_track_started=False,
    worker_send_task_events=False,
    # Misconfigured tasks live apart, so that importing this module in the test process reports no problems.
    imports=("tests.support.celery_bad_tasks", "tests.support.celery_policy_tasks"),
)


def records_dir() -> Path | None:
    value = os.environ.get("ZKLOCKS_TEST_RECORDS")
    return Path(value) if value else None


def record(kind: str, **data) -> dict:
    """Append one JSON line to <records>/<kind>.jsonl (one write() of a short line: atomic with O_APPEND)."""
    data.setdefault("pid", os.getpid())
    data.setdefault("thread", threading.current_thread().name)
    where = records_dir()
    if where is not None:
        with open(where / f"{kind}.jsonl", "a") as out:
            out.write(json.dumps(data) + "\n")
    return data


def _on_skipped(sender, task, name, alias, task_id, **kwargs):
    record("skipped", task=task.name, name=name, alias=alias, task_id=task_id)


def _on_lost(sender, name, alias, kind, token, reason, task_id, **kwargs):
    record("lost", name=name, reason=reason, task_id=task_id, token=token)


signals.task_skipped.connect(_on_skipped, weak=False)
signals.lock_lost.connect(_on_lost, weak=False)


def _run(task, key: str, hold: float) -> dict:
    lock = task.request.zk_lock
    start = time.monotonic()
    time.sleep(hold)
    end = time.monotonic()
    return record(
        f"run-{key}",
        task=task.name,
        task_id=task.request.id,
        key=key,
        start=start,
        end=end,
        token=lock.token,
        lock=lock.name,
        held=lock.is_held,
        retries=task.request.retries,
    )


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="skip")
def rec_skip(self, key, hold=0.2):
    return _run(self, key, hold)


@app.task(
    bind=True,
    base=SingleExecutionTask,
    lock_key="rec:{key}",
    on_locked="retry",
    lock_retry_countdown=0.3,
    lock_max_retries=200,
)
def rec_retry(self, key, hold=0.2):
    return _run(self, key, hold)


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="raise")
def rec_raise(self, key, hold=0.2):
    return _run(self, key, hold)


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", lock_timeout=30)
def rec_wait(self, key, hold=0.2):
    return _run(self, key, hold)


@app.task(bind=True, base=SingleExecutionTask)
def rec_default_key(self, key, hold=0.1, extra=None):
    return _run(self, key, hold)


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="raise")
def self_call(self, key, depth=0):
    """Calls itself with the same key from inside its own execution: contention, not a nested hold."""
    if depth:
        return "nested run"
    started = time.monotonic()
    try:
        inner = self_call(key, depth=1)
    except LockNotAcquired:
        inner = "LockNotAcquired"
    return {"inner": inner, "seconds": time.monotonic() - started, "held": self.request.zk_lock.is_held}


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="skip")
def retry_self(self, key):
    """First attempt: queue its own retry at once, then keep the lock a while before raising it."""
    if self.request.retries == 0:
        start = time.monotonic()
        retry = self.retry(countdown=0, throw=False, max_retries=3)
        time.sleep(0.6)
        record(
            f"run-{key}",
            task_id=self.request.id,
            retries=0,
            start=start,
            end=time.monotonic(),
            token=self.request.zk_lock.token,
        )
        raise retry
    return _run(self, key, 0.05)


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="skip")
def hold_for(self, key, hold=30.0):
    """Records that it started (with its pid), then holds the lock (and a lock of its own) for ``hold`` s."""
    lock = self.request.zk_lock
    with zk_lock(f"inner:{key}"):
        record(f"started-{key}", task_id=self.request.id, start=time.monotonic(), token=lock.token)
        time.sleep(hold)
    return _run(self, key, 0)


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="skip")
def hold_until_lost(self, key):
    """Publishes its session id and password, then polls ensure_held() until the lock is lost."""
    lock = self.request.zk_lock
    hold = next(iter(lock._mine.values()))[0]
    session_id, password = hold.session.client.client_id
    record(f"started-{key}", task_id=self.request.id, session_id=session_id, password=password.hex(), token=lock.token)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            lock.ensure_held()
        except LockLost as exc:
            return record(f"lost-{key}", task_id=self.request.id, reason=exc.reason, is_held=lock.is_held)
        time.sleep(0.05)
    return "still held"


def _first_delivery_hangs(task, key: str) -> dict:
    """The first delivery records itself and hangs (to be killed); a redelivery runs normally."""
    flag = records_dir() / f"first-{task.request.id}"
    if not flag.exists():
        flag.write_text(str(os.getpid()))
        record(f"started-{key}", task_id=task.request.id, start=time.monotonic(), token=task.request.zk_lock.token)
        time.sleep(60)
    return _run(task, key, 0.05)


@app.task(
    bind=True,
    base=SingleExecutionTask,
    lock_key="rec:{key}",
    on_locked="retry",
    lock_retry_countdown=0.3,
    lock_max_retries=100,
    acks_late=True,
    reject_on_worker_lost=True,
)
def late_retry(self, key):
    return _first_delivery_hangs(self, key)


@app.task(
    bind=True,
    base=SingleExecutionTask,
    lock_key="rec:{key}",
    on_locked="skip",
    acks_late=True,
    reject_on_worker_lost=True,
)
def late_skip(self, key):
    return _first_delivery_hangs(self, key)


@app.task(
    bind=True,
    base=SingleExecutionTask,
    lock_key="rec:{key}",
    on_unavailable="retry",
    lock_retry_countdown=0.5,
    lock_max_retries=100,
)
def unavailable_retry(self, key):
    return _run(self, key, 0.05)


@app.task(bind=True, base=SingleExecutionTask, lock_key="u:{key}", unique_queued=True, unique_timeout=3)
def unique_short(self, key, hold=0.2):
    return _run(self, key, hold)


@app.task(bind=True, base=SingleExecutionTask, lock_key="u:{key}", unique_queued=True, unique_timeout=120)
def unique_long(self, key, hold=0.2, fail=False):
    result = _run(self, key, hold)
    if fail:
        raise ValueError("failed on purpose")
    return result


@app.task(bind=True, base=SingleExecutionTask)
def session_info(self, n=0):
    hold = next(iter(self.request.zk_lock._mine.values()))[0]
    return {"pid": os.getpid(), "session_id": hold.session.client.client_id[0]}


SOFT_LIMIT = 1.0
_prerun_at: dict[str, float] = {}


@task_prerun.connect
def _note_prerun(sender=None, task_id=None, **kwargs):
    _prerun_at[task_id] = time.monotonic()  # before SingleExecutionTask takes its lock


@app.task(
    bind=True,
    base=SingleExecutionTask,
    lock_key="soft:{key}",
    on_locked="raise",
    soft_time_limit=SOFT_LIMIT,
    time_limit=SOFT_LIMIT + 20,
)
def soft_limited(self, key, how="ensure_held"):
    """Loops on ``ensure_held()`` (or waits for the contended lock ``soft-inner:<key>``) until Celery's soft time
    limit; returns how long after SOFT_LIMIT (counted from task_prerun) SoftTimeLimitExceeded arrived, and any
    other exception that came instead."""
    start = _prerun_at.pop(self.request.id, time.monotonic())
    lock = self.request.zk_lock
    outcome = {"late": None, "error": "never interrupted", "pid": os.getpid()}
    try:
        while time.monotonic() - start < SOFT_LIMIT + 15:
            if how == "ensure_held":
                lock.ensure_held()
            else:
                with zk_lock(f"soft-inner:{key}", timeout=30):
                    outcome["error"] = "the inner lock was granted"
                    break
    except SoftTimeLimitExceeded:
        outcome.update(late=time.monotonic() - start - SOFT_LIMIT, error=None)
    except BaseException as exc:  # what the test must never see: reported, not raised
        outcome.update(late=time.monotonic() - start - SOFT_LIMIT, error=f"{type(exc).__module__}.{exc!r}")
    outcome["held_after"] = lock.is_held
    return outcome


def _spin_and_report(task, key: str, limit: float) -> str:
    """Publish the session (id, password) and pid, then work in pure Python, behind a checkpoint at each step
    (on_lost="cancel" stops a thread there), recording every 20 ms the wall clock and when the lease ends (wall
    clock), until stopped or ``limit`` seconds."""
    lock = task.request.zk_lock
    hold = next(iter(lock._mine.values()))[0]
    session = hold.session
    session_id, password = session.client.client_id
    record(
        f"started-{key}", task_id=task.request.id, session_id=session_id, password=password.hex(), mono=time.monotonic()
    )
    ends = time.monotonic() + limit
    beat = 0.0
    while time.monotonic() < ends:
        checkpoint()
        now = time.monotonic()
        if now - beat >= 0.02:
            beat = now
            record(f"beat-{key}", t=time.time(), lease_end=time.time() + session.lease_remaining())
    return "not stopped"


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="skip", on_lost="terminate")
def terminate_on_loss(self, key, limit=30.0):
    return _spin_and_report(self, key, limit)


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="skip", on_lost="cancel")
def cancel_on_loss(self, key, limit=30.0):
    try:
        return _spin_and_report(self, key, limit)
    except LockLost as exc:
        record(f"stopped-{key}", t=time.time(), reason=exc.reason)
        raise


@app.task(bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="skip", on_lost="cancel", max_hold=0.6)
def capped_cancel(self, key, limit=30.0):
    try:
        return _spin_and_report(self, key, limit)
    except LockLost as exc:
        record(f"stopped-{key}", t=time.time(), mono=time.monotonic(), reason=exc.reason)
        raise


@app.task(
    bind=True, base=SingleExecutionTask, lock_key="rec:{key}", on_locked="skip", on_lost="terminate", max_hold=0.6
)
def capped_terminate(self, key, limit=30.0):
    return _spin_and_report(self, key, limit)

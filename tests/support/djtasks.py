"""Tasks of the zklocks.tasks tests, on the aliases of ``TASKS`` below (module level, as Django requires).

In-process tests apply ``djtasks_conf.TASKS`` with override_settings before importing this module; the
``db_worker`` processes load it through ``tests.support.djtasks_settings``. Each execution of ``record`` writes a line
``<key> <pid> <start> <end> <token>`` to the file named by ZKLOCKS_TEST_TASK_LOG (or keeps it in ``RUNS``), so a
test can tell whether two executions of one key overlapped.
"""

from __future__ import annotations

import os
import threading
import time

from tests.support.djtasks_conf import TASKS  # noqa: F401  (what the tests apply before importing this module)
from zklocks.tasks.compat import task

RUNS: list[tuple] = []
_runs_lock = threading.Lock()
# In-process tests open these to let a blocked execution finish.
GATES: dict[str, threading.Event] = {}
ENTERED: dict[str, threading.Event] = {}
# executions of a key inside the function now, and the most at once
ACTIVE: dict[str, int] = {}
PEAK: dict[str, int] = {}


def _record(key: str, seconds: float, token: int | None) -> None:
    start = time.time()
    with _runs_lock:
        ACTIVE[key] = ACTIVE.get(key, 0) + 1
        PEAK[key] = max(PEAK.get(key, 0), ACTIVE[key])
    ENTERED.setdefault(key, threading.Event()).set()
    gate = GATES.get(key)
    try:
        if gate is not None:
            gate.wait(30)
        time.sleep(seconds)
    finally:
        with _runs_lock:
            ACTIVE[key] -= 1
    end = time.time()
    path = os.environ.get("ZKLOCKS_TEST_TASK_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{key} {os.getpid()} {start:.6f} {end:.6f} {token}\n")
    with _runs_lock:
        RUNS.append((key, os.getpid(), start, end, token))


def _token() -> int | None:
    from zklocks.tasks import current_lock

    lock = current_lock()
    return lock.token if lock is not None else None


# -- ImmediateBackend --


@task(backend="immediate", lock_key="report:{account_id}", takes_context=True)
def report(context, account_id, seconds=0.0):
    _record(f"report:{account_id}", seconds, context.token)
    return context.token


@task(backend="plain-immediate", takes_context=True)
def plain_report(context, account_id, seconds=0.0):
    _record(f"report:{account_id}", seconds, None)


@task(backend="immediate", lock_key="strict:{account_id}", on_locked="raise")
def strict(account_id, seconds=0.0):
    _record(f"strict:{account_id}", seconds, _token())


@task(backend="immediate", lock_key="unique:{account_id}", unique_queued=True)
def unique_report(account_id, seconds=0.0):
    _record(f"unique:{account_id}", seconds, _token())
    return _token()


# -- DummyBackend (never runs anything) --


@task(backend="dummy", lock_key="dummy:{account_id}", unique_queued=True)
def dummy_unique(account_id):
    raise AssertionError("the DummyBackend runs nothing")


@task(backend="dummy", lock_key="dummy:{account_id}")
def dummy_plain(account_id):
    raise AssertionError("the DummyBackend runs nothing")


# -- django-tasks-db's DatabaseBackend, run by db_worker processes --


@task(backend="db", lock_key="db:{key}")
def db_locked(key, seconds=0.5):
    _record(f"db:{key}", seconds, _token())
    return _token()


@task(backend="db", lock_key="dbu:{key}", unique_queued=True)
def db_unique(key, seconds=0.5):
    _record(f"dbu:{key}", seconds, _token())
    return _token()


@task(backend="db", lock_key="dbr:{key}", on_locked="retry", lock_retry_countdown=0.3)
def db_retry(key, seconds=0.5):
    _record(f"dbr:{key}", seconds, _token())
    return _token()

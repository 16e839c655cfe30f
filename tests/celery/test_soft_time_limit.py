"""Celery's soft time limit reaches a task wherever zklocks waits (docs/reference.md, "Exceptions raised by signal
handlers"): the prefork pool raises SoftTimeLimitExceeded from a SIGUSR1 handler in the child, between two
bytecodes of whatever runs there, often inside zklocks' wait for an answer."""

import pytest

from tests.support.celery_app import soft_limited
from tests.support.celery_harness import new_key, running_workers
from tests.support.threads import HeldInThread
from zklocks import zk_lock

pytestmark = [pytest.mark.celery, pytest.mark.timeout(180)]

TASKS = 6
BOUND = 0.2  # seconds after the limit


@pytest.fixture(scope="module")
def celery_env(zk_server, redis_server, celery_app):
    prefork = {"pool": "prefork", "concurrency": 2, "queue": "zk-soft"}
    with running_workers(zk_server.hosts, redis_server.url, prefork) as env:
        yield env


def run_all(how: str) -> list[dict]:
    keys = [new_key() for _ in range(TASKS)]
    sent = [soft_limited.apply_async((key, how), queue="zk-soft") for key in keys]
    outcomes = [result.get(timeout=90) for result in sent]
    for key in keys:
        lock = zk_lock(f"soft:{key}")
        assert lock.acquire(blocking=False), f"the task lock soft:{key} was left held"
        lock.release()
    return outcomes


def check(outcomes: list[dict]) -> None:
    print("\n" + ", ".join(f"{o['late']:.3f}s" if o["late"] is not None else "-" for o in outcomes))
    assert all(o["error"] is None for o in outcomes), outcomes
    assert all(o["late"] <= BOUND for o in outcomes), outcomes
    assert len({o["pid"] for o in outcomes}) >= 1


def test_a_task_looping_on_ensure_held_sees_its_soft_time_limit(celery_settings):
    check(run_all("ensure_held"))


def test_a_task_waiting_for_a_contended_lock_sees_its_soft_time_limit(celery_settings):
    holders = []
    try:
        # Every task's inner lock is held elsewhere, so each waits in zklocks when its limit comes.
        keys = [new_key() for _ in range(TASKS)]
        for key in keys:
            holder = HeldInThread(zk_lock(f"soft-inner:{key}", timeout=10))
            assert holder.acquired, holder.error
            holders.append(holder)
        sent = [soft_limited.apply_async((key, "wait"), queue="zk-soft") for key in keys]
        outcomes = [result.get(timeout=90) for result in sent]
        check(outcomes)
        for key in keys:
            lock = zk_lock(f"soft:{key}")
            assert lock.acquire(blocking=False), f"the task lock soft:{key} was left held"
            lock.release()
    finally:
        for holder in holders:
            holder.release()

"""The threads, solo and gevent pools: per-execution handles on a shared task object, exclusion across pools."""

import pytest

from tests.support.celery_app import rec_skip, rec_wait
from tests.support.celery_harness import new_key, running_workers
from tests.support.helpers import assert_no_overlap

pytestmark = pytest.mark.celery


@pytest.fixture(scope="module")
def celery_env(zk_server, redis_server, celery_app):
    threads = {"pool": "threads", "concurrency": 4, "queue": "zk-threads"}
    solo = {"pool": "solo", "concurrency": 1, "queue": "zk-threads"}
    with running_workers(zk_server.hosts, redis_server.url, threads, solo) as env:
        yield env


def test_threads_pool_gives_each_execution_its_own_lock(celery_env):
    keys = [new_key() for _ in range(4)]
    sent = [rec_skip.apply_async((k, 0.8), queue="zk-threads") for k in keys]
    values = [r.get(timeout=30) for r in sent]
    for key, value in zip(keys, values, strict=True):
        assert value is not None
        assert value["lock"] == f"rec:{key}" and value["held"] is True and value["key"] == key
    assert len({v["token"] for v in values}) == 4
    # several ran at the same time on threads of one process, each with its own handle
    threaded = [v for v in values if v["thread"] != "MainThread"]
    assert len({v["pid"] for v in threaded}) == 1 and len({v["thread"] for v in threaded}) >= 2
    overlapping = any(
        a["start"] < b["end"] and b["start"] < a["end"] for i, a in enumerate(threaded) for b in threaded[i + 1 :]
    )
    assert overlapping


def test_threads_and_solo_exclude_each_other(celery_env):
    key = new_key()
    sent = [rec_wait.apply_async((key, 0.1), queue="zk-threads") for _ in range(8)]
    assert all(r.get(timeout=60) for r in sent)
    records = celery_env.records_of(f"run-{key}")
    assert len(records) == 8
    assert_no_overlap(records)
    assert len({r["pid"] for r in records}) == 2  # both workers took part


def test_threads_pool_skips_within_one_process(celery_env):
    key = new_key()
    sent = [rec_skip.apply_async((key, 0.6), queue="zk-threads") for _ in range(5)]
    values = [r.get(timeout=30) for r in sent]
    ran = [v for v in values if v is not None]
    assert ran and len(ran) < 5
    assert_no_overlap(celery_env.records_of(f"run-{key}"))


@pytest.fixture(scope="module")
def gevent_env(zk_server, redis_server, celery_app):
    gevent = {"pool": "gevent", "concurrency": 8, "queue": "zk-gevent"}
    with running_workers(zk_server.hosts, redis_server.url, gevent, gevent) as env:
        yield env


def test_gevent_pool_handles_and_exclusion(gevent_env):
    keys = [new_key() for _ in range(4)]
    sent = [rec_skip.apply_async((k, 0.8), queue="zk-gevent") for k in keys]
    values = [r.get(timeout=30) for r in sent]
    for key, value in zip(keys, values, strict=True):
        assert value is not None and value["lock"] == f"rec:{key}" and value["held"] is True
    key = new_key()
    burst = [rec_wait.apply_async((key, 0.05), queue="zk-gevent") for _ in range(10)]
    assert all(r.get(timeout=60) for r in burst)
    records = gevent_env.records_of(f"run-{key}")
    assert len(records) == 10
    assert_no_overlap(records)
    assert len({r["pid"] for r in records}) == 2

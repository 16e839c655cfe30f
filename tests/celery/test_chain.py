"""A chain of two SingleExecutionTasks with the same key: the second starts only after the first has ended, so it
must find the lock free. The first's release has to have reached ZooKeeper before the second is published, even
when the second runs in another process (another ZooKeeper session) whose requests travel faster."""

import pytest
from celery import chain, group

from tests.support.celery_app import rec_skip
from tests.support.celery_harness import new_key, running_workers
from zklocks.testing.proxy import TcpProxy

pytestmark = pytest.mark.celery

CHAINS = 30
LATENCY = 0.25  # one way, on the first task's path to ZooKeeper


@pytest.fixture(scope="module")
def celery_env(zk_server, redis_server, celery_app):
    slow = TcpProxy("127.0.0.1", zk_server.port).start()
    slow.latency = LATENCY
    far = {"ZKLOCKS_TEST_HOSTS": slow.hosts}
    workers = [
        {"pool": "prefork", "concurrency": 2, "queue": "zk-chain-far-prefork", "env": far},
        {"pool": "threads", "concurrency": 2, "queue": "zk-chain-far-threads", "env": far},
        {"pool": "prefork", "concurrency": 2, "queue": "zk-chain-near-prefork"},
        {"pool": "threads", "concurrency": 2, "queue": "zk-chain-near-threads"},
    ]
    try:
        with running_workers(zk_server.hosts, redis_server.url, *workers, session_timeout=4.0) as env:
            yield env
    finally:
        slow.stop()


def run_chains(env, first_queue, second_queue, count=CHAINS):
    keys = [new_key() for _ in range(count)]
    # lock_timeout is 0 (the default) and on_locked="skip": a lock still held by the first would skip the second.
    # Several chains at once keep the workers busy.
    values = (
        group(chain(rec_skip.si(k, 0).set(queue=first_queue), rec_skip.si(k, 0).set(queue=second_queue)) for k in keys)
        .apply_async()
        .get(timeout=120)
    )
    skipped = [s for s in env.records_of("skipped") if s["name"] in {f"rec:{k}" for k in keys}]
    assert skipped == [] and all(v is not None for v in values), (
        f"{len(skipped)} of {count} second tasks skipped: {skipped[:3]}"
    )
    for key in keys:
        runs = env.records_of(f"run-{key}")
        assert len(runs) == 2 and runs[0]["end"] <= runs[1]["start"], runs


@pytest.mark.parametrize(
    "first,second",
    [
        ("zk-chain-far-prefork", "zk-chain-near-prefork"),
        ("zk-chain-far-threads", "zk-chain-near-threads"),
    ],
)
def test_the_second_of_a_chain_never_skips_when_it_runs_on_a_faster_session(celery_env, first, second):
    run_chains(celery_env, first, second)


@pytest.mark.parametrize("queue", ["zk-chain-near-prefork", "zk-chain-near-threads"])
def test_the_second_of_a_chain_never_skips_on_one_worker(celery_env, queue):
    run_chains(celery_env, queue, queue, count=60)

"""Fencing that reaches the worker (ZKLOCKS_BEAT["FENCE_WORKERS"]), on real parts: a 3-node ensemble, Redis, a
prefork worker and two real ``celery beat`` processes (see test_beat.py).

The leader is paused (SIGSTOP) after its fenced claim committed and before it published the tick, past its session
timeout: the other beat takes over and sends ticks with a newer token. Woken (SIGCONT), the old leader publishes
its claimed tick late. The worker drops it and logs it; every tick that ran, ran in token order.
"""

from __future__ import annotations

import signal
from itertools import pairwise

import pytest

from tests.celery.test_beat import SESSION_TIMEOUT, Deployment
from tests.support.beat_schedules import PAUSE_LINE
from tests.support.celery_harness import CeleryWorker
from tests.support.helpers import wait_until
from zklocks.testing import ZkEnsemble

DROPPED = "zklocks: dropping beat tick"


@pytest.fixture(scope="module")
def ensemble():
    with ZkEnsemble(3, tick_time=200) as ens:
        yield ens


@pytest.mark.timeout(150)
def test_deposed_leaders_late_publish_is_dropped_by_the_worker(ensemble, redis_server, tmp_path):
    pause_file = tmp_path / "pause"
    d = Deployment(ensemble, redis_server.url, "tests.support.beat_app:PausingScheduler")
    d.environ.update(ZKLOCKS_TEST_BEAT_FENCE="1", ZKLOCKS_TEST_BEAT_PAUSE_FILE=str(pause_file))
    # A prefork worker with fencing on, in place of the deployment's threads worker.
    d.env.workers.remove(d.worker)
    d.worker = CeleryWorker(d.environ, pool="prefork", concurrency=2, queue="zk-beat", logdir=d.env.dir)
    d.worker.args[d.worker.args.index("tests.support.celery_app")] = "tests.support.beat_app"
    d.env.workers.append(d.worker)
    try:
        d.worker.start()
        d.beats = [d.new_beat(f"beat{i}") for i in range(2)]
        (old,) = wait_until(lambda: (ls := d.leaders()) and len(ls) == 1 and ls, timeout=30, interval=0.05)
        old_token = d.leader_token(old)
        d.wait_sends(3, timeout=30)
        pause_file.touch()
        wait_until(lambda: PAUSE_LINE in old.text(), timeout=10, interval=0.01)
        old.signal(signal.SIGSTOP)  # claimed, not yet published
        new = d.wait_new_leader(old, timeout=SESSION_TIMEOUT + 15)
        assert d.leader_token(new) > old_token
        wait_until(lambda: len(d.sends_after(0, old_token)) >= 3, timeout=20, interval=0.1)
        old.signal(signal.SIGCONT)
        # The old leader publishes its claimed tick late (that is the fault), and the worker drops it.
        wait_until(lambda: DROPPED in d.worker.read_log(), timeout=15, interval=0.1)
        d.wait_sends(2)
        records = sorted(d.records(), key=lambda r: r["ran_at"])
        tokens = [r["stamp"]["token"] for r in records]
        for (a, b), (ra, rb) in zip(pairwise(tokens), pairwise(records), strict=True):
            assert b >= a, f"token {b} ran after token {a}: {ra} then {rb}"
        late = d.worker.read_log().split(DROPPED, 1)[1].splitlines()[0]
        assert "'every-second'" in late and f"token {old_token} is older" in late, late
    except BaseException:
        print(d.logs())
        raise
    finally:
        d.close()

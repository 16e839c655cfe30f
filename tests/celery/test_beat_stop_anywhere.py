"""A clean stop that lands anywhere a signal can: Celery's SIGTERM handler closes the scheduler and raises
SystemExit wherever the main thread is, in zklocks, Celery, kombu, redis-py, Django or the standard library (inside a
finalizer too, where Python swallows the exception). For lines drawn from the steady state of a leading beat
(tests/support/beat_stop_anywhere.py, real ZooKeeper and Redis), each stop must end the beat within 20 s and leave
no candidate node behind."""

import random
import subprocess
import sys
import uuid

import pytest

from tests.support.celery_harness import CeleryEnv
from tests.support.helpers import ROOT

STOPS = 12
LINES = 30_000  # about two seconds of a leading beat's main thread, ticks and sends included


@pytest.mark.timeout(400)
@pytest.mark.parametrize("scheduler", ["persistent", "database"])
def test_a_sigterm_on_any_line_stops_the_beat_and_leaves_the_election(zk_server, redis_server, scheduler):
    env = CeleryEnv(zk_server.hosts, redis_server.url, session_timeout=4.0)
    try:
        extra = {"ZKLOCKS_TEST_BEAT_ELECTION": f"beat-{uuid.uuid4().hex[:8]}", "ZKLOCKS_TEST_BEAT_FENCE": "1"}
        if scheduler == "database":
            extra["ZKLOCKS_TEST_BEAT_DB"] = str(env.dir / "beat.sqlite3")
            extra["ZKLOCKS_TEST_BEAT_SCHEDULER"] = "django_celery_beat.schedulers:DatabaseScheduler"
        environ = env.environ(**extra)
        if scheduler == "database":
            subprocess.run(
                [sys.executable, "-m", "tests.support.beat_app"], cwd=ROOT, env=environ, check=True, timeout=60
            )
        lines = sorted(random.Random(f"stop-anywhere-{scheduler}").sample(range(1, LINES), STOPS))
        run = subprocess.run(
            [sys.executable, "-m", "tests.support.beat_stop_anywhere", ",".join(map(str, lines))],
            cwd=ROOT,
            env=environ,
            capture_output=True,
            text=True,
            timeout=360,
        )
        print(run.stdout)
        assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr[-20000:]}"
        assert run.stdout.count("stopped at") == STOPS, run.stdout
    finally:
        env.cleanup()

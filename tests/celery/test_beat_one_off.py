"""django-celery-beat's one-off tasks across a failover, on real parts (a 3-node ensemble, Redis, a worker, two
real ``celery beat`` processes sharing one SQLite database; see test_beat.py). A one-off task's "done" lives in
the database only (its run count, synced every few minutes or at the close), and its clocked time stays due: a
next leader that reads the row before the old one's sync would send the task again.

- a clean stop while the storage takes 4 s to sync: the leader keeps the lead until it has synced;
- kill -9 just after the task ran: the leader wrote the row's run count right after the send, not at its next
  sync minutes later.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.celery.test_beat import CLEAN_BOUND, CRASH_BOUND, DATABASE, Beat, Deployment
from tests.celery.test_beat_sigterm import leader_and_standby
from tests.support.beat_schedules import SLOW_CLOSE_LINE
from tests.support.helpers import ROOT, wait_until
from zklocks.testing import ZkEnsemble

ONE_OFF = """
import datetime, tests.support.beat_app
from django_celery_beat.models import ClockedSchedule, PeriodicTask
at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
PeriodicTask.objects.create(name="one-off", task="tests.support.beat_app.beat_tick", one_off=True,
                            clocked=ClockedSchedule.objects.create(clocked_time=at))
"""


WRITTEN = """
import time, tests.support.beat_app
from django_celery_beat.models import PeriodicTask
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    row = PeriodicTask.objects.get(name="one-off")
    if row.total_run_count or not row.enabled:
        break
    time.sleep(0.05)
else:
    raise SystemExit("the leader did not write the one-off's run within 5 s of its send")
"""


@pytest.fixture(scope="module")
def ensemble():
    with ZkEnsemble(3, tick_time=200) as ens:
        yield ens


def one_off_sent_then(d: Deployment, first_env: dict[str, str], stop, bound: float) -> list[dict]:
    """beat0 (``first_env``) leads with beat1 standing by; a one-off task due in 2 s is added; once it ran and
    its row says so, ``stop(beat0)``; beat1 leads and runs the schedule a while. The one-off's executions."""
    old = leader_and_standby(d, first_env)
    subprocess.run([sys.executable, "-c", ONE_OFF], cwd=ROOT, env=d.environ, check=True, timeout=60)

    def one_offs() -> list[dict]:
        return [r for r in d.records() if r["stamp"] and r["stamp"]["entry"] == "one-off"]

    wait_until(one_offs, timeout=20, interval=0.05)
    subprocess.run([sys.executable, "-c", WRITTEN], cwd=ROOT, env=d.environ, check=True, timeout=60)
    stop(old)
    d.wait_new_leader(old, timeout=bound + 10)
    d.wait_sends(3)  # the new leader has read the database and run its schedule for a while
    for beat in d.beats:
        beat.stop()
    return one_offs()


@pytest.mark.timeout(150)
def test_one_off_is_not_sent_again_after_a_clean_stop_with_a_slow_storage(ensemble, redis_server):
    slow = 4.0

    def stop(old: Beat) -> None:
        old.signal(signal.SIGTERM)
        assert old.proc is not None
        old.proc.wait(slow + 10)
        assert SLOW_CLOSE_LINE in old.text(), old.text()

    with Deployment(ensemble, redis_server.url, DATABASE, fenced=True) as d:
        runs = one_off_sent_then(d, dict(d.environ, ZKLOCKS_TEST_BEAT_SLOW_CLOSE=str(slow)), stop, CLEAN_BOUND)
        assert len(runs) == 1, [r["stamp"] for r in runs]


@pytest.mark.timeout(150)
def test_one_off_is_not_sent_again_after_its_leader_was_killed_unsynced(ensemble, redis_server):
    with Deployment(ensemble, redis_server.url, DATABASE, fenced=True) as d:
        runs = one_off_sent_then(d, d.environ, lambda old: old.signal(signal.SIGKILL), CRASH_BOUND)
        assert len(runs) == 1, [r["stamp"] for r in runs]

"""Catch-up policies after a real failover longer than two periods, on real parts (a 3-node ensemble, Redis, a
worker, real ``celery beat`` processes; see test_beat.py).

Five entries every 2 s, one per policy (tests/support/beat_app.py CATCH_UP). The only beat is killed (-9); a new
beat starts 5 s later and leads once the old session expired: about 7 s without a leader, so three ticks or
more of each entry are missed. A send of a tick that was due before the new leader's election carries
``catch_up: true`` in its stamp; each entry then runs as many of those as its policy says.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.celery.test_beat import PERSISTENT, Deployment
from tests.support.beat_schedules import CATCH_UP
from tests.support.helpers import wait_until
from zklocks.celery import catchup
from zklocks.testing import ZkEnsemble

PERIOD = 2.0
EXPECTED = {"cu-skip": 0, "cu-once": 1, "cu-each": 2, "cu-window-long": 1, "cu-window-short": 0}


@pytest.fixture(scope="module")
def ensemble():
    with ZkEnsemble(3, tick_time=200) as ens:
        yield ens


@pytest.mark.timeout(150)
def test_each_catch_up_policy_after_a_failover_longer_than_two_periods(ensemble, redis_server):
    d = Deployment(ensemble, redis_server.url, PERSISTENT)
    d.environ["ZKLOCKS_TEST_BEAT_CATCHUP"] = "1"
    try:
        d.worker.start()
        d.beats = [d.new_beat("beat0")]
        (old,) = wait_until(lambda: (ls := d.leaders()) and len(ls) == 1 and ls, timeout=30, interval=0.05)
        old_token = d.leader_token(old)
        wait_until(lambda: {r["stamp"]["entry"] for r in d.records()} == set(EXPECTED), timeout=20, interval=0.1)
        killed_at = time.time()
        old.signal(signal.SIGKILL)
        time.sleep(5.0)
        d.beats.append(d.new_beat("beat1"))
        new = d.wait_new_leader(old, timeout=20)
        assert d.leader_token(new) > old_token

        def newer():
            return [r for r in d.records() if r["stamp"]["token"] > old_token]

        # Two regular ticks of every entry after the catch-up.
        wait_until(
            lambda: all(sum(1 for r in newer() if r["stamp"]["entry"] == n) >= 2 + EXPECTED[n] for n in EXPECTED),
            timeout=20,
            interval=0.1,
        )
        records = newer()
        text = new.text()
        for name, count in EXPECTED.items():
            mine = [r["stamp"] for r in records if r["stamp"]["entry"] == name]
            caught = [s for s in mine if s.get("catch_up")]
            assert len(caught) == count, (name, mine)
            # Each missed tick was due during the outage, after the last send before the kill.
            assert all(s["due"] > killed_at - PERIOD for s in caught), (name, caught)
            assert len({s["due"] for s in caught}) == len(caught), (name, caught)
            # Regular sends resume on the schedule: no two within less than most of a period.
            regular = sorted(s["sent_at"] for s in mine if not s.get("catch_up"))
            assert all(b - a >= 0.8 * PERIOD for a, b in zip(regular, regular[1:], strict=False)), (name, regular)
            policy = catchup.parse(catchup_of(name))
            assert f"{name} missed" in text and f"catch-up {policy}:" in text, text[-3000:]
    except BaseException:
        print(d.logs())
        raise
    finally:
        d.close()


def catchup_of(name: str) -> str:
    return CATCH_UP[name] or "once"

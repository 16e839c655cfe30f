"""A clean stop that lands anywhere: Celery's SIGTERM handler closes the scheduler inside the handler, on the main
thread, wherever the signal interrupted it, then raises SystemExit (and Celery closes the scheduler once more as
the loop unwinds). Here the signal lands while the leader's main thread holds a lock of its election handle, on
real parts: a 3-node ensemble, Redis, two real ``celery beat`` processes (see test_beat.py).

Asserted: the leader exits at once, its candidate node is gone before its session could have expired (released or
closed with its session at exit, not left to the server's expiry), and the other beat leads and sends within the
clean-stop bound. And a SIGTERM between a committed claim and its publish loses no tick: the claim is noted for the
next leader, which sends it once. A SIGTERM whose SystemExit a finalizer swallows still stops the beat (and the
one-off task of a leader slow to sync: test_beat_one_off.py).
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from kazoo.client import KazooClient

from tests.celery.test_beat import (
    CLEAN_BOUND,
    INTERVAL,
    PERSISTENT,
    SESSION_TIMEOUT,
    STEPPED_DOWN,
    Beat,
    Deployment,
)
from tests.support.beat_schedules import PAUSE_LINE, SIGTERM_LINE
from tests.support.helpers import wait_until
from zklocks.testing import ZkEnsemble


@pytest.fixture(scope="module")
def ensemble():
    with ZkEnsemble(3, tick_time=200) as ens:
        yield ens


def candidates(d: Deployment, zk: KazooClient | None = None) -> list[str]:
    """The election's candidate nodes (its beat state node aside), read with ``zk`` or a client of its own."""
    own = zk is None
    if zk is None:
        zk = KazooClient(hosts=d.hosts)
        zk.start(timeout=10)
    try:
        children = zk.get_children(d.election_path)
        return [c for c in children if not c.startswith("__")]
    finally:
        if own:
            zk.stop()
            zk.close()


def leader_and_standby(d: Deployment, env: dict[str, str]) -> Beat:
    """The worker, beat0 (``env``) elected, beat1 standing by in the queue, and two sends: beat0.

    A beat0 that stepped down before the test's own fault (its 2 s session suspended on a loaded machine) is no
    start for the test: both beats stop cleanly and start again, at most three times.
    """
    d.worker.start()
    logs = []
    for _ in range(3):
        leader = Beat("beat0", env, d.env.dir, d.servers)
        since = leader.offset()  # a log of an earlier try comes first in the file
        d.beats = [leader.start()]
        wait_until(lambda: d.leaders() == d.beats, timeout=30, interval=0.05)
        d.beats.append(d.new_beat("beat1"))
        wait_until(lambda: len(candidates(d)) == 2, timeout=30, interval=0.1)
        d.wait_sends(2)
        if d.leaders() == [leader] and STEPPED_DOWN not in leader.text(since):
            return leader
        for beat in d.beats:
            beat.close()
        logs.append(leader.text(since))
    pytest.fail("beat0 stepped down before the test's fault three times:\n" + "\n---\n".join(logs))


@pytest.mark.timeout(150)
def test_sigterm_while_the_leader_holds_its_handle_lock_steps_down_at_once(ensemble, redis_server, tmp_path):
    flag = tmp_path / "sigterm"
    with Deployment(ensemble, redis_server.url, "celery.beat:PersistentScheduler") as d:
        first = leader_and_standby(d, dict(d.environ, ZKLOCKS_TEST_BEAT_SIGTERM_FILE=str(flag)))
        offset = first.offset()  # an earlier try of leader_and_standby, which stepped down, logged above it
        old_token = d.leader_token(first)
        zk = KazooClient(hosts=d.hosts)
        zk.start(timeout=10)
        try:
            flag.touch()
            wait_until(lambda: SIGTERM_LINE in first.text(offset), timeout=30, interval=0.01)
            at = time.time()
            # Gone before the session could expire (released, or closed with its session): not left to the expiry.
            try:
                wait_until(lambda: len(candidates(d, zk)) == 1, timeout=SESSION_TIMEOUT, interval=0.01)
            except AssertionError:
                pytest.fail(f"the leader's node outlived {SESSION_TIMEOUT}s after a SIGTERM inside its handle's lock")
            gone = time.time() - at
        finally:
            zk.stop()
            zk.close()
        assert first.proc is not None
        first.proc.wait(timeout=15)
        assert first.text(offset).count(STEPPED_DOWN) == 1, first.text()
        new = d.wait_new_leader(first, timeout=CLEAN_BOUND + 10)
        assert new.name == "beat1" and d.leader_token(new) > old_token
        sent = wait_until(lambda: d.sends_after(at, old_token), timeout=CLEAN_BOUND + 5, interval=0.05)[0]
        assert sent - at <= CLEAN_BOUND + INTERVAL, f"first send of the new leader {sent - at:.2f}s after the signal"
        print(f"leader's node gone {gone:.2f}s after the signal; next leader's first send {sent - at:.2f}s after it")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("at", ["publish", "claim"])
def test_sigterm_between_a_claim_and_its_publish_loses_no_tick(ensemble, redis_server, tmp_path, at):
    """``publish``: in the pause between the committed claim and the publish (PausingScheduler); ``claim``: as
    the beat starts waiting for its claim's answer (the claim commits; its beat never learns it)."""
    flag = tmp_path / "sigterm"
    with Deployment(ensemble, redis_server.url, PERSISTENT, fenced=True) as d:
        first_env = dict(d.environ, ZKLOCKS_TEST_BEAT_SIGTERM_FILE=str(flag), ZKLOCKS_TEST_BEAT_SIGTERM_AT="claim")
        old = leader_and_standby(d, first_env if at == "claim" else d.environ)
        offset = old.offset()
        if at == "publish":
            d.pause_file.touch()
            wait_until(lambda: PAUSE_LINE in old.text(offset), timeout=10, interval=0.005)
            old.signal(signal.SIGTERM)  # claimed, not yet published
        else:
            flag.touch()
            wait_until(lambda: SIGTERM_LINE in old.text(offset), timeout=10, interval=0.005)
        assert old.proc is not None
        old.proc.wait(10)
        assert "noted for the leader" in old.text(offset), old.text(offset)
        new = d.wait_new_leader(old, timeout=CLEAN_BOUND + 10)
        wait_until(lambda: "that its beat never sent" in new.text(), timeout=10, interval=0.05)
        d.wait_sends(2)
        for beat in d.beats:
            beat.stop()
        counts = d.counts()
        assert counts["lost"] == 0 and counts["duplicates"] == 0, counts
        assert counts["dropped_late"] == 0, counts


@pytest.mark.timeout(150)
def test_sigterm_after_the_publish_sends_the_tick_once(ensemble, redis_server, tmp_path):
    """The signal lands once the message is published, while the scheduler syncs its storage: the next leader
    must not send that tick again."""
    flag = tmp_path / "sigterm"
    flag.touch()
    with Deployment(ensemble, redis_server.url, PERSISTENT, fenced=True) as d:
        d.worker.start()
        env = dict(d.environ, ZKLOCKS_TEST_BEAT_SIGTERM_FILE=str(flag), ZKLOCKS_TEST_BEAT_SIGTERM_AT="sync")
        old = Beat("beat0", env, d.env.dir, d.servers).start()
        d.beats = [old]
        wait_until(lambda: SIGTERM_LINE in old.text(), timeout=30, interval=0.01)
        assert old.proc is not None
        old.proc.wait(10)
        d.beats.append(d.new_beat("beat1"))
        new = d.wait_new_leader(old, timeout=20)
        d.wait_sends(3)
        for beat in d.beats:
            beat.stop()
        assert "never sent" not in new.text(), new.text()
        counts = d.counts()
        assert counts["lost"] == 0 and counts["duplicates"] == 0, counts
        assert counts["executions"] == counts["claims"], counts


@pytest.mark.timeout(150)
def test_sigterm_whose_exit_is_swallowed_by_a_finalizer_still_stops_the_beat(ensemble, redis_server, tmp_path):
    """The handler runs inside an object's ``__del__`` (as a signal may land in any finalizer or weakref
    callback): Python prints its SystemExit and goes on, and Celery's loop would tick on. The beat must step down
    and exit all the same, and the tick being claimed must go out once."""
    flag = tmp_path / "sigterm"
    with Deployment(ensemble, redis_server.url, PERSISTENT, fenced=True) as d:
        env = dict(d.environ, ZKLOCKS_TEST_BEAT_SIGTERM_FILE=str(flag), ZKLOCKS_TEST_BEAT_SIGTERM_AT="finalizer")
        old = leader_and_standby(d, env)
        offset = old.offset()
        flag.touch()
        wait_until(lambda: SIGTERM_LINE in old.text(offset), timeout=10, interval=0.005)
        assert old.proc is not None
        try:
            old.proc.wait(10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the beat ran on after a SIGTERM whose SystemExit was swallowed:\n{old.text(offset)}")
        log = old.text(offset)
        assert "Exception ignored" in log, log  # the injection did what it says
        assert log.count(STEPPED_DOWN) == 1, log
        d.wait_new_leader(old, timeout=CLEAN_BOUND + 10)
        d.wait_sends(2)
        for beat in d.beats:
            beat.stop()
        counts = d.counts()
        assert counts["lost"] == 0 and counts["duplicates"] == 0, counts

"""Exactly one Celery beat across hosts, on real parts: a 3-node ensemble, Redis, a worker and three real
``celery beat -S zklocks.celery.beat:LeaderScheduler`` processes, each with its own schedule file and process
group and its own proxies in front of the ensemble (as three hosts would be). One entry runs every second;
each execution records the stamp its leader put on the message (token, send time).

Faults, one after the other on the same three beats: kill -9 of the leader, SIGSTOP of the leader past its
session timeout then SIGCONT, a partition of the leader's ZooKeeper connections, a black-hole of the leader's link
just after its claim reached ZooKeeper (the claim commits, its answer is lost, the session expires), a SIGSTOP of
the leader between its committed claim and its publish (it publishes late when woken), a clean stop. The worker
fences beat ticks (ZKLOCKS_BEAT["FENCE_WORKERS"]). Asserted: no two executions of one tick, sends in token order,
executions in token order, no committed claim left unexecuted except the late publish the worker dropped, no gap
longer than the failover bound, and nothing sent by the woken zombie.

ZKLOCKS_BEAT_FIGURES=<file> appends the failover times of each run, and its counts (duplicates, lost ticks,
out-of-order executions, dropped late ticks), as JSON lines (the table in docs/celery.md).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from itertools import pairwise
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.support.beat_schedules import PAUSE_LINE
from tests.support.celery_harness import CeleryEnv, CeleryWorker
from tests.support.helpers import ROOT, read_records, wait_until
from zklocks.celery.beat_state import entry_node
from zklocks.recipes.layout import beat_state_path
from zklocks.testing import ZkEnsemble
from zklocks.testing.proxy import TcpProxy

SESSION_TIMEOUT = 2.0
CRASH_BOUND = SESSION_TIMEOUT + 2.0  # kill -9, SIGSTOP, partition: the server must expire the session first
CLEAN_BOUND = 2.0
INTERVAL = 1.0
SEND = "Scheduler: Sending due task"
ELECTED = "beat: elected leader of"
STEPPED_DOWN = "beat: stepping down as leader"
DATABASE = "django_celery_beat.schedulers:DatabaseScheduler"
PERSISTENT = "celery.beat:PersistentScheduler"
PAUSING = {  # the same schedulers, able to stop between claim and publish (tests/support/beat_app.py)
    PERSISTENT: "tests.support.beat_app:PausingScheduler",
    DATABASE: "tests.support.beat_app:PausingDatabaseScheduler",
}
DROPPED = "zklocks: dropping beat tick"
CLAIM = b"/__beat__/every-second"  # the claim's multi names the entry's node (the lease renewal's does not)


class Beat:
    """One ``celery beat`` process: its own schedule file, log, process group and proxies to every server."""

    def __init__(self, name: str, env: dict[str, str], workdir: Path, servers: list[str]) -> None:
        self.name = name
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "beat.log"
        self.proxies = [TcpProxy(host.rsplit(":", 1)[0], int(host.rsplit(":", 1)[1])).start() for host in servers]
        self.env = dict(env, ZKLOCKS_TEST_HOSTS=",".join(p.hosts for p in self.proxies))
        self.proc: subprocess.Popen | None = None

    def start(self) -> Beat:
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.support.beat_app",
                "beat",
                "-S",
                "zklocks.celery.beat:LeaderScheduler",
                "-s",
                str(self.dir / "schedule"),
                "--pidfile",
                str(self.dir / "beat.pid"),
                "-l",
                "INFO",
            ],
            cwd=self.dir,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        return self

    def text(self, since: int = 0) -> str:
        try:
            return self.log.read_bytes()[since:].decode(errors="replace")
        except FileNotFoundError:
            return ""

    def offset(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def close(self) -> None:
        self.stop()
        for proxy in self.proxies:
            proxy.stop()


class Deployment:
    """Three beats of one scheduler kind, a worker, and the records of every execution."""

    def __init__(
        self,
        ensemble: ZkEnsemble,
        redis_url: str,
        scheduler: str,
        *,
        fenced: bool = False,
        session_timeout: float = SESSION_TIMEOUT,
    ) -> None:
        self.env = CeleryEnv(ensemble.hosts, redis_url, session_timeout=session_timeout)
        self.hosts = ensemble.hosts
        self.servers = [s.hosts for s in ensemble.servers]
        self.scheduler = scheduler
        self.pause_file = self.env.dir / "pause"
        extra = {
            "ZKLOCKS_TEST_BEAT_SCHEDULER": PAUSING[scheduler] if fenced else scheduler,
            "ZKLOCKS_TEST_BEAT_ELECTION": f"beat-{uuid.uuid4().hex[:8]}",
        }
        if fenced:
            extra.update(ZKLOCKS_TEST_BEAT_FENCE="1", ZKLOCKS_TEST_BEAT_PAUSE_FILE=str(self.pause_file))
        if scheduler == DATABASE:
            extra["ZKLOCKS_TEST_BEAT_DB"] = str(self.env.dir / "beat.sqlite3")
        self.environ = self.env.environ(**extra)
        if scheduler == DATABASE:
            subprocess.run(
                [sys.executable, "-m", "tests.support.beat_app"], cwd=ROOT, env=self.environ, check=True, timeout=60
            )
        self.worker = CeleryWorker(self.environ, pool="threads", concurrency=4, queue="zk-beat", logdir=self.env.dir)
        self.worker.args[self.worker.args.index("tests.support.celery_app")] = "tests.support.beat_app"
        self.env.workers.append(self.worker)
        self.beats: list[Beat] = []
        self.faults: list[dict] = []
        self.current: dict | None = None  # the fault under way, for a failure's report

    def start(self) -> Deployment:
        self.worker.start()
        self.beats = [self.new_beat(f"beat{i}") for i in range(3)]
        return self

    def new_beat(self, name: str) -> Beat:
        return Beat(name, self.environ, self.env.dir, self.servers).start()

    @property
    def election_path(self) -> str:
        """The election's node: its candidates and its beat state node."""
        return f"{self.env.namespace}/{self.environ['ZKLOCKS_TEST_BEAT_ELECTION']}"

    def records(self) -> list[dict]:
        return read_records(self.env.records / "beat.jsonl")

    def leaders(self) -> list[Beat]:
        """Beats whose last election line is not followed by a step-down, and whose process runs."""
        out = []
        for beat in self.beats:
            text = beat.text()
            if beat.proc is None or beat.proc.poll() is not None:
                continue
            if text.rfind(ELECTED) > text.rfind(STEPPED_DOWN):
                out.append(beat)
        return out

    def wait_new_leader(self, old: Beat | None, timeout: float = 20.0) -> Beat:
        def found():
            leaders = [b for b in self.leaders() if b is not old]
            return leaders[0] if len(leaders) == 1 else None

        return wait_until(found, timeout=timeout, interval=0.05)

    def sends_after(self, at: float, token: int) -> list[float]:
        """Send times after ``at`` by leaders newer than ``token``."""
        return sorted(
            r["stamp"]["sent_at"]
            for r in self.records()
            if r["stamp"] and r["stamp"]["sent_at"] > at and r["stamp"]["token"] > token
        )

    def leader_token(self, beat: Beat) -> int:
        text = beat.text()
        line = text[text.rfind(ELECTED) :].splitlines()[0]
        return int(line.split("token ")[1].split(")")[0])

    def wait_sends(self, count: int, timeout: float = 20.0) -> None:
        have = len(self.records())
        wait_until(lambda: len(self.records()) >= have + count, timeout=timeout, interval=0.05)

    def fault(self, kind: str, bound: float, act, *, then=None) -> Beat:
        """Inject a fault into the current leader; wait for the next leader's first send; record the figures."""
        (old,) = wait_until(lambda: (ls := self.leaders()) and len(ls) == 1 and ls, timeout=20, interval=0.05)
        old_token = self.leader_token(old)
        self.wait_sends(2)
        at = time.time()
        self.current = {"kind": kind, "at": at, "old": old.name, "old_token": old_token}
        act(old)
        new = self.wait_new_leader(old, timeout=bound + 15)
        new_token = self.leader_token(new)
        assert new_token > old_token
        # The first send of any newer leader (on a loaded machine the new one may lose its own lease at once).
        first = wait_until(lambda: self.sends_after(at, old_token), timeout=bound + 5, interval=0.05)[0]
        self.faults.append(
            {"kind": kind, "at": at, "takeover": first - at, "bound": bound, "old": old.name, "new": new.name}
        )
        if then is not None:
            then(old)
        self.wait_sends(2)
        return old

    def check(self) -> None:
        records = self.records()
        stamps = [r["stamp"] for r in records]
        assert all(stamps), "an execution without the leader's stamp"
        sends = sorted((s["sent_at"], s["token"]) for s in stamps)
        # Each message ran once (no redelivery), and no two sends claimed one tick.
        assert len({r["task_id"] for r in records}) == len(records)
        assert len(set(sends)) == len(sends)
        for (t1, k1), (t2, k2) in pairwise(sends):
            assert t2 - t1 >= 0.9 * INTERVAL, f"two sends {t2 - t1:.3f}s apart (tokens {k1}, {k2}): a tick sent twice"
            assert k2 >= k1, f"a send by the old leader (token {k2}) after one by a newer leader (token {k1})"
        for fault in self.faults:
            assert fault["takeover"] <= fault["bound"], fault
            # No gap beyond the failover bound (plus the entry's own interval) around the fault.
            after = [t for t, _ in sends if t > fault["at"]]
            before = [t for t, _ in sends if t <= fault["at"]]
            assert after and before
            assert after[0] - before[-1] <= fault["bound"] + INTERVAL + 0.2, fault
        # Steady state between faults: one send per second.
        gaps = [b - a for (a, _), (b, _) in pairwise(sends)]
        assert max(gaps) <= CRASH_BOUND + INTERVAL + 0.2

    def counts(self) -> dict:
        """After the beats stopped and the worker drained: duplicates, lost ticks, out-of-order executions and
        late ticks the worker dropped. Lost = committed claims (the entry node's version + 1) that no worker
        executed nor dropped."""
        time.sleep(1.5)
        records = self.records()
        path = beat_state_path(self.election_path)
        zk = KazooClient(hosts=self.hosts)
        zk.start(timeout=10)
        try:
            claims = zk.get(f"{path}/{entry_node('every-second')}")[1].version + 1
        finally:
            zk.stop()
            zk.close()
        dropped = self.worker.read_log().count(DROPPED)
        ticks = [(r["stamp"]["token"], r["stamp"]["sent_at"]) for r in records]
        by_run = [r["stamp"]["token"] for r in sorted(records, key=lambda r: r["ran_at"])]
        return {
            "claims": claims,
            "executions": len(records),
            "duplicates": len(ticks) - len(set(ticks)),
            "lost": claims - len(set(ticks)) - dropped,
            "out_of_order": sum(1 for a, b in pairwise(by_run) if b < a),
            "dropped_late": dropped,
        }

    def close(self) -> None:
        for beat in self.beats:
            beat.signal(signal.SIGCONT)
            beat.signal(signal.SIGTERM)
        for beat in self.beats:
            beat.close()
        self.env.cleanup()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, kind, error, tb) -> None:
        """A failure prints every log; the deployment is stopped in any case."""
        try:
            if error is not None:
                print(self.logs())
        finally:
            self.close()

    def logs(self) -> str:
        """For a failure: the faults so far, the election, each running beat's thread stacks and last lines
        (first, as a long output may be cut), then every log whole."""
        running = [b for b in self.beats if b.proc is not None and b.proc.poll() is None]
        offsets = {b.name: b.offset() for b in running}
        for beat in running:
            beat.signal(signal.SIGUSR1)  # faulthandler (tests/support/beat_app.py) writes the stacks to its log
        time.sleep(0.5)
        faults = "".join(f"fault: {json.dumps(f)}\n" for f in [*self.faults, {"under way": self.current}])
        stacks = "".join(f"--- {b.name}: stacks\n{b.text(offsets[b.name])[-6000:]}\n" for b in running)
        tails = "".join(
            f"--- {b.name}: last lines\n" + "\n".join(b.text().splitlines()[-25:]) + "\n" for b in self.beats
        )
        whole = "\n".join(f"--- {b.name}\n{b.text()}" for b in self.beats)
        return faults + self.election_state() + stacks + tails + whole + self.env.logs()

    def election_state(self) -> str:
        """For a failure: each beat's process and ZooKeeper session, and the election's queue (who leads)."""
        lines = ["--- election queue"]
        for beat in self.beats:
            state = "no process" if beat.proc is None else f"pid {beat.proc.pid} exit {beat.proc.poll()}"
            lines.append(f"{beat.name}: {state}")
        zk = KazooClient(hosts=self.hosts)
        try:
            zk.start(timeout=10)
            for child in sorted(zk.get_children(self.election_path), key=lambda c: c[-10:]):
                data, stat = zk.get(f"{self.election_path}/{child}")
                lines.append(f"{child}: session {stat.ephemeralOwner:#x} data {data[:120]!r}")
        except Exception as exc:  # noqa: BLE001 - a diagnostic: the failure being reported matters more
            lines.append(f"could not read the queue: {exc!r}")
        finally:
            zk.stop()
            zk.close()
        return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def ensemble():
    with ZkEnsemble(3, tick_time=200) as ens:
        yield ens


def run_faults(deployment: Deployment) -> dict:
    d = deployment
    d.wait_new_leader(None, timeout=30)
    d.wait_sends(3, timeout=30)
    assert len(d.leaders()) == 1

    # 1. kill -9 of the leader; a fresh beat takes its place (a restarted host).
    def replace(old: Beat) -> None:
        d.beats[d.beats.index(old)] = d.new_beat(f"{old.name}-r{len(d.faults)}")
        old.close()

    d.fault("kill -9", CRASH_BOUND, lambda b: b.signal(signal.SIGKILL), then=replace)

    # 2. SIGSTOP of the leader past its session timeout, then SIGCONT: the zombie must not send.
    woke: dict = {}

    def wake(old: Beat) -> None:
        time.sleep(0.5)
        woke["beat"], woke["offset"] = old, old.offset()
        old.signal(signal.SIGCONT)
        wait_until(lambda: STEPPED_DOWN in old.text(woke["offset"]), timeout=10)

    d.fault("SIGSTOP", CRASH_BOUND, lambda b: b.signal(signal.SIGSTOP), then=wake)
    zombie = woke["beat"]
    d.wait_sends(2)
    zombie_log = zombie.text(woke["offset"])
    assert SEND not in zombie_log, zombie_log

    # 3. A partition of the leader's ZooKeeper connections (its proxies black-hole every byte).
    cut: dict = {}

    def partition(b: Beat) -> None:
        cut["offset"] = b.offset()
        for proxy in b.proxies:
            proxy.partition()

    def heal(old: Beat) -> None:
        time.sleep(0.5)
        for proxy in old.proxies:
            proxy.heal()
        wait_until(lambda: STEPPED_DOWN in old.text(cut["offset"]), timeout=15)

    cut_beat = d.fault("partition", CRASH_BOUND, partition, then=heal)
    # At most the one send whose fenced write was committed before the cut; none after it stepped down.
    cut_log = cut_beat.text(cut["offset"])
    assert cut_log.count(SEND) <= 1, cut_log
    assert SEND not in cut_log.split(STEPPED_DOWN, 1)[1], cut_log

    # 4. The leader's link black-holed just after its claim reached ZooKeeper: the claim commits, its answer is
    # lost, the session expires. Once back, the old beat notes the claim and the new leader sends it.
    hole: dict = {}

    def black_hole(b: Beat) -> None:
        hole["offset"] = b.offset()
        for proxy in b.proxies:
            proxy.drop_after_next_request((14,), contains=CLAIM, then_partition=True, settle=0.3)
        wait_until(lambda: any(p.dropped.is_set() for p in b.proxies), timeout=5, interval=0.005)
        for proxy in b.proxies:
            proxy.partition()

    def unhole(old: Beat) -> None:
        time.sleep(0.5)
        for proxy in old.proxies:
            proxy.cancel_drop()
            proxy.heal()
        wait_until(lambda: "noted for the leader" in old.text(hole["offset"]), timeout=15)
        # The claim committed (nearly always) and the new leader sends it, or it did not and there is nothing to send.
        settled = ("that its beat never sent", "never committed: nothing to send")
        wait_until(lambda: any(m in b.text() for b in d.beats for m in settled), timeout=10)

    d.fault("link black-hole at a claim", CRASH_BOUND, black_hole, then=unhole)

    # 5. The leader stopped (SIGSTOP) between its committed claim and its publish, past its session; woken, it
    # publishes that tick late, after the new leader's: the fencing worker drops it.
    paused: dict = {}

    def pause(b: Beat) -> None:
        paused["offset"] = b.offset()
        d.pause_file.touch()
        wait_until(lambda: PAUSE_LINE in b.text(paused["offset"]), timeout=5, interval=0.005)
        b.signal(signal.SIGSTOP)

    def resume(old: Beat) -> None:
        drops = d.worker.read_log().count(DROPPED)
        old.signal(signal.SIGCONT)
        wait_until(lambda: d.worker.read_log().count(DROPPED) > drops, timeout=15, interval=0.1)

    d.fault("paused publish", CRASH_BOUND, pause, then=resume)

    # 6. A clean stop (SIGTERM): the leader steps down at once.
    d.fault("clean stop", CLEAN_BOUND, lambda b: b.signal(signal.SIGTERM))
    d.check()
    for beat in d.beats:
        beat.stop()
    counts = d.counts()
    assert counts["duplicates"] == 0 and counts["lost"] == 0 and counts["out_of_order"] == 0, counts
    assert counts["dropped_late"] == 1, counts  # the paused leader's late tick, and nothing else
    figures = os.environ.get("ZKLOCKS_BEAT_FIGURES")
    if figures:
        with open(figures, "a") as out:
            for fault in d.faults:
                out.write(json.dumps({**fault, "scheduler": d.scheduler}) + "\n")
            out.write(json.dumps({"counts": counts, "scheduler": d.scheduler}) + "\n")
    return counts


@pytest.mark.timeout(240)
@pytest.mark.parametrize("scheduler", [PERSISTENT, DATABASE], ids=["persistent", "database"])
def test_one_beat_sends_each_tick_once_through_every_fault(ensemble, redis_server, scheduler):
    d = Deployment(ensemble, redis_server.url, scheduler, fenced=True)
    try:
        d.start()
        run_faults(d)
    except BaseException:
        print(d.logs())
        raise
    finally:
        d.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("scheduler", [PERSISTENT, DATABASE], ids=["persistent", "database"])
def test_failover_figures_over_repeated_runs(ensemble, redis_server, scheduler):
    runs = int(os.environ.get("ZKLOCKS_BEAT_RUNS", "5"))
    faults: list[dict] = []
    totals: dict[str, int] = {}
    for _ in range(runs):
        d = Deployment(ensemble, redis_server.url, scheduler, fenced=True)
        try:
            d.start()
            counts = run_faults(d)
            faults.extend(d.faults)
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
        except BaseException:
            print(d.logs())
            raise
        finally:
            d.close()
    for kind in sorted({f["kind"] for f in faults}):
        times = [f["takeover"] for f in faults if f["kind"] == kind]
        print(f"{scheduler} {kind}: median {statistics.median(times):.2f}s worst {max(times):.2f}s over {len(times)}")
    print(f"{scheduler} over {runs} runs: {totals}")

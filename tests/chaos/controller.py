"""The chaos controller: starts contender processes against a real ensemble, injects faults, waits for progress.

Progress after a fault is measured from the fault's *end*: for an instantaneous fault (a kill -9, an expiry, a
dropped connection) that is the moment it happened; for a fault with a duration (a server frozen with SIGSTOP,
the whole ensemble down) it is the SIGCONT, or the moment every server serves again. No lock service can grant
a lock while no server runs.

After the ensemble comes back with its data wiped, every worker process must hold a lock again within
SESSION_TIMEOUT + CONNECT_TIMEOUT + RECOVERY_SLACK of that moment: its sessions are gone, and the servers refuse
a client that has seen later zxids than theirs, so it recovers only by starting new sessions.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from tests.chaos.checker import Fault, Report, check, read_events
from tests.support.helpers import ROOT, project_auth, tree
from zklocks.names import encode_name
from zklocks.ops.reaper import sweep
from zklocks.testing import ZkEnsemble, ZkStartError, expire_session
from zklocks.testing.proxy import TcpProxy
from zklocks.testing.server import four_letter

MIN_SESSIONS = 50
# After a wipe, a process has a new session within SESSION_TIMEOUT + CONNECT_TIMEOUT of the ensemble's return;
# then its threads queue with about 60 others on two locks whose holds take 3-20 ms (3 % of them 0.4-0.8 s).
RECOVERY_SLACK = 2.0
_SID = re.compile(r"sid=0x([0-9a-f]+)")
SHORT_PLAN = [
    "kill-leader",
    "kill-follower",
    "sigstop",
    "restart-ensemble",
    "expire-holder",
    "kill-holder",
    "drop-create",
    "cut-follower",
    "isolate-leader",
    "split",
    "flap-link",
    "idle-blip",
    "outage-release",
    "wipe-ensemble",  # last: when a process never recovers, the faults before it are still measured
]
# cut-follower, isolate-leader, split and flap-link partition servers: ZkEnsemble(server_links=True).


class Worker:
    def __init__(self, proc: subprocess.Popen, proxied: bool, pin: int | None = None) -> None:
        self.proc = proc
        self.proxied = proxied
        self.pin = pin  # index of the only server it talks to, or None for all of them
        self.killed_at: float | None = None


class ChaosRun:
    def __init__(
        self,
        ensemble: ZkEnsemble,
        workdir: Path,
        *,
        namespace: str = "/chaos",
        names: tuple[str, ...] = ("chaos:a", "chaos/b ü%"),
        workers: int = 6,
        threads: int = 10,
        session_timeout: float = 2.0,
        connect_timeout: float = 3.0,
        settle: float = 1.0,
        seed: int | None = None,
        sigstop_targets: tuple[str, ...] = ("holder", "leader", "follower"),
        work: bool = False,
        log=print,
    ) -> None:
        self.work = work  # contenders record work intervals under on_lost="cancel" (worker.py --work)
        self.ensemble = ensemble
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace
        self.names = list(names)
        self.n_workers = workers
        self.threads = threads
        self.session_timeout = session_timeout
        self.connect_timeout = connect_timeout
        self.tick = ensemble.servers[0].tick_time / 1000.0
        self.bound = session_timeout + self.tick + 2.0
        self.recovery_bound = session_timeout + connect_timeout + RECOVERY_SLACK
        self.log = log
        self.settle = settle
        self.sigstop_targets = list(sigstop_targets)
        self.sigstops = 0
        self.seed = seed if seed is not None else random.randrange(1 << 30)
        self.rng = random.Random(self.seed)
        self.workers: list[Worker] = []
        self.proxies: list[TcpProxy] = []
        self.faults: list[Fault] = []
        self.kills: dict[int, float] = {}
        self.revocations: list[dict] = []
        self.session_samples: list[int] = []
        self.latest: dict[str, float] = {name: 0.0 for name in self.names}
        self.sessions: dict[int, str] = {}
        self.long_holds: dict[str, dict] = {}  # id -> {"sid", "name", "end"?}
        self._offsets: dict[Path, int] = {}
        self.zk: KazooClient | None = None
        self.orphans: list[str] = []
        self.exit_codes: list[int | None] = []

    # -- set-up and tear-down --

    def start(self) -> None:
        self.proxies = [self.proxy_to(s) for s in self.ensemble.servers]
        self.renew_client()
        # Worker 0 reaches the servers through proxies; workers 1..3 are attached each to ONE server, so
        # contenders stay on a server that a partition cuts off; the rest talk to the whole ensemble.
        n_servers = len(self.ensemble.servers)
        for i in range(self.n_workers):
            self.spawn(proxied=i == 0, pin=i - 1 if 1 <= i <= n_servers else None)
        self.wait_sessions(timeout=60)
        self.wait_progress(time.monotonic(), timeout=60)

    def renew_client(self, started: KazooClient | None = None) -> None:
        """The controller's own session, new: after a wipe the servers refuse the old one (it saw later zxids).
        ``started``: a client already started (``new_client``), to take in its place."""
        old, self.zk = self.zk, started or self.new_client()
        if started is None:
            self.zk.start(timeout=30)
        if old is not None:
            try:
                old.stop()
                old.close()
            except Exception:
                pass

    def new_client(self, max_delay: float = 0.5) -> KazooClient:
        return KazooClient(
            hosts=self.ensemble.hosts,
            timeout=4.0,
            connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": max_delay},
            auth_data=project_auth(),  # the workers' identity: the final sweep deletes their lock nodes
        )

    def proxy_to(self, server) -> TcpProxy:
        """A client proxy to ``server``, on a port that is none of the ensemble's: a follower binds its quorum
        port only once it is elected, and a proxy listening there would make that election fail."""
        taken = {port for s in self.ensemble.servers for port in s.ports().values()}
        proxy = TcpProxy("127.0.0.1", server.port)  # it stays off them itself (zklocks.testing.ports)
        if proxy.port in taken:
            proxy.stop()
            raise RuntimeError(f"a proxy got port {proxy.port}, one of the ensemble's {sorted(taken)}")
        return proxy.start()

    def spawn(self, proxied: bool, pin: int | None = None) -> Worker:
        hosts = ",".join(p.hosts for p in self.proxies) if proxied else self.ensemble.hosts
        tag = "proxied" if proxied else "direct"
        if pin is not None:
            hosts, tag = self.ensemble.servers[pin].hosts, f"server{pin}"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env.pop("DJANGO_SETTINGS_MODULE", None)
        out = open(self.dir / f"{tag}-{len(self.workers)}.log", "ab")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.chaos.worker",
                "--hosts",
                hosts,
                "--namespace",
                self.namespace,
                "--names",
                ",".join(self.names),
                "--threads",
                str(self.threads),
                "--session-timeout",
                str(self.session_timeout),
                "--connect-timeout",
                str(self.connect_timeout),
                "--tick-time",
                str(self.tick),
                "--dir",
                str(self.dir),
                "--tag",
                tag,
                *(["--work"] if self.work else []),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        worker = Worker(proc, proxied, pin)
        self.workers.append(worker)
        return worker

    def live_workers(self) -> list[Worker]:
        return [w for w in self.workers if w.killed_at is None]

    def cleanup(self) -> None:
        for w in self.workers:
            if w.proc.poll() is None:
                try:
                    os.killpg(w.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                w.proc.wait(10)
        for p in self.proxies:
            p.stop()
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception:
                pass

    # -- observation --

    def poll_records(self) -> None:
        for path in self.dir.glob("*.jsonl"):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            cut = data.rfind(b"\n") + 1
            self._offsets[path] = offset + cut
            for line in data[:cut].splitlines():
                rec = json.loads(line)
                if rec["ev"] == "begin":
                    self.latest[rec["name"]] = max(self.latest[rec["name"]], rec["start"])
                elif rec["ev"] == "session":
                    self.sessions[rec["sid"]] = rec["pw"]
                elif rec["ev"] == "long":
                    self.long_holds[rec["id"]] = dict(rec)
                elif rec["ev"] == "end" and rec["id"] in self.long_holds:
                    self.long_holds[rec["id"]]["end"] = rec

    def wait_progress(self, after: float, timeout: float | None = None) -> float:
        """Wait until every lock was acquired after ``after``; the checker computes the exact stall later."""
        limit = time.monotonic() + (timeout or self.bound + 10.0)
        while time.monotonic() < limit:
            self.poll_records()
            if all(t > after for t in self.latest.values()):
                return time.monotonic() - after
            time.sleep(0.02)
        self.log(f"  no progress within {time.monotonic() - after:.1f}s")
        return float("inf")

    def live_sessions(self) -> int:
        """Distinct client sessions connected across the ensemble, the controller's own not counted."""
        return len(self.session_ids())

    def session_ids(self) -> set[int]:
        sids = set()
        for s in self.ensemble.servers:
            sids.update(int(m, 16) for m in _SID.findall(four_letter(s.port, "cons", timeout=1.0)))
        sids.discard(0)
        sids.discard(self.zk.client_id[0] if self.zk.client_id else 0)
        return sids

    def wait_sessions(self, timeout: float = 20.0) -> int:
        need = max(MIN_SESSIONS, int(0.9 * self.n_workers * self.threads))
        deadline = time.monotonic() + timeout
        count = self.live_sessions()
        while count < need and time.monotonic() < deadline:
            time.sleep(0.1)
            count = self.live_sessions()
        return count

    def zk_call(self, fn, *args, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                return fn(*args)
            except NoNodeError:
                raise
            except KazooException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def server_of_session(self, sid: int):
        for s in self.ensemble.servers:
            if f"sid=0x{sid:x}," in four_letter(s.port, "cons", timeout=1.0):
                return s
        return None

    # -- faults --

    def wait_ensemble(self, timeout: float = 60.0) -> None:
        """Every server of the ensemble runs and serves on its own ports, one leading. Each fault assumes it: with
        a server gone, killing one more leaves no quorum, and the run would report a stall that is no lock's."""
        try:
            self.ensemble.wait_ready(timeout)
        except ZkStartError as exc:
            raise RuntimeError(f"the ensemble is not whole before a fault: {exc}") from None

    def inject(self, kind: str) -> None:
        self.wait_ensemble()
        sessions = self.wait_sessions()
        self.session_samples.append(sessions)
        fault = getattr(self, "fault_" + kind.replace("-", "_"))()
        fault.detail["sessions"] = sessions
        self.faults.append(fault)
        stall = self.wait_progress(fault.ended)
        if "long_hold" in fault.detail:
            fault.detail["holder"] = self.long_hold_outcome(fault.detail["long_hold"])
        self.log(f"  {kind}: {fault.detail} -> progress after ~{stall:.2f}s")
        self.repair()

    def repair(self) -> None:
        """Bring every server back and let the clients settle before the next fault."""
        if self.ensemble.links is not None:
            self.ensemble.heal_all()
        for s in self.ensemble.servers:
            if s.proc is None or s.proc.poll() is not None:
                s.proc = None
                s.start()
        self.ensemble.wait_quorum()
        time.sleep(self.settle)  # steady contention between faults

    def _kill(self, server, kind: str, *, until_quorum: bool = False) -> Fault:
        """kill -9 ``server``; ``until_quorum``: the fault ends once the others have a leader again."""
        started = time.monotonic()
        server.kill()
        if until_quorum:
            self.ensemble.wait_quorum(timeout=30)
        return Fault(kind, started, time.monotonic(), {"server": server.myid})

    def fault_kill_leader(self) -> Fault:
        """kill -9 the leader. Nothing commits until the others have elected a new one (ZooKeeper's election, not
        the clients'), so the fault ends, and the progress owed after it counts, from then."""
        return self._kill(self.ensemble.leader(), "kill-leader", until_quorum=True)

    def fault_kill_follower(self) -> Fault:
        return self._kill(self.rng.choice(self.ensemble.followers()), "kill-follower")

    def fault_sigstop(self) -> Fault:
        """Freeze a server past the session timeout, then SIGCONT it. Target: the server of a holder that
        holds longer than the session timeout (so its lease must run out, unless it reconnects elsewhere in
        time), or the leader, or a follower."""
        target = self.sigstop_targets[self.sigstops % len(self.sigstop_targets)]
        self.sigstops += 1
        server = None
        long_hold = None
        if target == "holder":
            long_hold = self.request_long_hold()
            server = self.server_of_session(long_hold["sid"])
            if server is None:
                target = "leader"
        if server is None and target == "follower":
            server = self.rng.choice(self.ensemble.followers())
        if server is None:
            target, server = "leader", self.ensemble.leader()
        was = server.mode()
        started = time.monotonic()
        server.pause()
        time.sleep(self.session_timeout + 1.0)
        server.resume()
        ended = time.monotonic()
        detail = {"server": server.myid, "target": target, "mode": was, "paused": round(ended - started, 2)}
        if long_hold is not None:
            detail["long_hold"] = long_hold["id"]
        return Fault("sigstop", started, ended, detail)

    def request_long_hold(self, timeout: float = 30.0, pid: int | None = None) -> dict:
        """Ask the next thread that acquires (in process ``pid``, if given) to hold past the session timeout; its
        {"id", "sid", "name"}."""
        known = set(self.long_holds)
        (self.dir / ("want-long-hold" if pid is None else f"want-long-hold-{pid}")).touch()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll_records()
            new = [h for i, h in self.long_holds.items() if i not in known]
            if new:
                return new[0]
            time.sleep(0.005)
        raise RuntimeError("no thread took the long hold")

    def long_hold_outcome(self, hold_id: str, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while "end" not in self.long_holds[hold_id] and time.monotonic() < deadline:
            time.sleep(0.05)
            self.poll_records()
        end = self.long_holds[hold_id].get("end")
        if end is None:
            return "unknown"
        if end["valid"]:
            return "kept it"
        if end.get("resumed"):
            return "kept it (suspended for a while: the holder stopped, and its hold came back)"
        return f"gave it up ({end['reason']})"

    def fault_restart_ensemble(self) -> Fault:
        started = time.monotonic()
        self.ensemble.restart()
        self.ensemble.wait_quorum()
        ended = time.monotonic()
        return Fault("restart-ensemble", started, ended, {"down": round(ended - started, 2)})

    def fault_wipe_ensemble(self) -> Fault:
        """kill -9 every server, delete their data (snapshots and transaction logs; myid and the config stay) and
        start them again on the same ports: the ensemble comes back empty, as after a restore that lost the data.
        Its zxids, and the tokens, start over (an epoch for the checker); each live worker process must hold a
        lock again within ``recovery_bound`` of the ensemble's return.

        Half of the processes are idle through the outage (paused: their sessions open, with no hold and no
        waiter) and resume once the ensemble is back: a session with waiters is closed when its lease runs out,
        an idle one has nothing that would close it, and the servers refuse it for good (it has seen later
        zxids than theirs)."""
        live = self.live_workers()
        idle = [w.proc.pid for w in live[::2]]
        for pid in idle:
            (self.dir / f"pause-{pid}").touch()
        deadline = time.monotonic() + 20
        while not all((self.dir / f"paused-{pid}").exists() for pid in idle):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the processes {idle} did not pause")
            time.sleep(0.05)
        started = time.monotonic()
        self.ensemble.restart(wipe=True)
        self.ensemble.wait_quorum()
        ended = time.monotonic()
        for pid in idle:
            (self.dir / f"pause-{pid}").unlink()
        epoch = min(s.spawned_at for s in self.ensemble.servers if s.spawned_at is not None)
        self.renew_client()
        return Fault(
            "wipe-ensemble",
            started,
            ended,
            {"down": round(ended - started, 2), "processes": len(live), "idle": idle},
            bound=self.recovery_bound,
            epoch=epoch,
            recover=tuple(w.proc.pid for w in live),
        )

    def fault_idle_blip(self) -> Fault:
        """The proxied process's links go silent for half the session timeout while one of its threads holds a
        lock with nothing else on that session (each thread has a session of its own): ZooKeeper keeps the
        session, so the holder must keep its hold ("kept it", asserted by the test)."""
        proxied = next(w for w in self.live_workers() if w.proxied)
        hold = self.request_long_hold(pid=proxied.proc.pid)
        time.sleep(0.3)  # into the hold: the blip falls inside it, which lasts the session timeout + 1.5 s
        started = time.monotonic()
        for proxy in self.proxies:
            proxy.partition(refuse_new=False)
        time.sleep(self.session_timeout / 2)
        for proxy in self.proxies:
            proxy.heal()
        ended = time.monotonic()
        return Fault(
            "idle-blip", started, ended, {"blip": round(ended - started, 2), "long_hold": hold["id"], "keep": True}
        )

    def fault_outage_release(self) -> Fault:
        """Every server stops; the threads that held release during the outage (their deletes cannot be sent),
        and after a session timeout without a connection each process gives its sessions up. The servers come
        back with their data, and with it those sessions: each lock node left by a session from before the
        outage is a ghost of a released hold. ``ghosts`` is how long after the ensemble's return the last one
        went (the closers of the given-up sessions remove them; bound 1 s, asserted by the test)."""
        self.poll_records()
        before = self.session_ids() | set(self.sessions)
        started = time.monotonic()
        for server in self.ensemble.servers:
            server.kill()
            server.proc = None
        time.sleep(self.session_timeout + 1.0)
        # The observer connects while the servers start, as the closers do: the time its own connect takes after
        # the ensemble's return is not counted against the closers (it is reported as "observer").
        observer = self.new_client(max_delay=0.1)
        connecting = threading.Thread(target=observer.start, kwargs={"timeout": 60}, daemon=True)
        connecting.start()
        self.ensemble.start()
        ended = time.monotonic()
        connecting.join(60)
        ready = time.monotonic() - ended
        self.renew_client(observer if observer.connected else None)
        ghosts = self._ghosts_gone(before, ended)
        detail = {"down": round(ended - started, 2), "ghosts": None if ghosts is None else round(ghosts, 3)}
        return Fault("outage-release", started, ended, {**detail, "observer": round(ready, 3)})

    def _ghosts_gone(self, before: set[int], back: float, timeout: float = 15.0) -> float | None:
        """Seconds from ``back`` until no lock node has an owner among the sessions ``before`` (None: not within
        ``timeout``)."""
        parents = [f"{self.namespace}/{encode_name(n)}" for n in self.names]
        while time.monotonic() < back + timeout:
            owners = set()
            for path in self._contenders(parents):
                try:
                    stat = self.zk.exists(path)
                except KazooException:
                    stat = None
                if stat is not None:
                    owners.add(stat.ephemeralOwner)
            if not owners & before:
                return time.monotonic() - back
            time.sleep(0.02)
        return None

    def fault_expire_holder(self) -> Fault:
        """Expire, for real, the session of a thread that is in the middle of a hold."""
        for _ in range(5):
            victim = self.request_long_hold()
            sid = victim["sid"]
            started = time.monotonic()
            try:
                expire_session(self.ensemble.hosts, (sid, bytes.fromhex(self.sessions[sid])))
            except RuntimeError:
                continue  # that session ended on its own meanwhile: ask for another holder
            ended = time.monotonic()
            self.revocations.append({"sid": sid, "at": started, "done": ended, "hold": victim["id"]})
            return Fault(
                "expire-holder", started, ended, {"lock": victim["name"], "sid": hex(sid), "hold": victim["id"]}
            )
        raise RuntimeError("could not expire a holder's session")

    def fault_kill_holder(self) -> Fault:
        """kill -9 the process of a thread that is in the middle of a hold; a fresh worker takes its place."""
        victim_hold = self.request_long_hold()
        victim = next(w for w in self.live_workers() if w.proc.pid == victim_hold["pid"])
        started = time.monotonic()
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(10)
        ended = time.monotonic()
        victim.killed_at = ended
        self.kills[victim.proc.pid] = ended
        # Its node outlives it until the session expires: it died holding the lock.
        held = self.zk_call(self.zk.exists, victim_hold["node"]) is not None
        self.spawn(proxied=victim.proxied, pin=victim.pin)
        return Fault(
            "kill-holder", started, ended, {"lock": victim_hold["name"], "pid": victim.proc.pid, "died_holding": held}
        )

    def fault_drop_create(self) -> Fault:
        started = time.monotonic()
        for p in self.proxies:
            p.drop_after_next_request()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(p.dropped.is_set() for p in self.proxies):
            time.sleep(0.005)
        ended = time.monotonic()
        for p in self.proxies:
            p.cancel_drop()
        dropped = sum(p.dropped.is_set() for p in self.proxies)
        if not dropped:
            raise RuntimeError("no create went through the proxies")
        return Fault("drop-create", started, ended, {"dropped": dropped})

    # -- partitions between servers (ZkEnsemble(server_links=True)) --

    def partition_time(self) -> float:
        """How long a partition lasts: the majority's followers notice a silent leader after syncLimit ticks
        (ZkServer.write_config), elect a new one, and the sessions cut off with the minority expire."""
        return self.session_timeout + 10 * self.tick + 1.0

    def _holder_follower(self) -> tuple[int, int, dict]:
        """A long hold, and a follower to cut: the holder's own server if it is a follower."""
        hold = self.request_long_hold()
        leader = self.ensemble.leader()
        server = self.server_of_session(hold["sid"])
        if server is None or server is leader:
            server = self.rng.choice(self.ensemble.followers())
        return self.ensemble.index(server), self.ensemble.index(leader), hold

    def fault_cut_follower(self) -> Fault:
        """Cut a follower (the server of a holder in a long hold, if a follower) off from the leader; its
        clients keep their connections to it. Healed after partition_time()."""
        f, leader, hold = self._holder_follower()
        started = time.monotonic()
        self.ensemble.cut(f, leader)
        time.sleep(self.partition_time())
        self.ensemble.heal(f, leader)
        ended = time.monotonic()
        return Fault("cut-follower", started, ended, {"server": f + 1, "leader": leader + 1, "long_hold": hold["id"]})

    def fault_isolate_leader(self) -> Fault:
        """Cut the leader off from both followers; the followers elect a new leader."""
        hold = self.request_long_hold()
        leader = self.ensemble.index(self.ensemble.leader())
        started = time.monotonic()
        self.ensemble.isolate(leader)
        time.sleep(self.partition_time())
        self.ensemble.heal_all()
        ended = time.monotonic()
        return Fault("isolate-leader", started, ended, {"server": leader + 1, "long_hold": hold["id"]})

    def fault_split(self) -> Fault:
        """A minority (a follower, the long holder's if it is one) split from the majority (leader + the other)."""
        f, leader, hold = self._holder_follower()
        majority = [i for i in range(len(self.ensemble.servers)) if i != f]
        started = time.monotonic()
        self.ensemble.split([[f], majority])
        time.sleep(self.partition_time())
        self.ensemble.heal_all()
        ended = time.monotonic()
        return Fault(
            "split",
            started,
            ended,
            {"minority": [f + 1], "majority": [i + 1 for i in majority], "long_hold": hold["id"]},
        )

    def fault_flap_link(self) -> Fault:
        """The link between a follower (the long holder's, if a follower) and the leader goes down and up four
        times within one session timeout, black-holed and reset in turn."""
        f, leader, hold = self._holder_follower()
        down, up = 0.15 * self.session_timeout, 0.1 * self.session_timeout
        started = time.monotonic()
        for k in range(4):
            self.ensemble.cut(f, leader, mode="reset" if k % 2 else "blackhole")
            time.sleep(down)
            self.ensemble.heal(f, leader)
            time.sleep(up)
        ended = time.monotonic()
        return Fault("flap-link", started, ended, {"server": f + 1, "leader": leader + 1, "long_hold": hold["id"]})

    # -- the run --

    def run(self, plan: list[str]) -> None:
        for kind in plan:
            self.inject(kind)

    def finish(self) -> None:
        """Quiet period, stop contending with sessions still open (orphan check 1), exit cleanly, reap, and
        check that nothing is left below the namespace (orphan check 2)."""
        # Sessions ended by a fault (killed processes, sessions given up while cut off) expire within this.
        time.sleep(self.session_timeout + self.tick + 1.0)
        live = self.live_workers()
        (self.dir / "stop").touch()
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and not all((self.dir / f"idle-{w.proc.pid}").exists() for w in live):
            time.sleep(0.1)
        # Every contender has returned and released: a node of a live session now belongs to no handle.
        parents = [f"{self.namespace}/{encode_name(n)}" for n in self.names]
        deadline = time.monotonic() + 3.0
        left = self._contenders(parents)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self._contenders(parents)
        self.orphans = list(left)
        (self.dir / "exit").touch()
        for w in live:
            try:
                self.exit_codes.append(w.proc.wait(30))
            except subprocess.TimeoutExpired:
                self.exit_codes.append(None)
        self.poll_records()
        self.zk_call(sweep, self.zk, self.namespace)
        self.orphans += self.zk_call(tree, self.zk, self.namespace)

    def _contenders(self, parents: list[str]) -> list[str]:
        out = []
        for parent in parents:
            try:
                out += [f"{parent}/{c}" for c in self.zk_call(self.zk.get_children, parent)]
            except NoNodeError:
                pass
        return out

    def idle_counts(self) -> dict:
        total: dict[str, int] = {}
        for path in self.dir.glob("idle-*"):
            for k, v in json.loads(path.read_text()).items():
                total[k] = total.get(k, 0) + v
        return total

    def report(self) -> Report:
        report = check(read_events(self.dir), self.faults, self.kills, self.revocations, self.names, self.bound)
        report.orphans = len(self.orphans)
        report.min_sessions = min(self.session_samples) if self.session_samples else None
        return report

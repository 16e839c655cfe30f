"""The contention workload and the fault schedule, run in forked worker processes; the holds they record.

A hold: acquire; write to the protected resource with the hold's token ("begin"); work; check the lock where the
system offers a check (a failed check abandons the hold); write again ("end"); release. The resource is a shared
file under ``flock``: each write is stamped with time.monotonic() (system-wide on Linux) under the file's lock, and
accepted unless its token is lower than the highest token written before it (the fence). A hold's work interval
runs from its first to its last write. Two holds whose intervals overlap are a double holder: without fencing,
counting every write; with fencing, counting only the writes the fence accepted.
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import random
import signal
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.compare.locks import FEATURES, open_lock

# Workers come from a fork server, not a fork of this process: the parent runs several systems in threads (--jobs)
# and its proxies in more, and a child forked while one of them held a lock (stderr's, a module's import lock)
# waited on it for ever before it ever reached its store.
CTX = multiprocessing.get_context("forkserver")

# Set when the run stops early (Ctrl-C, SIGTERM, another system failed): each wait below then raises Stopped, so
# that the system's thread stops its workers and its stores at once instead of finishing its schedule.
stopping = threading.Event()


class Stopped(Exception):
    """The run is stopping early."""


def check_stopping() -> None:
    if stopping.is_set():
        raise Stopped


def _sleep(seconds: float) -> None:
    if stopping.wait(seconds):
        raise Stopped


@dataclass
class Config:
    ttl: float  # lease, TTL or session timeout of every system, seconds
    work: float = 0.01  # the work before the check, in an ordinary hold
    write_delay: float = 0.03  # from the check to the end write landing (the write's own round trip)
    long_job: float = 0.0  # the job a fault lands in: set by the schedule, longer than the fault plus one TTL
    margin: float = 3.0  # how much longer than the fault plus one TTL the long job lasts
    settle: float = 1.0  # the quiet time between two faults
    acquire_timeout: float = 2.0


class Fence:
    """The protected resource: a file holding the highest token written; writes with a lower token are refused."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def write(self, token: int | None) -> list:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            at = time.monotonic()
            high = int.from_bytes(os.pread(self.fd, 8, 0).ljust(8, b"\0"), "big")
            ok = token is None or token >= high
            if ok and token is not None and token > high:
                os.pwrite(self.fd, token.to_bytes(8, "big"), 0)
            return [at, ok]
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)


class Shared:
    """What the parent and the workers share: the stop flag, each worker's phase, the long-job hand-over."""

    def __init__(self, n: int) -> None:
        self.stop = CTX.Event()
        self.go = CTX.Event()
        self.ready = CTX.Semaphore(0)
        self.phase = CTX.Array("i", n, lock=False)  # 0 idle, 1 working, 2 checked and writing
        self.long_request = CTX.Value("i", 0)
        self.long_holder = CTX.Value("i", -1, lock=False)


def _hold(lock, cfg: Config, me: int, shared: Shared, fence: Fence, has_check: bool) -> dict:
    acquired = time.monotonic()
    long = False
    with shared.long_request.get_lock():
        if shared.long_request.value:
            shared.long_request.value, long = 0, True
            shared.long_holder.value = me
    shared.phase[me] = 1
    token = lock.token()
    writes = [fence.write(token)]
    lost = False
    end = acquired + (cfg.long_job if long else cfg.work)
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(0.1, left))
        if long:  # a long job renews where the holder must, and checks between its steps
            try:
                lock.renew()
            except Exception:
                pass
    if has_check:
        try:
            lost = not lock.check()
        except Exception:
            lost = True
    if not lost:
        shared.phase[me] = 2
        time.sleep(cfg.write_delay)
        writes.append(fence.write(token))
    shared.phase[me] = 0
    if long:
        shared.long_holder.value = -1
    try:
        lock.release()
    except Exception:
        pass
    return {"w": me, "acq": acquired, "token": token, "writes": writes, "lost": lost, "long": long}


def _faults_worker(system, addrs, cfg, me, shared, fence_path, out_path) -> None:
    lock = open_lock(system, addrs, cfg.ttl)
    fence, has_check = Fence(fence_path), FEATURES[system][0]
    shared.ready.release()
    shared.go.wait()
    with open(out_path, "a", buffering=1) as out:
        while not shared.stop.is_set():
            try:
                ok = lock.acquire(cfg.acquire_timeout)
            except Exception:
                time.sleep(0.05)
                continue
            if ok:
                out.write(json.dumps(_hold(lock, cfg, me, shared, fence, has_check)) + "\n")
    os._exit(0)  # no clean-up: a client may hang on a store that is down


def _handoff_worker(system, addrs, cfg, me, shared, out_path) -> None:
    lock = open_lock(system, addrs, cfg.ttl)
    shared.ready.release()
    shared.go.wait()
    n = 0
    while not shared.stop.is_set():
        try:
            if lock.acquire(cfg.acquire_timeout):
                lock.release()
                n += 1
        except Exception:
            time.sleep(0.05)
    Path(out_path).write_text(str(n))
    os._exit(0)


def _uncontended_worker(system, addrs, cfg, n, out_path) -> None:
    lock = open_lock(system, addrs, cfg.ttl)
    times = []
    for i in range(n + 20):
        started = time.perf_counter()
        if not lock.acquire(cfg.acquire_timeout):
            continue
        took = time.perf_counter() - started
        lock.release()
        if i >= 20:
            times.append(took * 1000)
    Path(out_path).write_text(json.dumps(times))
    os._exit(0)


def _start(target, args) -> multiprocessing.Process:
    check_stopping()
    proc = CTX.Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def _kill(procs) -> None:
    """kill -9 the workers (a paused one too) when a run stops early. Their events are left alone: setting one that a
    worker killed by a signal was waiting on blocks for ever (multiprocessing's Condition waits for every sleeper)."""
    for p in procs:
        p.kill()
    for p in procs:
        p.join(5)


def _reap(procs, timeout: float = 10.0) -> None:
    if stopping.is_set():
        timeout = min(timeout, 1.0)  # no figures wanted from them any more
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        p.join(max(0.1, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5)


def _wait_ready(shared: Shared, procs, timeout: float = 60.0) -> None:
    for _ in procs:
        deadline = time.monotonic() + timeout
        while not shared.ready.acquire(timeout=0.2):
            check_stopping()
            if any(p.exitcode is not None for p in procs):
                raise RuntimeError("a worker exited before it connected to its store (its error is above)")
            if time.monotonic() > deadline:
                raise RuntimeError("a worker did not connect to its store")


def uncontended(system: str, addrs: dict, cfg: Config, n: int, tmp: Path) -> tuple[float, float]:
    out = tmp / "uncontended.json"
    p = _start(_uncontended_worker, (system, addrs, cfg, n, out))
    try:
        deadline = time.monotonic() + 120
        while p.is_alive() and time.monotonic() < deadline:
            p.join(0.2)
            check_stopping()
    finally:
        _reap([p])
    if not out.exists():
        raise RuntimeError(f"the {system} worker wrote no timings (exit code {p.exitcode}; its error is above)")
    times = sorted(json.loads(out.read_text()))
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def handoffs(system: str, addrs: dict, cfg: Config, n: int, seconds: float, tmp: Path) -> float:
    shared = Shared(n)
    outs = [tmp / f"handoffs-{i}.txt" for i in range(n)]
    procs: list = []
    try:
        for i in range(n):
            procs.append(_start(_handoff_worker, (system, addrs, cfg, i, shared, outs[i])))
        _wait_ready(shared, procs)
        started = time.monotonic()
        shared.go.set()
        _sleep(seconds)
        shared.stop.set()
        elapsed = time.monotonic() - started
    except BaseException:
        _kill(procs)
        raise
    _reap(procs, 15)
    return sum(int(o.read_text()) for o in outs if o.exists()) / elapsed


FAULTS = ("pause", "pause-after-check", "partition", "kill")


def run_faults(system: str, worker_addrs: list, cfg: Config, rounds: int, fault_s: float, store, proxies, tmp: Path):
    """The contention workload under ``rounds`` of each fault; returns the holds and the faults (kind, time)."""
    n = len(worker_addrs)
    shared = Shared(n)
    fence_path = tmp / "fence"
    fence_path.write_bytes(b"")
    outs = [tmp / f"holds-{i}.jsonl" for i in range(n)]
    cfg.long_job = fault_s + cfg.ttl + cfg.margin  # the job outlasts the fault and one TTL: the lock can pass meanwhile
    procs: list = []
    faults = []
    try:
        for i in range(n):
            procs.append(_start(_faults_worker, (system, worker_addrs[i], cfg, i, shared, fence_path, outs[i])))
        _wait_ready(shared, procs)
        shared.go.set()
        _sleep(cfg.settle)
        for _ in range(rounds):
            for kind in FAULTS:
                faults.append(_inject(kind, shared, procs, cfg, fault_s, store, proxies))
                _sleep(cfg.settle)
        _sleep(cfg.settle)
        shared.stop.set()
        for proxy_set in proxies:
            for proxy in proxy_set:
                proxy.heal()
        _reap(procs, 3 * cfg.ttl + 10)
    except BaseException:
        _kill(procs)
        raise
    holds = []
    for o in outs:
        if o.exists():
            holds += [json.loads(line) for line in o.read_text().splitlines() if line.strip()]
    return holds, faults, time.monotonic()


def _wait_for(predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found is not None:
            return found
        check_stopping()
        time.sleep(0.0005)
    return None


def _inject(kind, shared: Shared, procs, cfg: Config, fault_s: float, store, proxies) -> dict:
    n = len(procs)
    if kind == "pause-after-check":
        # Any holder between its check and its write: a pause (GC, swap, a stopped VM) can land anywhere.
        target = _wait_for(lambda: next((i for i in range(n) if shared.phase[i] == 2), None), 30)
    else:
        shared.long_request.value = 1
        target = _wait_for(lambda: shared.long_holder.value if shared.long_holder.value >= 0 else None, 30)
        if target is not None:
            time.sleep(random.uniform(0.05, 0.3))
    if target is None:
        shared.long_request.value = 0
        return {"kind": kind, "at": None, "target": None}
    at = time.monotonic()
    if kind in ("pause", "pause-after-check"):
        os.kill(procs[target].pid, signal.SIGSTOP)
        _sleep(fault_s)  # stopping early, _kill ends the paused worker
        os.kill(procs[target].pid, signal.SIGCONT)
    elif kind == "partition":
        for proxy in proxies[target]:
            proxy.partition()
        _sleep(fault_s)
        for proxy in proxies[target]:
            proxy.heal()
    else:
        store.kill()
        _sleep(min(1.0, fault_s / 2))  # a store left down is stopped all the same
        store.restart()
    if kind != "pause-after-check":  # let the long job end (or be abandoned) before the next fault
        _wait_for(lambda: True if shared.long_holder.value < 0 else None, cfg.long_job + 10)
    return {"kind": kind, "at": at, "target": target, "took": time.monotonic() - at}


def _intervals(holds: list, fenced: bool) -> list:
    spans = []
    for h in holds:
        times = [t for t, ok in h["writes"] if ok or not fenced]
        if times:
            spans.append((min(times), max(times)))
    return sorted(spans)


def double_holders(holds: list, fenced: bool) -> list:
    """The holds that began working while an earlier hold was still working (each counted once): their start times."""
    found, busy_until = [], float("-inf")
    for start, end in _intervals(holds, fenced):
        if start < busy_until:
            found.append(start)
        busy_until = max(busy_until, end)
    return found


def attribute(times: list, faults: list) -> dict:
    """The fault during whose window (injection to recovery, plus one second) each double holder began."""
    counts: dict[str, int] = {}
    for t in times:
        during = [f for f in faults if f["at"] is not None and f["at"] <= t <= f["at"] + f["took"] + 1.0]
        kind = during[-1]["kind"] if during else "no fault"
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def max_stall(holds: list, faults: list, ended: float) -> tuple[float, dict]:
    """The longest time from a fault to the next acquisition by any process, and each fault kind's longest."""
    starts = sorted(h["acq"] for h in holds)
    per_kind: dict[str, float] = {}
    for f in faults:
        if f["at"] is None:
            continue
        stall = next((s for s in starts if s > f["at"]), ended) - f["at"]
        per_kind[f["kind"]] = max(per_kind.get(f["kind"], 0.0), stall)
    return max(per_kind.values(), default=0.0), per_kind

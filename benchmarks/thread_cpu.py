"""python -m benchmarks.thread_cpu — where a contended handoff's client CPU goes, thread by thread.

    python -m benchmarks.thread_cpu [--processes 8] [--seconds 4] [--kinds zklocks,kazoo,floor]

N processes hand one lock to each other (as ``make bench``'s handoffs), each for ``--seconds``; every process
reads its threads' CPU time from ``/proc/self/task/*/stat`` before and after. It prints, per kind, the handoffs
per second and the CPU microseconds per handoff of each thread: the calling thread ("main"), kazoo's connection
thread ("zk_loop") and its callback threads. Starts its own ZooKeeper (forceSync on) and stops it at the end.
Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
import time
from collections import Counter

from benchmarks import workloads
from benchmarks.servers import exit_on_sigterm, start_zookeeper


def thread_cpu() -> Counter:
    """CPU seconds of each thread of this process, by thread name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: Counter = Counter()
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        name = names.get(int(tid), "other")
        name = "main" if name == "MainThread" else name.split(" (")[-1].rstrip(")")  # "Thread-3 (zk_loop)"
        out[name] += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return out


def _process(kind: str, hosts: str, name: str, seconds: float, results) -> None:
    workloads.configure_django(hosts)
    cycle = workloads.handoff_cycle(kind, hosts, name)
    cycle()
    time.sleep(1.0)  # every process has enqueued once
    before, n = thread_cpu(), 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        cycle()
        n += 1
    after = thread_cpu()
    results.put((n, {k: after[k] - before.get(k, 0.0) for k in after}))


def measure(kind: str, hosts: str, processes: int, seconds: float) -> dict:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    name = f"bench:thread-cpu:{kind}"
    procs = [ctx.Process(target=_process, args=(kind, hosts, name, seconds, results)) for _ in range(processes)]
    for p in procs:
        p.start()
    outs = [results.get(timeout=120 + seconds) for _ in procs]
    for p in procs:
        p.join(30)
    handoffs = sum(n for n, _ in outs)
    cpu: Counter = Counter()
    for _, per_thread in outs:
        cpu.update(per_thread)
    return {
        "handoffs_per_s": handoffs / seconds,
        "cpu_us_per_handoff": {k: round(v / handoffs * 1e6) for k, v in cpu.most_common() if v > 0},
        "total_us_per_handoff": round(sum(cpu.values()) / handoffs * 1e6),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.thread_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=int, default=8)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--kinds", default="zklocks,kazoo,floor")
    args = p.parse_args(argv)
    exit_on_sigterm()
    zk = start_zookeeper()
    try:
        workloads.open_namespace(zk.hosts)
        for kind in args.kinds.split(","):
            r = measure(kind, zk.hosts, args.processes, args.seconds)
            threads = ", ".join(f"{k} {v}" for k, v in r["cpu_us_per_handoff"].items())
            print(
                f"{kind:8s} {r['handoffs_per_s']:6.0f} handoffs/s   client CPU per handoff: "
                f"{r['total_us_per_handoff']} us ({threads})",
                flush=True,
            )
    finally:
        zk.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

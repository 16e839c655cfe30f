"""python -m benchmarks.view_cycle — the client CPU of the demo view's lock, thread by thread, against its floor.

    python -m benchmarks.view_cycle [--cycles 3000] [--rounds 2] [--open]

In one process, on its own ZooKeeper (benchmarks.servers: forceSync on, the JVM's defaults): the demo view's lock
cycle (``with zk_lock(name) as lock: lock.ensure_held()``) against the floor with the same check (raw kazoo on
zklocks' I/O handler: a create, a pipelined ``sync`` + ``exists`` of the node, a delete), in alternating rounds.
For each it prints the wall time and the CPU microseconds per cycle of each thread: the calling thread ("main"),
kazoo's connection thread ("zk_loop") and its callback thread. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks.servers import exit_on_sigterm, start_zookeeper
from benchmarks.thread_cpu import thread_cpu
from benchmarks.workloads import configure_django, floor_client


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.view_cycle", description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--open", action="store_true", help='an open alias (AUTH="open") instead of the default guarded one')
    args = p.parse_args(argv)
    exit_on_sigterm()
    if args.open:
        os.environ["ZKLOCKS_BENCH_OPEN"] = "1"
    zk = start_zookeeper()
    try:
        configure_django(zk.hosts)
        from zklocks import lock_path, zk_lock

        floor = floor_client(zk.hosts, "default")
        node = lock_path("bench:view-cycle-floor") + "/n"
        floor.ensure_path(node.rsplit("/", 1)[0])

        def zklocks_cycle() -> None:
            with zk_lock("bench:view-cycle") as lock:
                lock.ensure_held()

        def floor_cycle() -> None:
            floor.create(node, ephemeral=True)
            synced, present = floor.sync_async(node), floor.exists_async(node)
            synced.get()
            present.get()
            floor.delete(node)

        print(f"{args.cycles} cycles per row{', AUTH' if args.auth else ''}; CPU µs per cycle by thread")
        for round_ in range(args.rounds):
            for kind, cycle in (("zklocks", zklocks_cycle), ("floor", floor_cycle)):
                for _ in range(200):
                    cycle()
                before, started = thread_cpu(), time.perf_counter()
                for _ in range(args.cycles):
                    cycle()
                wall = (time.perf_counter() - started) / args.cycles * 1e6
                after = thread_cpu()
                cpu = {name: (after[name] - before.get(name, 0.0)) / args.cycles * 1e6 for name in after}
                threads = ", ".join(f"{name} {us:.0f}" for name, us in sorted(cpu.items()) if us >= 1)
                print(f"round {round_ + 1} {kind:8} wall {wall:5.0f} µs; total CPU {sum(cpu.values()):5.0f}: {threads}")
        floor.stop()
        floor.close()
    finally:
        zk.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

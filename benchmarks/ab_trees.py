"""python -m benchmarks.ab_trees — two checkouts of zklocks, measured in turns on one ZooKeeper.

    python -m benchmarks.ab_trees BASE OTHER [--rounds 6] [--figures handoffs4,handoffs8,cpu,waiters]

BASE and OTHER are directories holding a ``zklocks`` package (two git worktrees, say). Each figure is taken in one
subprocess per checkout, in alternating order round after round, against one server started here (forceSync on),
so that both see the same machine load; it prints each round and then, per figure, the medians and the median of
the paired ratios OTHER ÷ BASE. On a shared machine single rounds vary widely: read the paired median, and the
figures that do not depend on load (requests, packets and watches per handoff).

Figures: ``handoffs4`` / ``handoffs8`` (contended handoffs/s among 4 / 8 processes, 3 s each), ``cpu`` (client
CPU ms per uncontended acquire+release, all threads, over 2,000 cycles), ``requests`` (server requests per
uncontended cycle), ``waiters`` (10 waiters behind one holder: packets, writes and watches per handoff),
``coroutines`` (2,000 coroutines of one process on one lock: handoffs/s as the queue drains, as in
``benchmarks.async_waiters``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from zklocks.testing.runtime import stop_on_signals

from .servers import start_zookeeper

CODE = """
import json, sys, time
from benchmarks.workloads import configure_django, handoffs, many_waiters, requests_per_cycle
hosts, port, figure = sys.argv[1], int(sys.argv[2]), sys.argv[3]
configure_django(hosts)
from zklocks import zk_lock
if figure.startswith("handoffs"):
    print(json.dumps({"per_s": handoffs("zklocks", hosts, int(figure[len("handoffs"):]), 3.0)}))
elif figure == "cpu":
    lock = zk_lock("bench:ab:cpu")
    for _ in range(200):
        lock.acquire(); lock.release()
    cpu, n = time.process_time(), 2000
    for _ in range(n):
        lock.acquire(); lock.release()
    print(json.dumps({"ms": (time.process_time() - cpu) * 1000 / n}))
elif figure == "coroutines":
    import asyncio
    from benchmarks.async_waiters import _crowd
    print(json.dumps({"per_s": asyncio.run(_crowd(port, 2000, 1, "ab", trace=False))["handoffs_per_s"]}))
elif figure == "requests":
    print(json.dumps({"per_cycle": requests_per_cycle(hosts, port, 500)["zklocks"]["requests"]}))
else:
    r = many_waiters(hosts, port, 10)
    print(json.dumps({k: r[k] for k in ("packets_per_handoff", "writes_per_handoff", "watches_per_release")}))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ab_trees", description=__doc__)
    p.add_argument("base", type=Path)
    p.add_argument("other", type=Path)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--figures", default="handoffs4,handoffs8,cpu,requests,waiters")
    args = p.parse_args(argv)
    stop_on_signals()  # SIGTERM too runs the clean-up that stops the servers
    trees = {"base": args.base.resolve(), "other": args.other.resolve()}
    for tree in trees.values():
        if not (tree / "zklocks" / "__init__.py").exists():
            p.error(f"{tree} holds no zklocks package")
    figures = args.figures.split(",")
    out: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
    zk = start_zookeeper()
    try:
        for rnd in range(args.rounds):
            order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
            for figure in figures:
                for tree in order:
                    run = subprocess.run(
                        [sys.executable, "-c", CODE, zk.hosts, str(zk.port), figure],
                        cwd=trees[tree],
                        capture_output=True,
                        text=True,
                        timeout=600,
                    )
                    if run.returncode:
                        raise SystemExit(f"{tree} {figure} failed:\n{run.stderr[-2000:]}")
                    values = json.loads(run.stdout.strip().splitlines()[-1])
                    for key, value in values.items():
                        out[tree].setdefault(f"{figure}:{key}", []).append(value)
                    print(rnd, tree, figure, values, flush=True)
    finally:
        zk.cleanup()
    for key, base in out["base"].items():
        other = out["other"][key]
        ratios = [b / a for a, b in zip(base, other, strict=True) if a]
        print(
            f"{key}: base median {statistics.median(base):.4g}, other median {statistics.median(other):.4g}, "
            f"paired ratio median {statistics.median(ratios):.3f} (range {min(ratios):.2f}–{max(ratios):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

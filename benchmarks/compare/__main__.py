"""python -m benchmarks.compare — zklocks against the locks users pick instead: speed and safety in one run.

Starts every store itself (Debian's zookeeper, redis-server, postgresql, pgbouncer, etcd-server) on free ports, in
its own process group, and stops it, also when a system fails (the others stop at once) and on Ctrl-C or SIGTERM.
For each system: an unmeasured warm-up (the same workload), uncontended acquire p50/p99, handoffs per second at 8
processes, then the same 8-process workload under one fault schedule (the holder paused past its TTL, paused between
its check and its write, cut off from its store by a TCP proxy, the store killed with -9 and restarted). Writes
``bench-results/compare.json`` (one object per system), ``compare.md`` (the table) and ``compare.png`` (the plot).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import ExitStack
from pathlib import Path

from benchmarks.compare import stores, workload
from benchmarks.compare.locks import FEATURES
from zklocks.testing.proxy import TcpProxy
from zklocks.testing.runtime import start_on, stopped_on_exit

SYSTEMS = ["zklocks", "kazoo", "redis-lock", "redlock", "pglock", "pglock-pgbouncer", "etcd"]


def start_stores(system: str, stack: ExitStack) -> tuple[dict, object, dict]:
    """(the direct addresses, the store the kill fault hits, the ports to proxy); every store it starts is stopped
    by ``stack``, also one whose start failed half-way."""
    if system in ("zklocks", "kazoo"):
        zk = start_on(stack, stores.ZooKeeper())
        return {"zk": zk.server.hosts}, zk, {"zk": zk.port}
    if system in ("redis-lock", "redlock"):
        servers = [start_on(stack, stores.Redis()) for _ in range(1 if system == "redis-lock" else 3)]
        return {"redis": [s.port for s in servers]}, servers[0], {"redis": [s.port for s in servers]}
    if system in ("pglock", "pglock-pgbouncer"):
        pg = start_on(stack, stores.Postgres())
        front = pg if system == "pglock" else start_on(stack, stores.PgBouncer(pg))
        return {"pg": front.port}, pg, {"pg": front.port}
    etcd = start_on(stack, stores.Etcd())
    return {"etcd": etcd.port}, etcd, {"etcd": etcd.port}


def proxied(ports: dict) -> tuple[dict, list]:
    """One worker's addresses, each through a TCP proxy of its own (the partition cuts only that worker off)."""
    addrs, proxies = {}, []
    for role, port in ports.items():
        if isinstance(port, list):
            ps = [TcpProxy("127.0.0.1", p).start() for p in port]
            addrs[role] = [p.port for p in ps]
            proxies += ps
        else:
            proxy = TcpProxy("127.0.0.1", port).start()
            addrs[role] = proxy.hosts if role == "zk" else proxy.port
            proxies.append(proxy)
    return addrs, proxies


def run_system(system: str, args, log) -> dict:
    with ExitStack() as stack:  # unwound in reverse: the proxies, the stores, then their directory
        tmp = Path(tempfile.mkdtemp(prefix=f"zklocks-compare-{system}-"))
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        cfg = workload.Config(ttl=args.ttl, margin=args.margin, settle=args.settle)
        workload.check_stopping()
        direct, kill_target, ports = start_stores(system, stack)
        workload.check_stopping()  # the run may have stopped while the stores started
        if args.warm_up > 0:
            # Unmeasured, the same for every system: a fresh store answers its first requests slowly (ZooKeeper's
            # JVM compiles its code paths as they run), and a cold first measurement says more about that.
            log(f"{system}: warm-up ({args.warm_up:g} s of handoffs, {args.uncontended} acquires)")
            warm = tmp / "warm-up"  # its own files: a measured worker that died must not find the warm-up's
            warm.mkdir()
            workload.uncontended(system, direct, cfg, args.uncontended, warm)
            workload.handoffs(system, direct, cfg, args.processes, args.warm_up, warm)
        log(f"{system}: uncontended")
        p50, p99 = workload.uncontended(system, direct, cfg, args.uncontended, tmp)
        log(f"{system}: handoffs at {args.processes} processes")
        rate = workload.handoffs(system, direct, cfg, args.processes, args.handoff_seconds, tmp)
        worker_addrs: list = []
        all_proxies: list = []
        for _ in range(args.processes):
            addrs, proxies = proxied(ports)
            for proxy in proxies:
                stack.callback(proxy.stop)
            worker_addrs.append(addrs)
            all_proxies.append(proxies)
        log(f"{system}: faults ({args.rounds} rounds of {', '.join(workload.FAULTS)})")
        holds, faults, ended = workload.run_faults(
            system, worker_addrs, cfg, args.rounds, args.fault_seconds, kill_target, all_proxies, tmp
        )
    has_check, has_token = FEATURES[system]
    doubles = workload.double_holders(holds, fenced=False)
    fenced = workload.double_holders(holds, fenced=True) if has_token else None
    stall, stalls = workload.max_stall(holds, faults, ended)
    n = len(holds)
    return {
        "system": system,
        "p50_ms": round(p50, 3),
        "p99_ms": round(p99, 3),
        "handoffs_per_s": round(rate, 1),
        "holds": n,
        "double_holders": len(doubles),
        "double_holders_fenced": None if fenced is None else len(fenced),
        "max_stall_s": round(stall, 2),
        "double_holders_per_10k": round(len(doubles) * 10000 / max(1, n), 1),
        "double_holders_fenced_per_10k": None if fenced is None else round(len(fenced) * 10000 / max(1, n), 1),
        "double_holders_by_fault": workload.attribute(doubles, faults),
        "double_holders_fenced_by_fault": None if fenced is None else workload.attribute(fenced, faults),
        "max_stall_by_fault_s": {k: round(v, 2) for k, v in stalls.items()},
        "abandoned_holds": sum(1 for h in holds if h["lost"]),
        "faults_injected": sum(1 for f in faults if f["at"] is not None),
        "checks": has_check,
        "token": has_token,
    }


def _cell(value) -> str:
    return "—" if value is None else str(value)


def table(results: list) -> str:
    lines = [
        "| system | p50 ms | p99 ms | handoffs/s (8 procs) | holds | double holders (per 10k) "
        "| fenced (per 10k) | longest stall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        fenced = (
            "no token"
            if r["double_holders_fenced"] is None
            else f"{r['double_holders_fenced']} ({r['double_holders_fenced_per_10k']})"
        )
        lines.append(
            f"| {r['system']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['handoffs_per_s']:.0f} | {r['holds']} "
            f"| {r['double_holders']} ({r['double_holders_per_10k']}) | {fenced} | {r['max_stall_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: list, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [r["system"] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    axes[0].bar(names, [r["handoffs_per_s"] for r in results], color="tab:blue")
    axes[0].set_title("handoffs per second, 8 processes")
    width = 0.4
    xs = range(len(names))
    axes[1].bar([x - width / 2 for x in xs], [r["double_holders_per_10k"] for r in results], width, label="unfenced")
    axes[1].bar(
        [x + width / 2 for x in xs],
        [r["double_holders_fenced_per_10k"] or 0 for r in results],
        width,
        label="fenced (token systems only)",
    )
    axes[1].set_title("double holders per 10,000 holds under faults")
    axes[1].legend()
    axes[2].bar(names, [r["max_stall_s"] for r in results], color="tab:red")
    axes[2].set_title("longest stall after a fault (s)")
    for ax in axes:
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=35, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def run_all(one, systems: list[str], jobs: int, log) -> list[dict]:
    """``one(system)`` for each system, ``jobs`` at a time. The first failure, Ctrl-C or SIGTERM stops the run: the
    systems running stop their workers and stores at their next wait, those not begun never begin."""
    with stopped_on_exit() as stack:
        pool = ThreadPoolExecutor(max_workers=max(1, jobs))
        stack.callback(pool.shutdown, wait=True, cancel_futures=True)

        def stop_the_rest(kind, exc, tb) -> None:
            if kind is not None:
                log(f"stopping ({kind.__name__}): the systems still running stop their workers and stores")
                workload.stopping.set()

        stack.push(stop_the_rest)
        futures = [pool.submit(one, system) for system in systems]
        wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            if future.done() and future.exception() is not None:
                future.result()  # raises the first failure; the stack stops the others
        return [future.result() for future in futures]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--processes", type=int, default=8)
    p.add_argument("--ttl", type=float, default=2.0, help="lease, TTL or session timeout of every system (s)")
    p.add_argument("--fault-seconds", type=float, default=5.0, help="pause and partition length (> the TTL)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the fault schedule")
    p.add_argument("--uncontended", type=int, default=500, help="uncontended acquires timed")
    p.add_argument("--handoff-seconds", type=float, default=5.0)
    p.add_argument(
        "--warm-up", type=float, default=None, help="unmeasured handoffs before the figures (s; 0: none; 10, --quick 0)"
    )
    p.add_argument("--margin", type=float, default=2.0, help="a long job lasts the fault + the TTL + this (s)")
    p.add_argument("--settle", type=float, default=1.0, help="quiet time between faults (s)")
    p.add_argument("--jobs", type=int, default=1, help="systems run at once (1 for figures; --quick uses 4)")
    p.add_argument("--out", default="bench-results")
    p.add_argument("--quick", action="store_true", help="a short run (the smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.ttl, args.fault_seconds, args.rounds, args.uncontended, args.handoff_seconds = 1.0, 1.5, 1, 50, 1.0
        args.margin, args.settle, args.jobs = 0.5, 0.3, 4
    if args.warm_up is None:
        args.warm_up = 0.0 if args.quick else 10.0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    def one(system: str) -> dict:
        try:
            result = run_system(system, args, log)
        except workload.Stopped:
            raise
        except Exception as exc:
            log(f"{system}: failed ({type(exc).__name__}: {exc}); stopping the others")
            raise
        log(json.dumps(result))
        return result

    results = run_all(one, args.systems.split(","), args.jobs, log)
    (out / "compare.json").write_text(json.dumps(results, indent=2) + "\n")
    run = {
        "command": "python -m benchmarks.compare " + " ".join(argv if argv is not None else sys.argv[1:]),
        "args": vars(args),
        "seconds": round(time.monotonic() - started, 1),
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
    }
    (out / "compare-run.json").write_text(json.dumps(run, indent=2) + "\n")
    text = table(results)
    (out / "compare.md").write_text(text)
    print(text)
    if plot(results, out / "compare.png"):
        log(f"plot: {out / 'compare.png'}")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())

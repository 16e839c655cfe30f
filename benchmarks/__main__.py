"""python -m benchmarks — zklocks vs kazoo's Lock vs redis-py's Lock, measured in one run.

Starts its own ZooKeeper (default forceSync) and Redis on free ports, prints a table of medians and ratios,
and writes ``bench-results/bench.json`` and ``bench-results/bench.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from benchmarks import workloads
from benchmarks.servers import RedisServer, zookeeper
from zklocks.testing.runtime import start_on, stopped_on_exit


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.label = ""
        self.started = time.monotonic()

    def step(self, label: str | None = None, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        if label is not None:
            self.label = label
        self.draw()

    def set(self, label: str) -> None:
        self.label = label
        self.draw()

    def draw(self) -> None:
        width = 30
        filled = int(width * self.done / max(1, self.total))
        elapsed = time.monotonic() - self.started
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {elapsed:5.0f}s {self.label:<40.40}"
        )
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per comparison (median taken)")
    p.add_argument("--seconds", type=float, default=1.0, help="length of one measured round")
    p.add_argument("--contenders", default="1,2,4,8,16,32", help="process counts for contended handoffs")
    p.add_argument("--handoff-seconds", type=float, default=2.0)
    p.add_argument("--handoff-rounds", type=int, default=3, help="alternating rounds per process count (median)")
    p.add_argument("--waiters", default="1,10,100,1000", help="queue lengths for the scaling run")
    p.add_argument("--out", default="bench-results")
    p.add_argument("--no-redis", action="store_true")
    p.add_argument("--no-warm-up", dest="warm_up", action="store_false", help="measure the fresh server at once")
    p.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    p.add_argument(
        "--open",
        action="store_true",
        help='zklocks on an open alias (AUTH="open") instead of the default guarded one: a waiter lists the queue',
    )
    args = p.parse_args(argv)
    if args.open:
        os.environ["ZKLOCKS_BENCH_OPEN"] = "1"  # the contender processes configure Django from it too
    if args.quick:
        args.rounds, args.seconds, args.handoff_seconds, args.handoff_rounds = 2, 0.3, 1.0, 1
        args.contenders, args.waiters = "1,2,8", "1,10,50"
        args.warm_up = False
    contenders = [int(x) for x in args.contenders.split(",") if x]
    waiters = [int(x) for x in args.waiters.split(",") if x]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    progress = Progress(args.rounds * 2 + 1 + 3 * len(contenders) + len(waiters) + 1)
    # Unwound in reverse, however the run ends: the sessions, then Redis and ZooKeeper, then the progress bar.
    with stopped_on_exit() as stack:
        stack.callback(progress.close)
        zk = start_on(stack, zookeeper())
        redis_server = None if args.no_redis else start_on(stack, RedisServer())
        from zklocks.client.pools import close_all

        stack.callback(close_all)
        results: dict = {
            "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
            "server": {"zookeeper": "standalone, forceSync=yes (default)", "tickTime_ms": zk.tick_time},
            "args": vars(args),
        }
        workloads.configure_django(zk.hosts)
        workloads.open_namespace(zk.hosts)
        redis_port = None if redis_server is None else redis_server.port
        if args.warm_up:
            # Unmeasured, every kind alike: a fresh server answers its first requests slowly while its JVM
            # compiles them, and the first kind measured would pay for it (zklocks, in the first round).
            progress.set("warm-up (unmeasured)")
            workloads.uncontended(zk.hosts, redis_port, 2, args.seconds, lambda: None)
            for kind in ("zklocks", "kazoo", "floor"):
                workloads.handoffs(kind, zk.hosts, 4, args.handoff_seconds)
        progress.set("uncontended cycles")
        results["uncontended"] = workloads.uncontended(
            zk.hosts, redis_port, args.rounds, args.seconds, lambda: progress.step()
        )
        progress.set("failed try-locks")
        results["failed_trylock"] = workloads.failed_trylock(
            zk.hosts, redis_port, args.rounds, args.seconds, lambda: progress.step()
        )
        progress.set("requests per cycle")
        results["requests_per_cycle"] = workloads.requests_per_cycle(zk.hosts, zk.port, 500)
        progress.step()
        results["handoffs"] = {"zklocks": {}, "kazoo": {}, "floor": {}}
        for n in contenders:
            # Alternating rounds, median of each: the machine's load drifts between rounds, not within one.
            rounds: dict[str, list[float]] = {"zklocks": [], "kazoo": [], "floor": []}
            for _ in range(args.handoff_rounds):
                for kind in rounds:
                    progress.set(f"handoffs: {kind}, {n} processes")
                    rounds[kind].append(workloads.handoffs(kind, zk.hosts, n, args.handoff_seconds))
            for kind, values in rounds.items():
                results["handoffs"][kind][n] = workloads.median(values)
            progress.step(n=3)
        results["waiters"] = []
        # Written now as well: a run stopped in the waiter rows keeps every figure taken before them.
        (out_dir / "bench.json").write_text(json.dumps(results, indent=2, default=str))
        for w in waiters:
            progress.set(f"{w} waiters")
            try:
                results["waiters"].append(workloads.many_waiters(zk.hosts, zk.port, w))
            except workloads.RowFailed as exc:
                results["waiters"].append({"waiters": w, "failed": str(exc)})
            progress.step()
        progress.set("inspect snapshot")
        results["extras"] = _extras(zk)
        progress.step("done")

    (out_dir / "bench.json").write_text(json.dumps(results, indent=2, default=str))
    (out_dir / "bench.md").write_text(markdown(results))
    print(report(results))
    try:
        plot(results, out_dir / "bench.png")
        print(f"\nwrote {out_dir / 'bench.json'} and {out_dir / 'bench.png'}")
    except ImportError:
        print(f"\nwrote {out_dir / 'bench.json'} (matplotlib missing: no plot)")
    return 0


def _extras(zk) -> dict:
    """Figures measured by the other parts' own benchmarks, when they are present."""
    extras: dict = {}
    try:
        from benchmarks import extras as extra_benches
    except ImportError:
        return extras
    for name, fn in extra_benches.ALL.items():
        try:
            extras[name] = fn(zk)
        except Exception as exc:  # one failing extra must not lose the main figures
            extras[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return extras


def _ratio(a: list[float], b: list[float]) -> float:
    med_a, med_b = workloads.median(a), workloads.median(b)
    return med_a / med_b if med_b else float("nan")


FLOOR_TARGET = 0.9  # a figure below 90 % of its floor is explained in docs/benchmarks.md


def floors(r: dict) -> list[tuple[str, str, str, float]]:
    """(figure, measured, floor, fraction of the floor): every figure next to its floor, measured in this run.

    For rates the fraction is figure ÷ floor; for a cost (the task overhead) it is floor ÷ figure. 1.0 is the floor.
    """
    med = workloads.median
    rows: list[tuple[str, str, str, float]] = []
    u = r["uncontended"]
    if u.get("floor"):
        rows.append(
            (
                "uncontended cycles/s vs bare sync create+delete",
                f"{med(u['zklocks']):.0f}",
                f"{med(u['floor']):.0f}",
                _ratio(u["zklocks"], u["floor"]),
            )
        )
    h = r["handoffs"]
    for n in sorted(h.get("floor", {})):
        if n == 1:  # one process hands nothing off: the floor's chain does not happen
            continue
        rows.append(
            (
                f"handoffs/s, {n} processes vs delete→watch→hold (raw kazoo)",
                f"{h['zklocks'][n]:.0f}",
                f"{h['floor'][n]:.0f}",
                h["zklocks"][n] / h["floor"][n] if h["floor"][n] else float("nan"),
            )
        )
    task = r.get("extras", {}).get("SingleExecutionTask overhead per task", {})
    if task.get("fraction_of_floor") is not None:
        rows.append(
            (
                "SingleExecutionTask overhead ms vs one waited create",
                f"{task['overhead_ms']:.2f}",
                f"{task['floor_create_ms']:.2f}",
                task["fraction_of_floor"],
            )
        )
    return rows


def report(r: dict) -> str:
    med = workloads.median
    lines = []
    u, f = r["uncontended"], r["failed_trylock"]
    lines.append("figure                                        zklocks      kazoo      redis   zk÷kazoo  target")
    lines.append(
        f"uncontended acquire+release cycles/s       {med(u['zklocks']):10.0f} {med(u['kazoo']):10.0f} "
        f"{med(u['redis']):10.0f} {_ratio(u['zklocks'], u['kazoo']):9.2f}   >= 2.0"
    )
    lines.append(
        f"failed try-locks/s (held elsewhere)        {med(f['zklocks']):10.0f} {med(f['kazoo']):10.0f} "
        f"{med(f['redis']):10.0f} {_ratio(f['zklocks'], f['kazoo']):9.2f}   >= 3.0"
    )
    h = r["handoffs"]
    eight = 8 if 8 in h["zklocks"] else max(h["zklocks"])
    lines.append(
        f"contended handoffs/s, {eight} processes           {h['zklocks'][eight]:10.0f} "
        f"{h['kazoo'][eight]:10.0f} {'':>10} {h['zklocks'][eight] / h['kazoo'][eight]:9.2f}   >= 1.3"
    )
    q = r["requests_per_cycle"]
    lines.append(
        f"requests per uncontended cycle (server)    {q['zklocks']['requests']:10.2f} "
        f"{q['kazoo']['requests']:10.2f} {'':>10} {'':>9}   <= 3"
    )
    lines.append(
        f"round trips waited per cycle               {q['zklocks']['waits']:10.2f} "
        f"{q['kazoo']['waits']:10.2f} {'':>10} {'':>9}   <= 2"
    )
    if r["waiters"]:
        big = r["waiters"][-1]
        woken = "not measured" if "failed" in big else f"{big['notifications_per_release']:.2f}"
        label = f"waiters woken per release, {big['waiters']} waiters"
        lines.append(f"{label:<43}{woken:>10} {'':>10} {'':>10} {'':>9}   == 1")
    for name, figures in r.get("extras", {}).items():
        lines.append(f"{name}: {figures}")
    lines.append("")
    lines.append("figure against its floor (same server, same run)                   figure      floor  fraction")
    for name, figure, floor, fraction in floors(r):
        mark = "" if fraction >= FLOOR_TARGET else "   < 90 %: see docs/benchmarks.md"
        lines.append(f"{name:<62} {figure:>10} {floor:>10} {fraction:9.2f}{mark}")
    lines.append("")
    lines.append(
        "contended handoffs/s by processes:  "
        + "  ".join(f"{n}: {h['zklocks'][n]:.0f} vs {h['kazoo'][n]:.0f}" for n in sorted(h["zklocks"]))
    )
    lines.append(
        "waiters  first handoff ms  mean handoff ms  packets/handoff  writes/handoff  waiters woken/release  "
        "watches fired/release  max wakeups/waiter"
    )
    for w in r["waiters"]:
        if "failed" in w:
            lines.append(f"{w['waiters']:7d}  not measured: {w['failed']}")
            continue
        lines.append(
            f"{w['waiters']:7d}  {w['first_handoff_ms']:16.2f}  {w['mean_handoff_ms']:15.2f}  "
            f"{w['packets_per_handoff']:15.2f}  {w['writes_per_handoff']:14.2f}  "
            f"{w['notifications_per_release']:21.2f}  {w['watches_per_release']:21.2f}  "
            f"{w['max_wakeups_per_waiter']:18d}"
        )
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text that stays in its Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def markdown(r: dict) -> str:
    """The same figures as a Markdown table, for docs/benchmarks.md."""
    med = workloads.median
    u, f, h, q = r["uncontended"], r["failed_trylock"], r["handoffs"], r["requests_per_cycle"]
    eight = 8 if 8 in h["zklocks"] else max(h["zklocks"])
    rows = [
        (
            "uncontended acquire+release cycles/s",
            f"{med(u['zklocks']):.0f}",
            f"{med(u['kazoo']):.0f}",
            f"{med(u['redis']):.0f}",
            f"{_ratio(u['zklocks'], u['kazoo']):.2f}",
            ">= 2.0",
        ),
        (
            "failed try-locks/s (held elsewhere)",
            f"{med(f['zklocks']):.0f}",
            f"{med(f['kazoo']):.0f}",
            f"{med(f['redis']):.0f}",
            f"{_ratio(f['zklocks'], f['kazoo']):.2f}",
            ">= 3.0",
        ),
        (
            f"contended handoffs/s, {eight} processes",
            f"{h['zklocks'][eight]:.0f}",
            f"{h['kazoo'][eight]:.0f}",
            "",
            f"{h['zklocks'][eight] / h['kazoo'][eight]:.2f}",
            ">= 1.3",
        ),
        (
            "requests per uncontended cycle (server packets)",
            f"{q['zklocks']['requests']:.2f}",
            f"{q['kazoo']['requests']:.2f}",
            "",
            "",
            "<= 3",
        ),
        (
            "round trips waited per uncontended cycle",
            f"{q['zklocks']['waits']:.2f}",
            f"{q['kazoo']['waits']:.2f}",
            "",
            "",
            "<= 2",
        ),
    ]
    if r["waiters"]:
        big = r["waiters"][-1]
        rows.append(
            (
                f"waiters woken per release, {big['waiters']} waiters",
                "not measured" if "failed" in big else f"{big['notifications_per_release']:.2f}",
                "",
                "",
                "",
                "== 1",
            )
        )
    out = [
        "| figure | zklocks | kazoo | redis-py | zklocks ÷ kazoo | target |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out += ["", "| processes | zklocks handoffs/s | kazoo handoffs/s | ratio |", "| ---: | ---: | ---: | ---: |"]
    out += [
        f"| {n} | {h['zklocks'][n]:.0f} | {h['kazoo'][n]:.0f} | {h['zklocks'][n] / h['kazoo'][n]:.2f} |"
        for n in sorted(h["zklocks"])
    ]
    out += [
        "",
        "| waiters | first handoff ms | mean handoff ms | server packets per handoff | writes per handoff "
        "| waiters woken per release | watches fired per release | max wake-ups of one waiter |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    out += [
        f"| {w['waiters']} | {w['first_handoff_ms']:.2f} | {w['mean_handoff_ms']:.2f} | "
        f"{w['packets_per_handoff']:.2f} | {w['writes_per_handoff']:.2f} | {w['notifications_per_release']:.2f} | "
        f"{w['watches_per_release']:.2f} | {w['max_wakeups_per_waiter']} |"
        if "failed" not in w
        else f"| {w['waiters']} | not measured: {_cell(w['failed'])} | | | | | | |"
        for w in r["waiters"]
    ]
    for name, figures in r.get("extras", {}).items():
        out += ["", f"**{name}**: " + ", ".join(f"{k} = {v}" for k, v in figures.items())]
    out += ["", "| figure against its floor | figure | floor | fraction of floor |", "| --- | ---: | ---: | ---: |"]
    out += [f"| {name} | {figure} | {floor} | {fraction:.2f} |" for name, figure, floor, fraction in floors(r)]
    return "\n".join(out) + "\n"


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = r["handoffs"]
    ns = sorted(h["zklocks"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for kind, style in (("zklocks", "o-"), ("kazoo", "s--")):
        rates = [h[kind][n] for n in ns]
        ax1.plot(ns, rates, style, label=kind)
        ax2.plot(ns, [1000.0 / x if x else float("nan") for x in rates], style, label=kind)
    if h.get("floor"):  # the floors are lines, not points to beat
        floor = [h["floor"][n] for n in ns]
        label = "floor: delete→watch→hold (raw kazoo)"
        ax1.plot(ns, floor, "k:", lw=2, label=label)
        ax2.plot(ns, [1000.0 / x if x else float("nan") for x in floor], "k:", lw=2, label=label)
    bare = r["uncontended"].get("floor")
    if bare:
        ax1.axhline(workloads.median(bare), color="grey", ls="-.", lw=1, label="floor: bare create+delete, 1 process")
    ax1.set(
        xscale="log", xlabel="contending processes", ylabel="acquire+release cycles/s", title="Throughput on one lock"
    )
    ax2.set(xscale="log", xlabel="contending processes", ylabel="ms per handoff", title="Handoff latency")
    for ax in (ax1, ax2):
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())

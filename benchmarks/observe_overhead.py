"""The cost of metrics and tracing on the uncontended path: ``python -m benchmarks.observe_overhead``.

Alternating rounds of uncontended acquire+release cycles against one ZooKeeper server: with no observer, with the
Prometheus metrics, and with metrics and OpenTelemetry spans (through the SDK, spans dropped by a no-op
processor). Also the CPU time of the observer calls alone, per cycle (no ZooKeeper involved).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchmarks import workloads
from zklocks.testing.runtime import stop_on_signals


def _variants() -> dict[str, tuple]:
    from zklocks.client import observe
    from zklocks.contrib import metrics, tracing

    installed = tuple(observe.observers)
    m = metrics.installed() or metrics.start(metrics.Metrics())
    variants: dict[str, tuple] = {"off": (), "metrics": (m,)}
    try:
        from opentelemetry.sdk.trace import TracerProvider

        variants["metrics+tracing"] = (m, tracing.Tracing(TracerProvider()))
    except ImportError:
        pass
    observe.observers = installed
    return variants


def _observer_calls_us(observers: tuple, n: int = 5000, repeat: int = 7) -> float:
    """Microseconds of observer work per acquire+release cycle (the best of ``repeat`` runs: a busy machine
    only adds to it)."""
    from zklocks.client import observe

    class FakeHold:
        alias, name, kind = "default", "bench:uncontended", "exclusive"
        acquired_at = time.monotonic()

    saved = observe.observers
    observe.observers = observers
    try:
        hold = FakeHold()
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            for _ in range(n):
                attempt = observe.acquire_started("default", "exclusive", "bench:uncontended")
                observe.acquire_ended(attempt, observe.ACQUIRED, 1)
                if observe.observers:
                    observe.held(hold)
                    observe.released(hold)
            best = min(best, (time.perf_counter() - started) / n * 1e6)
        return best
    finally:
        observe.observers = saved


def run(hosts: str, rounds: int = 7, seconds: float = 1.0) -> dict[str, Any]:
    from zklocks import zk_lock
    from zklocks.client import observe

    workloads.configure_django(hosts)
    variants = _variants()
    lock = zk_lock("bench:observe-overhead")

    def cycle():
        lock.acquire()
        lock.release()

    saved = observe.observers
    rates: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for _ in range(rounds):
            for name, observers in variants.items():
                observe.observers = observers
                rates[name].append(workloads.rate(cycle, seconds))
    finally:
        observe.observers = saved
    base = workloads.median(rates["off"])
    result: dict[str, Any] = {"cycles_per_s": {k: round(workloads.median(v), 1) for k, v in rates.items()}}
    result["slowdown_pct"] = {k: round(100 * (1 - workloads.median(v) / base), 2) for k, v in rates.items()}
    calls = {k: round(_observer_calls_us(v), 2) for k, v in variants.items()}
    result["observer_us_per_cycle"] = calls
    result["observer_pct_of_cycle"] = {k: round(100 * us / (1e6 / base), 2) for k, us in calls.items()}
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.observe_overhead", description=__doc__)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seconds", type=float, default=1.0)
    args = p.parse_args(argv)
    stop_on_signals()  # SIGTERM too runs the clean-up that stops the servers
    from benchmarks.servers import start_zookeeper

    zk = start_zookeeper()
    try:
        print(json.dumps(run(zk.hosts, args.rounds, args.seconds), indent=2))
    finally:
        from zklocks.client.pools import close_all

        close_all()
        zk.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

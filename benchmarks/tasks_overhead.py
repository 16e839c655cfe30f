"""Per-call overhead of ``zklocks.tasks.SingleExecutionBackend`` against the backend it wraps.

    python -m benchmarks.tasks_overhead [--n 300] [--json]

Starts its own ZooKeeper server (Debian's package, tickTime 2 s, fsync on) and enqueues, one at a time and in
turn, a task that returns its argument on three backends of one process: Django's ImmediateBackend (it runs the
task inside ``enqueue``), the same wrapped by SingleExecutionBackend (the run takes and releases the key's lock),
and wrapped with ``unique_queued=True`` (also the enqueue lock and the queued record). The figures are the median
``enqueue`` times and their ratios to the plain backend, measured in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from zklocks.testing.runtime import stop_on_signals

IMMEDIATE = "django.tasks.backends.immediate.ImmediateBackend"


def echo(value):
    return value


def unique_echo(value):
    return value


def _configure_django(hosts: str) -> None:
    import django
    from django.conf import settings

    wrapped = {"BACKEND": "zklocks.tasks.SingleExecutionBackend", "OPTIONS": {"BACKEND": IMMEDIATE}}
    settings.configure(
        SECRET_KEY="zklocks-bench",  # noqa: S106 - the aliases derive their identity from it (guarded by default)
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "zklocks"],
        DATABASES={},
        USE_TZ=True,
        ZKLOCKS={
            "default": {"HOSTS": hosts, "NAMESPACE": "/zklocks-bench", "SESSION_TIMEOUT": 10.0, "REAP_INTERVAL": 0}
        },
        TASKS={"default": {"BACKEND": IMMEDIATE}, "plain": {"BACKEND": IMMEDIATE}, "single": wrapped},
    )
    django.setup()


def run(n: int = 300, warmup: int = 30) -> dict[str, Any]:
    from zklocks.testing import ZkServer

    zk = ZkServer(tick_time=2000, force_sync=True, jvm_options=())  # as in production
    try:
        zk.start()
        _configure_django(zk.hosts)
        from django.tasks import task

        calls = {
            "plain": task(backend="plain")(echo),
            "single": task(backend="single", lock_key="bench:{value}")(echo),
            "unique": task(backend="single", lock_key="bench-u:{value}", unique_queued=True)(unique_echo),
        }
        times: dict[str, list[float]] = {k: [] for k in calls}
        for i in range(warmup + n):
            for kind, t in calls.items():  # in turn, so drift and noise hit all alike
                started = time.perf_counter()
                result = t.enqueue(i % 10)
                took = time.perf_counter() - started
                if result.return_value != i % 10:
                    raise AssertionError(f"{kind}: returned {result.return_value!r}")
                if i >= warmup:
                    times[kind].append(took)
    finally:
        zk.cleanup()
    ms = {k: statistics.median(v) * 1000 for k, v in times.items()}
    return {
        "n": n,
        "median_ms": {k: round(v, 3) for k, v in ms.items()},
        "ratio_single": round(ms["single"] / ms["plain"], 1),
        "ratio_unique": round(ms["unique"] / ms["plain"], 1),
        "added_ms_single": round(ms["single"] - ms["plain"], 3),
        "added_ms_unique": round(ms["unique"] - ms["plain"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    stop_on_signals()  # SIGTERM too runs the clean-up that stops the servers
    figures = run(args.n)
    if args.json:
        sys.stdout.write(json.dumps(figures) + "\n")
    else:
        m = figures["median_ms"]
        sys.stdout.write(
            f"enqueue, median of {figures['n']}: ImmediateBackend {m['plain']:.3f} ms; wrapped "
            f"{m['single']:.3f} ms (+{figures['added_ms_single']:.3f} ms, {figures['ratio_single']}x); with "
            f"unique_queued {m['unique']:.3f} ms (+{figures['added_ms_unique']:.3f} ms, {figures['ratio_unique']}x)\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

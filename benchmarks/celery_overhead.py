"""Per-task overhead of ``SingleExecutionTask`` against a plain task on the same worker.

    python -m benchmarks.celery_overhead [--n 300] [--pool prefork] [--json]
    python -m benchmarks.celery_overhead --policies [--n 200]   # each de-duplication policy against the plain lock

Starts its own ZooKeeper server (Debian's package), Redis server and one ``celery worker`` (concurrency 1)
that serves two tasks returning their argument: a plain one and a ``SingleExecutionTask``. It then sends them
alternately, one at a time, and times each round trip (``delay(...).get()``). The figure is the ratio of the
median round trips, measured in one run. ``run()`` returns the figures for other benchmark drivers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from zklocks.testing.runtime import start_on, stop_group, stop_on_signals

WORKER_APP = "benchmarks.celery_overhead:worker_app"
_worker_app = None


def build_app(broker: str):
    from celery import Celery

    from zklocks.celery import SingleExecutionTask

    app = Celery("zklocks_bench", set_as_current=False)
    app.conf.update(
        broker_url=f"{broker}/0",
        result_backend=f"{broker}/1",
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        task_default_queue="zklocks-bench",
    )

    @app.task(name="zklocks_bench.plain")
    def plain(x):
        return x

    @app.task(name="zklocks_bench.single", base=SingleExecutionTask, lock_key="zklocks-bench:single")
    def single(x):
        return x

    for policy, options in POLICIES.items():
        app.task(
            name=f"zklocks_bench.{policy}", base=SingleExecutionTask, lock_key=f"zklocks-bench:{policy}", **options
        )(_identity)
    return app


def _identity(x):
    return x


# The de-duplication policies, each on a call that runs (the cost of the policy's reads and writes, not of a
# skipped call). throttle's window is 1 ms, shorter than a round trip, so every call starts.
POLICIES: dict[str, dict[str, Any]] = {
    "share_running": {"share_running": True},
    "debounce": {"debounce": 0},
    "throttle": {"throttle": 0.001},
    "lock_concurrency": {"lock_concurrency": 2},
    "keep_lock_on_retry": {"keep_lock_on_retry": True},
}


def _configure_django(hosts: str) -> None:
    import django
    from django.conf import settings

    if settings.configured:
        return
    settings.configure(
        SECRET_KEY="zklocks-bench",  # noqa: S106 - the aliases derive their identity from it (guarded by default)
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "zklocks"],
        DATABASES={},
        USE_TZ=True,
        ZKLOCKS={
            "default": {"HOSTS": hosts, "NAMESPACE": "/zklocks-bench", "SESSION_TIMEOUT": 10.0, "REAP_INTERVAL": 0}
        },
    )
    django.setup()


def __getattr__(name: str) -> Any:
    """``celery -A benchmarks.celery_overhead:worker_app``: the worker's app, configured from the environment."""
    global _worker_app
    if name != "worker_app":
        raise AttributeError(name)
    if _worker_app is None:
        _configure_django(os.environ["ZKLOCKS_BENCH_HOSTS"])
        _worker_app = build_app(os.environ["ZKLOCKS_BENCH_BROKER"])
    return _worker_app


def _start_worker(hosts: str, broker: str, pool: str, logdir: Path) -> subprocess.Popen:
    env = dict(os.environ, ZKLOCKS_BENCH_HOSTS=hosts, ZKLOCKS_BENCH_BROKER=broker)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = logdir / "worker.log"
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                WORKER_APP,
                "worker",
                "-P",
                pool,
                "-c",
                "1",
                "-l",
                "WARNING",
                "-Q",
                "zklocks-bench",
                "-n",
                f"bench-{os.getpid()}@localhost",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen) -> None:
    stop_group(proc, ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)))


def _round_trip(task, i: int) -> float:
    started = time.perf_counter()
    if task.delay(i).get(timeout=30) != i:
        raise RuntimeError(f"{task.name} returned a wrong value")
    return time.perf_counter() - started


class _WaitedCreate:
    """The overhead's floor: one create of an ephemeral node, waited on, on the same server (raw kazoo).

    The delete that follows is sent without waiting and is not timed, as the task's release.
    """

    def __init__(self, hosts: str) -> None:
        from .workloads import floor_client

        self.client = floor_client(hosts)
        self.client.ensure_path("/zklocks-bench-floor")

    def once(self) -> float:
        started = time.perf_counter()
        path = self.client.create("/zklocks-bench-floor/n-", ephemeral=True, sequence=True)
        elapsed = time.perf_counter() - started
        self.client.delete_async(path)
        return elapsed

    def close(self) -> None:
        self.client.stop()
        self.client.close()


def run(n: int = 300, pool: str = "prefork", warmup: int = 30) -> dict[str, Any]:
    """Start ZooKeeper, Redis and a worker; time ``n`` round trips of each task; stop everything."""
    from tests.support.redis_server import RedisServer
    from zklocks.testing import ZkServer

    workdir = Path(tempfile.mkdtemp(prefix="zklocks-bench-celery-"))
    # An ExitStack, not a finally: a stop cut short by a signal does not skip the ones after it.
    with contextlib.ExitStack() as stack:
        zk = start_on(stack, ZkServer(tick_time=2000, force_sync=True, jvm_options=()))  # as in production
        redis = start_on(stack, RedisServer())
        _configure_django(zk.hosts)
        proc = _start_worker(zk.hosts, redis.url, pool, workdir)
        stack.callback(_stop, proc)
        app = build_app(redis.url)
        plain, single = app.tasks["zklocks_bench.plain"], app.tasks["zklocks_bench.single"]
        deadline = time.monotonic() + 60
        while True:  # the worker is up once it answers
            try:
                _round_trip(plain, -1)
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"the bench worker did not start; see {workdir}/worker.log") from None
        for i in range(warmup):
            _round_trip(plain, i)
            _round_trip(single, i)
        floor = _WaitedCreate(zk.hosts)
        times: dict[str, list[float]] = {"plain": [], "single": [], "floor": []}
        for i in range(n):  # alternate, so drift and noise hit both alike
            times["plain"].append(_round_trip(plain, i))
            times["single"].append(_round_trip(single, i))
            times["floor"].append(floor.once())
        floor.close()
        app.close()
    shutil.rmtree(workdir, ignore_errors=True)  # kept when the run failed: its worker.log says why
    plain_ms = statistics.median(times["plain"]) * 1000
    single_ms = statistics.median(times["single"]) * 1000
    floor_ms = statistics.median(times["floor"]) * 1000
    return {
        "pool": pool,
        "n": n,
        "plain_median_ms": round(plain_ms, 3),
        "single_median_ms": round(single_ms, 3),
        "plain_p90_ms": round(statistics.quantiles(times["plain"], n=10)[-1] * 1000, 3),
        "single_p90_ms": round(statistics.quantiles(times["single"], n=10)[-1] * 1000, 3),
        "overhead_ms": round(single_ms - plain_ms, 3),
        "ratio": round(single_ms / plain_ms, 3),
        "floor_create_ms": round(floor_ms, 3),
        # how close the overhead is to its floor (1.0: the overhead is exactly one waited create)
        "fraction_of_floor": round(floor_ms / (single_ms - plain_ms), 3) if single_ms > plain_ms else None,
    }


def policy_costs(n: int = 200, pool: str = "prefork", warmup: int = 20) -> dict[str, Any]:
    """Median round trip of the plain SingleExecutionTask and of each policy, alternating, in one run."""
    from tests.support.redis_server import RedisServer
    from zklocks.testing import ZkServer

    workdir = Path(tempfile.mkdtemp(prefix="zklocks-bench-policies-"))
    names = ["single", *POLICIES]
    with contextlib.ExitStack() as stack:
        zk = start_on(stack, ZkServer(tick_time=2000, force_sync=True, jvm_options=()))
        redis = start_on(stack, RedisServer())
        _configure_django(zk.hosts)
        proc = _start_worker(zk.hosts, redis.url, pool, workdir)
        stack.callback(_stop, proc)
        app = build_app(redis.url)
        tasks = {name: app.tasks[f"zklocks_bench.{name}"] for name in names}
        deadline = time.monotonic() + 60
        while True:
            try:
                _round_trip(tasks["single"], -1)
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"the bench worker did not start; see {workdir}/worker.log") from None
        times: dict[str, list[float]] = {name: [] for name in names}
        for i in range(warmup + n):
            for name in names:
                elapsed = _round_trip(tasks[name], i)
                if i >= warmup:
                    times[name].append(elapsed)
        app.close()
    shutil.rmtree(workdir, ignore_errors=True)
    base = statistics.median(times["single"])
    return {
        "pool": pool,
        "n": n,
        "median_ms": {name: round(statistics.median(times[name]) * 1000, 3) for name in names},
        "ratio_to_single": {name: round(statistics.median(times[name]) / base, 3) for name in POLICIES},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300, help="round trips per task (default 300)")
    parser.add_argument("--pool", default="prefork", choices=["prefork", "threads", "solo"])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--policies", action="store_true", help="each de-duplication policy against the plain lock")
    args = parser.parse_args(argv)
    stop_on_signals()  # SIGTERM too runs the clean-up that stops the servers
    if args.policies:
        costs = policy_costs(n=args.n, pool=args.pool)
        if args.json:
            print(json.dumps(costs))
            return 0
        print(f"Celery round trip, one worker ({costs['pool']} pool, concurrency 1), {costs['n']} calls each:")
        print(f"  SingleExecutionTask  median {costs['median_ms']['single']:7.2f} ms")
        for name, ratio in costs["ratio_to_single"].items():
            print(f"  {name:<20} median {costs['median_ms'][name]:7.2f} ms   ratio {ratio:.2f}")
        return 0
    figures = run(n=args.n, pool=args.pool)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(
        f"Celery round trip, one worker ({figures['pool']} pool, concurrency 1), {figures['n']} calls each, "
        "alternating:"
    )
    print(f"  plain task           median {figures['plain_median_ms']:7.2f} ms   p90 {figures['plain_p90_ms']:7.2f} ms")
    print(
        f"  SingleExecutionTask  median {figures['single_median_ms']:7.2f} ms   p90 {figures['single_p90_ms']:7.2f} ms"
    )
    print(f"  ratio of medians {figures['ratio']:.2f}  (overhead {figures['overhead_ms']:.2f} ms per task)")
    print(
        f"  floor: one waited create {figures['floor_create_ms']:.2f} ms; the overhead is at "
        f"{figures['fraction_of_floor']} of it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of the readers on a large namespace: the admin list, the health URL and ``manage.py zklocks_status``
on 100,000 locks (docs/security.md, "Names and the admin").

    python -m benchmarks.readers_at_scale                 # starts its own ZooKeeper (Debian's package)
    python -m benchmarks.readers_at_scale --locks 20000 --runs 5

The namespace is made as benchmarks.inspect_snapshot makes it (5 nodes a lock: holders and waiters of exclusive
and shared locks, semaphores). Each reader runs in this process against it, through Django's test client as a
request would (tests/settings.py: a superuser for the admin, an anonymous request for the health URL with
MAX_HOLD_SECONDS). It prints the fastest and the slowest of RUNS timed runs, and the peak of Python memory that
one run allocates (tracemalloc, a run of its own, as tracing slows the others). The health URL is timed twice:
the first request of the process, which starts the read of every lock on a thread of its own and waits for it at
most health.READ_WAIT, and a request answered from the summary of a finished read; and that read itself, which
no request waits for longer than READ_WAIT.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable

from kazoo.client import KazooClient

from benchmarks.inspect_snapshot import populate, server_at
from zklocks.testing.runtime import stop_on_signals

BOUND = 2.0  # seconds each reader may take (issue's bar, docs/security.md)


def timed(read: Callable[[], object], runs: int, before: Callable[[], object] = lambda: None) -> tuple[float, ...]:
    """(fastest, slowest, peak MiB of Python memory) of ``read``, each run after an untimed ``before``."""
    took = []
    for _ in range(runs):
        before()
        started = time.perf_counter()
        read()
        took.append(time.perf_counter() - started)
    before()
    tracemalloc.start()
    try:
        read()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return min(took), max(took), peak / 2**20


def set_up_django(hosts: str, namespace: str) -> None:
    """tests/settings.py's project, pointed at ``hosts`` and ``namespace``, its database made."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ["ZKLOCKS_HOSTS"] = hosts
    os.environ["ZKLOCKS_NAMESPACE"] = namespace
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def readers(runs: int) -> list[tuple[str, tuple[float, float, float]]]:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client, override_settings

    admin = Client()
    admin.force_login(User.objects.create_superuser("bench", "bench@example.com", "bench"))
    anonymous = Client()

    def page(**params) -> Callable[[], object]:
        def get() -> object:
            response = admin.get("/admin/zklocks/lock/", params)
            if response.status_code != 200:
                raise RuntimeError(f"the admin list answered {response.status_code}")
            return response

        return get

    def status() -> None:
        call_command("zklocks_status", stdout=io.StringIO())

    from zklocks import health

    def health_url() -> None:
        response = anonymous.get("/ht/", {"format": "json"})
        if response.status_code not in (200, 500):  # 500: a check failed, which is an answer too
            raise RuntimeError(f"the health URL answered {response.status_code}")

    def settled() -> None:
        for read in list(health._reads.values()):  # the read of every lock that a request started
            read.done.wait(600)

    def first() -> None:
        settled()
        health._summaries.clear()  # the first request of a process: no summary cached yet

    def whole_read() -> None:
        health.long_holds(["default"], 3600)

    found = []
    with override_settings(ZKLOCKS_HEALTH={"MAX_HOLD_SECONDS": 3600}):
        found.append(("admin list, page 1", timed(page(), runs)))
        found.append(("admin list, page 500", timed(page(p="500"), runs)))
        found.append(("admin list, a search", timed(page(q="bench:05000"), runs)))
        found.append(("zklocks_status", timed(status, runs)))
        found.append(("health URL, first request", timed(health_url, runs, before=first)))
        found.append(("health URL, cached", timed(health_url, runs, before=settled)))
        found.append(("health's read of every lock", timed(whole_read, 1)))  # on its own thread, not a request's
    from django.conf import settings

    database = settings.DATABASES["default"]["NAME"]
    if os.path.exists(database):
        os.remove(database)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", help="an existing ZooKeeper (default: start one)")
    parser.add_argument("--locks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    stop_on_signals()  # SIGTERM too runs the clean-up that stops the servers
    hosts, server = server_at(args.hosts, heap="2g")  # 500,000 nodes: more than a test server's heap
    namespace = f"/zklocks-bench/{uuid.uuid4().hex[:8]}"
    writer = KazooClient(hosts=hosts, timeout=30.0)
    try:
        set_up_django(hosts, namespace)
        writer.start(timeout=30)
        started = time.monotonic()
        nodes = populate(writer, namespace, args.locks)
        print(f"{args.locks} locks ({nodes} nodes) made in {time.monotonic() - started:.0f} s", flush=True)
        found = readers(args.runs)
    finally:
        writer.stop()
        writer.close()
        if server is not None:
            server.cleanup()
    print(f"\nreaders on {args.locks} locks, {args.runs} runs each (bound {BOUND:g} s):")
    for name, (fastest, slowest, peak) in found:
        verdict = "ok" if slowest <= BOUND or name.startswith("health's") else "over"
        print(f"  {name:28} fastest {fastest:6.3f} s  slowest {slowest:6.3f} s  peak {peak:6.1f} MiB  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

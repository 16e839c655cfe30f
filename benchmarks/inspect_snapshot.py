"""Benchmark of the read model: one snapshot of a namespace of 1,000 locks made of 5,000 nodes.

    python -m benchmarks.inspect_snapshot                 # starts its own ZooKeeper (Debian's package)
    python -m benchmarks.inspect_snapshot --hosts H:P     # against a running server
    python -m benchmarks.inspect_snapshot --locks 2000 --runs 9
    python -m benchmarks.inspect_snapshot --no-multiread  # as against a server older than 3.6

Each lock is 5 nodes: 70 % exclusive locks (node + holder + 3 waiters), 20 % shared locks (node + 2 readers
holding, a writer and a reader waiting), 10 % semaphores of 2 leases (node + __mutex__ + 2 leases + 1 waiter).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

from kazoo.client import KazooClient

from zklocks.ops.read_model import read_namespace
from zklocks.recipes import node_data
from zklocks.testing.runtime import stop_on_signals

WINDOW = 5000  # requests outstanding at a time: a server buried under one pipeline of them drops the client


def populate(client: KazooClient, namespace: str, locks: int) -> int:
    """Create the lock trees with pipelined requests; return the number of nodes created."""
    client.ensure_path(namespace)
    data = node_data.payload()
    pending: list = []
    created = 0

    def send(request) -> None:
        nonlocal created
        pending.append(request)
        created += 1
        if len(pending) >= WINDOW:
            drain()

    def drain() -> None:
        for r in pending:
            r.get(timeout=60)
        pending.clear()

    kinds = []
    for i in range(locks):
        kind = "semaphore" if i % 10 == 9 else "shared" if i % 10 >= 7 else "exclusive"
        marker = b'{"v":1,"kind":"semaphore","max_leases":2}' if kind == "semaphore" else b""
        path = f"{namespace}/bench:{i:05d}"
        send(client.create_async(path, marker))
        kinds.append((path, kind))
    drain()
    for path, kind in kinds:

        def contender(parent: str, marker: str) -> None:
            send(client.create_async(f"{parent}/{uuid.uuid4().hex}{marker}", data, ephemeral=True, sequence=True))

        if kind == "exclusive":
            for _ in range(4):
                contender(path, "__lock__")
        elif kind == "shared":
            for marker in ("__rlock__", "__rlock__", "__lock__", "__rlock__"):
                contender(path, marker)
        else:
            send(client.create_async(f"{path}/__mutex__", b""))
            contender(path, "__lease__")
            contender(path, "__lease__")
            contender(f"{path}/__mutex__", "__lock__")
    drain()
    return created


def run(hosts: str, locks: int, runs: int, multiread: bool = True) -> dict:
    namespace = f"/zklocks-bench/{uuid.uuid4().hex[:8]}"
    writer = KazooClient(hosts=hosts, timeout=10.0)
    reader = KazooClient(hosts=hosts, timeout=10.0)
    writer.start(timeout=30)
    reader.start(timeout=30)
    if not multiread:
        from zklocks.client.multiread import multiread_support

        multiread_support[reader] = False  # as against a server older than 3.6: one request per read
    try:
        nodes = populate(writer, namespace, locks)
        read_namespace(reader, namespace)  # warm up the connection and the server's caches
        timings = []
        found = []
        for _ in range(runs):
            started = time.perf_counter()
            found = read_namespace(reader, namespace)
            timings.append(time.perf_counter() - started)
        contenders = sum(len(lock.holders) + len(lock.waiters) for lock in found)
        return {
            "locks": len(found),
            "nodes": nodes,
            "contenders": contenders,
            "runs": runs,
            "best": min(timings),
            "median": statistics.median(timings),
            "worst": max(timings),
        }
    finally:
        writer.stop()
        writer.close()
        reader.stop()
        reader.close()


def server_at(hosts: str | None, *, heap: str | None = None):
    """``hosts``, or a standalone server of the benchmark's own (returned too, for its clean-up) when None; with
    ``heap`` (``"2g"``), a JVM of that heap instead of the test servers' small one."""
    if hosts is not None:
        return hosts, None
    from zklocks.testing import ZkServer

    options = {} if heap is None else {"jvm_options": (f"-Xmx{heap}",)}
    server = ZkServer(tick_time=2000, **options).start()
    return server.hosts, server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", help="an existing ZooKeeper (default: start one)")
    parser.add_argument("--locks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-multiread", action="store_true", help="one request per read (servers < 3.6)")
    args = parser.parse_args(argv)
    stop_on_signals()  # SIGTERM too runs the clean-up that stops the servers
    hosts, server = server_at(args.hosts)
    try:
        r = run(hosts, args.locks, args.runs, multiread=not args.no_multiread)
    finally:
        if server is not None:
            server.cleanup()
    print(
        f"snapshot of {r['locks']} locks ({r['nodes']} nodes, {r['contenders']} holders and waiters): "
        f"best {r['best'] * 1000:.0f} ms, median {r['median'] * 1000:.0f} ms, worst {r['worst'] * 1000:.0f} ms "
        f"over {r['runs']} runs ({'one request per read' if args.no_multiread else 'multiRead batches'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

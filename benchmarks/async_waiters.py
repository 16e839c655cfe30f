"""Ten thousand waiting coroutines in one process: threads, memory per waiter, handoff rate.

    python -m benchmarks.async_waiters [--waiters 10000]

One holder per lock, then N coroutines ``async with zk_lock(...)`` spread over 1 and over 100 locks; once every
waiter is enqueued and watching (the server's own watch count says so), the holders release and the queues drain,
each waiter releasing as soon as it holds. Memory is Python's own (tracemalloc) per waiting coroutine, kazoo's
watch bookkeeping included, in a separate pass (tracing slows the process down).

The reference of the one-lock row: one client's writes sent one after the other on the same server, measured in
the same run, after the crowds (a first crowd of 2,000, not reported, warms the server for the rows too). It is
what a chain of handoffs would cost if each waited for ZooKeeper to commit the release before the next holder
held. Waiters of one process share its session, so a release hands the lock to the next of them as its delete is
sent (docs/design.md, "A handoff within one session"), and the drain can run faster than it: every release is
still sent, one request per handoff.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import tracemalloc

from benchmarks.servers import exit_on_sigterm
from benchmarks.workloads import configure_django


def _threads() -> int:
    """Threads of the process, without the event loop's default executor (the benchmark's own polling)."""
    return sum(1 for t in threading.enumerate() if not t.name.startswith("asyncio_"))


def _watches(port: int) -> int:
    return int(_mntr(port, "zk_watch_count"))


def _queued(paths: list[str]) -> int:
    """Contenders the server still has under ``paths``, read after every request this process sent before."""
    from zklocks.client.pools import connections

    return max(
        sum(len(session.client.get_children(path)) for path in paths) for session in connections["default"].sessions()
    )


def _mntr(port: int, key: str) -> int:
    from zklocks.testing.server import mntr

    return int(mntr(port)[key])


async def _crowd(port: int, waiters: int, locks: int, tag: str, trace: bool) -> dict:
    from zklocks import zk_lock

    names = [f"bench:crowd:{tag}:{locks}:{j}" for j in range(locks)]
    order: dict[str, list[int]] = {name: [] for name in names}

    async def waiter(i: int) -> None:
        name = names[i % locks]
        lock = zk_lock(name, timeout=600)
        async with lock:
            order[name].append(int(lock._hold().contender.name[-10:]))

    holders = [zk_lock(name) for name in names]
    for holder in holders:
        await holder.acquire_async()
    base_watches = await asyncio.to_thread(_watches, port)
    threads = _threads()
    if trace:
        tracemalloc.start()
    started = time.monotonic()
    tasks = [asyncio.create_task(waiter(i)) for i in range(waiters)]
    # One watch per waiter, as the server counts them (per session and path): a holder's own watch of a long
    # hold and the watch of its first waiter count once.
    deadline = time.monotonic() + 300
    while await asyncio.to_thread(_watches, port) < base_watches + waiters - locks:
        failed = next((t for t in tasks if t.done() and t.exception() is not None), None)
        if failed is not None:
            raise RuntimeError(f"a waiter failed while {waiters} enqueued") from failed.exception()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{waiters} waiters on {locks} lock(s): not all enqueued and watching within 300 s")
        await asyncio.sleep(0.1)
    enqueued = time.monotonic() - started
    extra_threads = _threads() - threads
    memory = None
    if trace:
        memory = tracemalloc.get_traced_memory()[0] / waiters
        tracemalloc.stop()
    packets = await asyncio.to_thread(_mntr, port, "zk_packets_received")
    started = time.monotonic()
    for holder in holders:
        await holder.release_async()
    await asyncio.gather(*tasks)
    # The drain ends when the server has applied every release, not when the last holder sent its own (a release
    # hands the lock to the next waiter of this process as it is sent): a read of each lock node on every session
    # of the pool is answered after every request that session sent before it.
    left = await asyncio.to_thread(_queued, [holder.path for holder in holders])
    drained = time.monotonic() - started
    if left:
        raise RuntimeError(f"{left} contender(s) still queued after the drain")
    # Requests the server received during the drain: the holders' releases and every waiter's own.
    packets = await asyncio.to_thread(_mntr, port, "zk_packets_received") - packets
    return {
        "waiters": waiters,
        "locks": locks,
        "enqueue_s": round(enqueued, 2),
        "extra_threads": extra_threads,
        "bytes_per_waiter": None if memory is None else round(memory),
        "handoffs_per_s": round(waiters / drained),
        "requests_per_handoff": round(packets / waiters, 2),
        "in_queue_order": all(v == sorted(v) for v in order.values()),
    }


def _serial_writes(hosts: str, writes: int = 2000, rounds: int = 3) -> int:
    """Writes per second of one kazoo client, each sent once the previous one was answered (median of rounds)."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts)
    client.start(timeout=30)
    try:
        path = client.create("/bench-serial-writes", b"", sequence=True)
        rates = []
        for _ in range(rounds):
            started = time.perf_counter()
            for i in range(writes):
                client.set(path, b"%d" % i)
            rates.append(writes / (time.perf_counter() - started))
        client.delete(path)
        return round(sorted(rates)[rounds // 2])
    finally:
        client.stop()
        client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.async_waiters", description=__doc__)
    p.add_argument("--waiters", type=int, default=10_000)
    args = p.parse_args(argv)
    exit_on_sigterm()
    from zklocks.testing import ZkServer

    # A 20 s session (tick 1 s): a burst of 10,000 enqueues keeps one session's requests busy for seconds.
    zk = ZkServer(tick_time=1000, force_sync=True, jvm_options=()).start()
    try:
        # CONNECT_TIMEOUT 30 s: under tracemalloc (the memory pass) every answer is slow to read, and an answer
        # behind thousands of others can take longer than the default bound for "ZooKeeper is unavailable".
        configure_django(zk.hosts, SESSION_TIMEOUT=20.0, TICK_TIME=1.0, CONNECT_TIMEOUT=30.0)
        # A first crowd, not reported, so that the rows and the floor all meet a warm server (its JIT compiled).
        asyncio.run(_crowd(zk.port, min(args.waiters, 2_000), 1, "warm", trace=False))
        rows = []
        for locks in (1, 100):
            rows.append(asyncio.run(_crowd(zk.port, args.waiters, locks, "run", trace=False)))
        memory = asyncio.run(_crowd(zk.port, args.waiters, 1, "mem", trace=True))["bytes_per_waiter"]
        floor = _serial_writes(zk.hosts)
    finally:
        from zklocks.client.pools import close_all

        close_all()
        zk.cleanup()
    print(
        "| waiters | locks | enqueued and watching (s) | threads added | handoffs/s | requests/handoff "
        "| in queue order |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(
            f"| {r['waiters']} | {r['locks']} | {r['enqueue_s']} | {r['extra_threads']} | {r['handoffs_per_s']} "
            f"| {r['requests_per_handoff']} "
            f"| {'yes' if r['in_queue_order'] else 'NO'} |"
        )
    print(f"\nPython memory per waiting coroutine (tracemalloc, 1 lock): {memory / 1024:.1f} KiB")
    one = rows[0]["handoffs_per_s"]
    print(
        f"Reference of the one-lock row, one client's serial writes on the same server: {floor} writes/s; "
        f"{args.waiters} waiters on one lock: {one} handoffs/s, {one / floor:.2f} of it"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where the time of a contended handoff goes, two processes on one lock, zklocks beside the raw floor.

    python -m benchmarks.handoff_legs [--rounds 3] [--seconds 2]

Each process takes and releases the lock in a loop and stamps (wall clock, one machine) when its acquire returns,
when its release request leaves the socket, and when a watch event reaches its connection. For each handoff from
one process to the other, the legs are printed as medians in ms:

- ``release sent``: from the holder's acquire returning to its release request leaving its socket (zklocks
  releases without waiting for the answer: the request goes out once the connection thread gets the interpreter);
- ``to event``: from that send to the watch event reaching the waiter's connection (the server's commit, with
  its ``forceSync`` write to disk, and the notification);
- ``to acquired``: from the event to the waiter's acquire returning.

Rounds alternate between the two locks on a server started for the run (default ``forceSync``), so that the
server's disk latency, which moves from second to second on a shared machine, weighs on both alike.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import multiprocessing
import statistics
import threading
import time

from benchmarks.servers import zookeeper
from benchmarks.workloads import configure_django, floor_client, open_namespace

_RELEASES = (2, 14)  # the opcodes of a release: delete, and the multi that writes its mark and deletes


def _cycle(kind: str, hosts: str, name: str):
    """(acquire, release) of lock ``name``: zklocks' ``zk_lock``, or the floor of benchmarks.workloads."""
    from zklocks import lock_path, zk_lock

    if kind == "zklocks":
        lock = zk_lock(name)
        return lock.acquire, lock.release
    client = floor_client(hosts)
    base = lock_path(name)
    client.ensure_path(base)
    mine: list[str] = []

    def acquire() -> None:
        mine[:] = [client.create(base + "/n-", ephemeral=True, sequence=True)]
        queue = sorted(client.get_children(base))
        i = queue.index(mine[0].rsplit("/", 1)[1])
        if i > 0:
            gone = threading.Event()
            if client.exists(f"{base}/{queue[i - 1]}", watch=lambda event: gone.set()):
                gone.wait()

    return acquire, lambda: client.delete(mine[0])


def _stamp_connection(stamps: dict[str, list[float]]) -> None:
    """Stamp each release leaving the socket and each watch event read, on every connection of this process.
    Installed after the first cycle: kazoo's self-check (zklocks.client.kazoo_adapter.compat) runs before it."""
    from kazoo.protocol.connection import ConnectionHandler

    write, read_event = ConnectionHandler._write, ConnectionHandler._read_watch_event

    def _write(self, msg, timeout):
        out = write(self, msg, timeout)
        if int.from_bytes(bytes(msg[8:12]), "big", signed=True) in _RELEASES:
            stamps["sent"].append(time.time())
        return out

    def _read_watch_event(self, buffer, offset):
        stamps["event"].append(time.time())
        return read_event(self, buffer, offset)

    ConnectionHandler._write, ConnectionHandler._read_watch_event = _write, _read_watch_event


def _contender(kind: str, hosts: str, name: str, start_at: float, stop_at: float, out) -> None:
    configure_django(hosts)
    acquire, release = _cycle(kind, hosts, name)
    acquire()
    release()
    stamps: dict[str, list[float]] = {"acquired": [], "sent": [], "event": []}
    _stamp_connection(stamps)
    while time.time() < start_at:
        time.sleep(0.001)
    while time.time() < stop_at:
        acquire()
        stamps["acquired"].append(time.time())
        release()
    out.put(stamps)


def _after(times: list[float], t: float) -> float | None:
    i = bisect.bisect_right(times, t)
    return times[i] if i < len(times) else None


def legs(kind: str, hosts: str, seconds: float) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 5  # the interpreters start and connect first
    name = f"legs-{kind}:{int(start_at * 1000)}"
    procs = [
        ctx.Process(target=_contender, args=(kind, hosts, name, start_at, start_at + seconds, out), daemon=True)
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    stamps = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    acquired = sorted((t, who) for who, s in enumerate(stamps) for t in s["acquired"])
    sent, to_event, to_acquired = [], [], []
    for (t_held, holder), (t_next, waiter) in itertools.pairwise(acquired):
        if holder == waiter:
            continue
        t_sent = _after(stamps[holder]["sent"], t_held)
        t_event = _after(stamps[waiter]["event"], t_sent) if t_sent is not None else None
        if t_sent is None or t_event is None or not t_held < t_sent < t_event < t_next:
            continue  # the waiter was not waiting on a watch (it found the lock free): no legs to split
        sent.append(t_sent - t_held)
        to_event.append(t_event - t_sent)
        to_acquired.append(t_next - t_event)
    ms = lambda xs: 1e3 * statistics.median(xs) if xs else float("nan")  # noqa: E731
    return {
        "handoffs/s": len(acquired) / seconds,
        "release sent": ms(sent),
        "to event": ms(to_event),
        "to acquired": ms(to_acquired),
        "handoffs split": len(sent),
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.handoff_legs", description=__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0)
    args = p.parse_args()
    from zklocks.testing.runtime import start_on, stopped_on_exit

    with stopped_on_exit() as stack:
        zk = start_on(stack, zookeeper())
        configure_django(zk.hosts)
        open_namespace(zk.hosts)
        print(f"{'round':>5} {'lock':<8} {'handoffs/s':>10} {'release sent':>12} {'to event':>9} {'to acquired':>11}")
        for r in range(args.rounds):
            for kind in ("zklocks", "floor"):
                f = legs(kind, zk.hosts, args.seconds)
                print(
                    f"{r + 1:>5} {kind:<8} {f['handoffs/s']:>10.0f} {f['release sent']:>12.2f} {f['to event']:>9.2f} "
                    f"{f['to acquired']:>11.2f}   ({f['handoffs split']:.0f} handoffs split)",
                    flush=True,
                )


if __name__ == "__main__":
    main()

"""The longest silent blip a holder keeps its hold through, idle and busy, per session configuration.

    python -m benchmarks.lease_blips [--phases 4]

The process reaches a standalone server through a TCP proxy; a blip stops the proxy forwarding
(connections stay open, nothing arrives) for a fraction of the session timeout, then heals. ZooKeeper keeps the
session through any blip shorter than the session timeout, so a hold lost to a shorter one is the client's doing.
For each configuration and mode, blips of 30 % to 70 % of the timeout are tried, each at ``--phases`` moments
spread over the lease's renewal cycle; the figure is the longest length that every phase survived. "Busy" runs a
thread that takes and releases another lock in a loop on the same session. Also printed: the lowest lease
remaining seen while idle (what any blip must fit in) and the keeper's requests per second.
"""

from __future__ import annotations

import argparse
import random
import threading
import time

from benchmarks.servers import exit_on_sigterm
from benchmarks.workloads import configure_django

# (the server's tickTime in ms, SESSION_TIMEOUT, TICK_TIME or None): a server negotiates at most 20 ticks.
CONFIGS = [
    (200, 2.0, 0.2),
    (200, 4.0, None),
    (200, 4.0, 0.2),
    (500, 8.0, 0.5),
]
FRACTIONS = [0.3, 0.4, 0.5, 0.6, 0.7]


def _idle_figures(timeout: float) -> tuple[float, float]:
    """Hold for two session timeouts: the lowest lease remaining, and the keeper's requests per second."""
    from zklocks import zk_lock
    from zklocks.client.pools import connections

    with zk_lock("bench:blip:idle"):
        session = connections["default"].session()
        rounds, lowest = session.renewals, float("inf")
        ends = time.monotonic() + 2 * timeout
        while time.monotonic() < ends:
            lowest = min(lowest, session.lease_remaining())
            time.sleep(0.005)
        return lowest, 2 * (session.renewals - rounds) / (2 * timeout)


def _survives(proxy, timeout: float, fraction: float, phases: int, busy: bool, seed: int) -> bool:
    from zklocks import LockLost, zk_lock

    stop = threading.Event()

    def churn() -> None:
        other = zk_lock("bench:blip:busy", timeout=2 * timeout)
        while not stop.is_set():
            try:
                with other:
                    pass
            except Exception:  # noqa: BLE001 - during a blip the churn's own calls fail; only the hold counts
                time.sleep(0.05)

    churner = threading.Thread(target=churn, daemon=True) if busy else None
    lock = zk_lock("bench:blip:held", timeout=3 * timeout)
    rng = random.Random(seed)
    lock.acquire()
    if churner is not None:
        churner.start()
    try:
        for _ in range(phases):
            time.sleep(rng.uniform(0, timeout / 2))
            proxy.partition(refuse_new=False)
            time.sleep(fraction * timeout)
            proxy.heal()
            time.sleep(1.5)
            try:
                lock.ensure_held()
            except LockLost:
                return False
        return True
    finally:
        stop.set()
        if churner is not None:
            churner.join(3 * timeout)
        try:
            lock.release()
        except Exception:  # noqa: BLE001 - a lost hold's release
            pass


def _blip(fraction: float, timeout: float) -> str:
    if not fraction:
        return f"< {FRACTIONS[0]:.0%}"
    return f"{fraction:.0%} ({fraction * timeout:.1f} s)" + (" or more" if fraction == FRACTIONS[-1] else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", type=int, default=4)
    args = parser.parse_args(argv)
    exit_on_sigterm()
    from django.test import override_settings

    from zklocks.client.pools import close_all
    from zklocks.testing import ZkServer
    from zklocks.testing.proxy import TcpProxy

    servers = {}
    rows = []
    try:
        for server_tick, timeout, tick in CONFIGS:
            if server_tick not in servers:
                zk = ZkServer(tick_time=server_tick).start()
                servers[server_tick] = (zk, TcpProxy("127.0.0.1", zk.port).start())
            proxy = servers[server_tick][1]
            configure_django(proxy.hosts)
            alias = {
                "HOSTS": proxy.hosts,
                "NAMESPACE": "/zklocks-bench-blips",
                "SESSION_TIMEOUT": timeout,
                "CONNECT_TIMEOUT": timeout,
                "REAP_INTERVAL": 0,
                **({"TICK_TIME": tick} if tick else {}),
            }
            with override_settings(ZKLOCKS={"default": alias}):
                lowest, rate = _idle_figures(timeout)
                close_all()
                longest = {}
                for mode in ("idle", "busy"):
                    longest[mode] = 0.0
                    for fraction in FRACTIONS:
                        ok = _survives(proxy, timeout, fraction, args.phases, mode == "busy", seed=int(fraction * 10))
                        close_all()
                        if not ok:
                            break
                        longest[mode] = fraction
                rows.append((timeout, tick, lowest, rate, longest["idle"], longest["busy"]))
                print(
                    f"timeout {timeout:g} s, TICK_TIME {tick or 'unset'}: lowest lease remaining {lowest:.2f} s, "
                    f"keeper {rate:.2f} requests/s, longest blip survived idle {longest['idle']:.0%}, "
                    f"busy {longest['busy']:.0%} of the timeout",
                    flush=True,
                )
    finally:
        for zk, proxy in servers.values():
            proxy.stop()
            zk.cleanup()
    print("\n| SESSION_TIMEOUT | TICK_TIME | lowest lease left (idle) | keeper req/s | longest blip, idle | busy |")
    print("| --- | --- | --- | --- | --- | --- |")
    for timeout, tick, lowest, rate, idle, busy in rows:
        print(
            f"| {timeout:g} s | {f'{tick:g} s' if tick else 'unset'} | {lowest:.2f} s | {rate:.2f} | "
            f"{_blip(idle, timeout)} | {_blip(busy, timeout)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

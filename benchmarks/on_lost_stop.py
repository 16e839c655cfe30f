"""From the loss to the stop: how long after (or before) the lease's end on_lost stops the work.

    python -m benchmarks.on_lost_stop [--rounds 10]

Each round holds a lock, freezes the ZooKeeper server (SIGSTOP: no renewal is answered, so the lease runs out),
and times the stop against the lease deadline (negative: the work stopped before the lease ended):

- thread: ``with zk_lock(..., on_lost="cancel")`` around pure Python work that calls ``checkpoint()`` at each
  step; the stop is when LockLost is caught;
- thread in time.sleep(3) and in a blocking socket read before its checkpoints: what a step that does not check
  does to the stop (it comes at the first checkpoint after the call returns);
- asyncio: ``async with zk_lock(..., on_lost="cancel")`` around ``await asyncio.sleep(30)`` and around a loop
  that yields with ``await asyncio.sleep(0)``;
- terminate: a SingleExecutionTask with ``on_lost="terminate"`` in a real prefork Celery worker; the stop is the
  moment its pool child was first seen ended (polled every millisecond), against the lease deadline the task
  last reported.

Every figure of one mode comes from one run; the server's SESSION_TIMEOUT is 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time
from pathlib import Path

from benchmarks.servers import RedisServer, exit_on_sigterm

SESSION_TIMEOUT = 2.0


def _configure(hosts: str) -> None:
    from django.conf import settings

    settings.configure(
        SECRET_KEY="zklocks-bench",  # noqa: S106 - the aliases derive their identity from it (guarded by default)
        INSTALLED_APPS=["zklocks"],
        USE_TZ=True,
        ZKLOCKS={
            "default": {
                "HOSTS": hosts,
                "NAMESPACE": "/zklocks-bench-onlost",
                "SESSION_TIMEOUT": SESSION_TIMEOUT,
                "CONNECT_TIMEOUT": 2.0,
                "REAP_INTERVAL": 0,
            }
        },
    )
    import django

    django.setup()


def _frozen(zk, body):
    """Run ``body`` (which must pause the server through ``freeze``) and resume the server whatever happens."""
    try:
        return body()
    finally:
        zk.resume()


def thread_round(zk, i: int, work: str) -> float:
    from zklocks import LockLost, checkpoint, zk_lock
    from zklocks.client import clock

    def steps(seconds: float) -> None:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            checkpoint()

    lock = zk_lock(f"bench:thread:{work}:{i}", on_lost="cancel", timeout=20)
    stopped = 0.0
    server = None
    if work == "recv":
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
    try:
        with lock:
            zk.pause()
            try:
                if work == "spin":
                    steps(20)
                elif work == "sleep":
                    time.sleep(3)
                    steps(20)
                else:
                    assert server is not None  # noqa: S101 - narrows the type: the socket modes made it
                    peer = socket.create_connection(server.getsockname())
                    peer.settimeout(3)
                    try:
                        peer.recv(1)  # nobody sends: blocked in C for 3 s
                    except TimeoutError:
                        pass
                    steps(20)
                raise AssertionError("not stopped")
            except LockLost as exc:
                stopped = clock.now() - exc.lease_end  # type: ignore[attr-defined]
                raise
            finally:
                zk.resume()
    except LockLost:
        return stopped  # the with statement passes the checkpoint's LockLost on
    finally:
        if server is not None:
            server.close()
    raise AssertionError("not stopped")


def asyncio_round(zk, i: int, work: str) -> float:
    from zklocks import LockLost, zk_lock
    from zklocks.client import clock

    async def main() -> float:
        lock = zk_lock(f"bench:aio:{work}:{i}", on_lost="cancel", timeout=20)
        try:
            async with lock:
                zk.pause()
                try:
                    if work == "sleep":
                        await asyncio.sleep(30)
                    else:
                        ends = time.monotonic() + 20
                        while time.monotonic() < ends:
                            await asyncio.sleep(0)
                finally:
                    zk.resume()
        except LockLost as exc:
            return clock.now() - exc.lease_end  # type: ignore[attr-defined]
        raise AssertionError("not stopped")

    return asyncio.run(main())


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def terminate_rounds(zk, rounds: int) -> list[float]:
    from tests.support.celery_app import app, terminate_on_loss
    from tests.support.celery_harness import new_key, running_workers

    redis = RedisServer()
    redis.start()
    try:
        app.conf.broker_url = f"{redis.url}/0"
        app.conf.result_backend = f"{redis.url}/1"
        figures = []
        prefork = {"pool": "prefork", "concurrency": 1, "queue": "bench-terminate"}
        with running_workers(zk.hosts, redis.url, prefork, session_timeout=SESSION_TIMEOUT) as env:
            for _ in range(rounds):
                key = new_key()
                terminate_on_loss.apply_async((key,), queue="bench-terminate")
                pid = env.wait_records(f"started-{key}", 1, timeout=60)[0]["pid"]
                env.wait_records(f"beat-{key}", 3)
                zk.pause()
                try:
                    ends = time.monotonic() + 20
                    while not _gone(pid):
                        if time.monotonic() > ends:
                            raise AssertionError("the worker process was not ended")
                        time.sleep(0.001)
                    dead_at = time.time()
                finally:
                    zk.resume()
                lease_end = env.records_of(f"beat-{key}")[-1]["lease_end"]
                figures.append(dead_at - lease_end)
                time.sleep(0.5)  # the pool starts its new child
        return figures
    finally:
        redis.cleanup()


def _row(label: str, figures: list[float]) -> str:
    ms = [1000 * f for f in figures]
    return (
        f"{label:<34} {len(ms):>3}  median {statistics.median(ms):+8.1f} ms  "
        f"min {min(ms):+8.1f}  max {max(ms):+8.1f}  (stop - lease end)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    exit_on_sigterm()
    from zklocks.testing import ZkServer

    zk = ZkServer(tick_time=100).start()
    try:
        _configure(zk.hosts)
        rows = [
            ("thread, pure Python with checkpoint()", [thread_round(zk, i, "spin") for i in range(args.rounds)]),
            ("thread, in time.sleep(3)", [thread_round(zk, i, "sleep") for i in range(min(3, args.rounds))]),
            ("thread, in a blocking recv (3 s)", [thread_round(zk, i, "recv") for i in range(min(3, args.rounds))]),
            ("asyncio, await asyncio.sleep(30)", [asyncio_round(zk, i, "sleep") for i in range(args.rounds)]),
            ("asyncio, loop of asyncio.sleep(0)", [asyncio_round(zk, i, "yield") for i in range(args.rounds)]),
            ("terminate, prefork child", terminate_rounds(zk, args.rounds)),
        ]
        for label, figures in rows:
            print(_row(label, figures), flush=True)
    finally:
        zk.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Servers the benchmark starts for itself: ZooKeeper (default forceSync, as in production) and Redis."""

from __future__ import annotations

from tests.support.redis_server import RedisServer
from zklocks.testing import ZkServer
from zklocks.testing.runtime import stop_on_signals

__all__ = ["RedisServer", "exit_on_sigterm", "start_zookeeper", "zookeeper"]


def exit_on_sigterm() -> None:
    """Turn SIGTERM (``timeout``'s signal) into SystemExit, so the ``finally`` that stops the servers runs."""
    stop_on_signals()


def zookeeper() -> ZkServer:
    """The benchmarks' ZooKeeper, not started yet."""
    # tickTime 500 ms allows sessions up to 10 s (20 ticks); forceSync stays on (the default); the JVM's own
    # defaults, as Debian's zookeeper service runs it (a test server's JVM stops at the first compiler).
    return ZkServer(tick_time=500, force_sync=True, jvm_options=())


def start_zookeeper() -> ZkServer:
    return zookeeper().start()

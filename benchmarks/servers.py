"""Servers the benchmark starts for itself: ZooKeeper (default forceSync, as in production) and Redis."""

from __future__ import annotations

from zklocks.testing import ZkServer
from zklocks.testing.redis import RedisServer

__all__ = ["RedisServer", "start_zookeeper"]


def start_zookeeper() -> ZkServer:
    # tickTime 500 ms allows sessions up to 10 s (20 ticks); forceSync stays on (the default).
    return ZkServer(tick_time=500, force_sync=True).start()

"""Servers the benchmark starts for itself: ZooKeeper (default forceSync, as in production) and Redis."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time

from ..testing import ZkServer, free_port


def start_zookeeper() -> ZkServer:
    # Sessions of up to 20 ticks: 2 s ticks allow the bench's 10 s sessions; forceSync stays on (the default).
    return ZkServer(tick_time=500, force_sync=True).start()


class RedisServer:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="zklocks-redis-")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run `apt-get install -y redis-server`")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        import redis

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                redis.Redis(port=self.port).ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)

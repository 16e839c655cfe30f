"""A real Redis server for the Celery tests and the benchmarks (Debian's ``redis-server``), on a free port, in
its own process group."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from zklocks.testing.runtime import start_group, stop_group
from zklocks.testing.server import free_port
from zklocks.testing.startup import poll_until

REDIS_SERVER = os.environ.get("ZKLOCKS_REDIS_SERVER", "redis-server")


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="zklocks-redis-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def ping(self, timeout: float = 0.5) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self, timeout: float = 20.0) -> RedisServer:
        if shutil.which(REDIS_SERVER) is None:
            raise RuntimeError("redis-server is not installed: run `apt-get install -y redis-server` (make test does)")
        log = open(self.dir / "redis.log", "ab")
        self.proc = start_group(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--daemonize",
                "no",
                "--protected-mode",
                "no",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        message = f"redis-server on port {self.port} did not start within {timeout}s"
        poll_until(self.ping, self.dir / "redis.log", message, timeout, proc=self.proc, stop=self.stop)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_group(self.proc)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()

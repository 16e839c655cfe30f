"""The stores the comparison starts for itself, from Debian's packages, on free ports, each in its own process group.

Every store offers ``start()``, ``kill()`` (kill -9 of its whole process group) and ``restart()`` (start again on the
same ports and data directory) and ``cleanup()``; a start that fails kills what it spawned, and ``cleanup()`` stops
a store in any state (not started, starting, killed). PostgreSQL and PgBouncer refuse to run as root: as root they run
as ``nobody`` (``setpriv``), in a directory ``nobody`` owns.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from benchmarks.servers import RedisServer, zookeeper
from zklocks.testing import free_port
from zklocks.testing.startup import poll_until


def _as_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "nobody:nogroup", str(path)], check=True)


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _killpg(proc: subprocess.Popen | None, sig: int = signal.SIGKILL) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


class Process:
    """One server process started from ``argv()`` in its own process group."""

    name = "server"

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"zklocks-compare-{self.name}-"))
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        """One-time set-up before the first start (initdb, configuration files)."""

    def start(self, timeout: float = 60.0):
        if self.proc is None:
            self.prepare()
        log_path = self.dir / "server.log"
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.dir,
            )
        message = f"{self.name} did not answer on {self.port} within {timeout}s"
        # stop: a readiness check that raises (its client library missing, say) must not leave the server running
        poll_until(
            lambda: _listens(self.port) and self.ready(), log_path, message, timeout, proc=self.proc, stop=self.kill
        )
        return self

    def ready(self) -> bool:
        """Whether the server answers, not only listens (asked once it listens)."""
        return True

    def kill(self) -> None:
        _killpg(self.proc)

    def restart(self) -> None:
        self.kill()
        self.start()

    def cleanup(self) -> None:
        _killpg(self.proc, signal.SIGTERM)
        shutil.rmtree(self.dir, ignore_errors=True)


def pg_bin(tool: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: run `make compare` (it installs postgresql)")
    return found[-1]


class Postgres(Process):
    name = "postgres"
    user = "bench"

    def prepare(self) -> None:
        _chown(self.dir)
        subprocess.run(
            [*_as_user(), pg_bin("initdb"), "-D", str(self.dir / "data"), "-U", self.user, "-A", "trust", "-E", "UTF8"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def argv(self) -> list[str]:
        return [
            *_as_user(),
            pg_bin("postgres"),
            "-D",
            str(self.dir / "data"),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.dir}",
            "-c",
            "max_connections=200",
            "-c",
            "shared_buffers=32MB",
        ]

    def ready(self) -> bool:
        ok = subprocess.run(
            [pg_bin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return ok.returncode == 0


class PgBouncer(Process):
    """PgBouncer in transaction pooling in front of ``postgres``: fewer server connections than clients."""

    name = "pgbouncer"

    def __init__(self, postgres: Postgres, pool_size: int = 4) -> None:
        super().__init__()
        self.postgres = postgres
        self.pool_size = pool_size

    def prepare(self) -> None:
        (self.dir / "users.txt").write_text(f'"{Postgres.user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"postgres = host=127.0.0.1 port={self.postgres.port} dbname=postgres\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir}/users.txt\n"
            f"pool_mode = transaction\ndefault_pool_size = {self.pool_size}\nmax_client_conn = 200\n"
            "ignore_startup_parameters = extra_float_digits,options,search_path\n"
            f"logfile = {self.dir}/pgbouncer.log\n"
        )
        _chown(self.dir)

    def argv(self) -> list[str]:
        if shutil.which("pgbouncer") is None:
            raise RuntimeError("pgbouncer is not installed: run `make compare` (it installs pgbouncer)")
        return [*_as_user(), "pgbouncer", str(self.dir / "pgbouncer.ini")]


class Etcd(Process):
    name = "etcd"

    def __init__(self) -> None:
        super().__init__()
        self.peer_port = free_port()

    def argv(self) -> list[str]:
        if shutil.which("etcd") is None:
            raise RuntimeError("etcd is not installed: run `make compare` (it installs etcd-server)")
        client, peer = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.peer_port}"
        return [
            "etcd",
            "--name",
            "compare",
            "--data-dir",
            str(self.dir / "data"),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"compare={peer}",
            # a shorter election timeout lowers the minimum lease TTL (1.5 election timeouts) below 1 s
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
        ]

    def ready(self) -> bool:
        import requests

        try:
            return requests.get(f"http://127.0.0.1:{self.port}/health", timeout=1).json().get("health") == "true"
        except (requests.RequestException, ValueError):
            return False


class Redis:
    """RedisServer (no persistence, as Redis locks are usually run), with kill -9 and a restart on the same port."""

    def __init__(self) -> None:
        self.server = RedisServer()
        self.port = self.server.port

    def start(self) -> Redis:
        self.server.start()
        return self

    def kill(self) -> None:
        _killpg(self.server.proc)
        self.server.proc = None

    def restart(self) -> None:
        self.kill()
        self.server.start()

    def cleanup(self) -> None:
        self.server.cleanup()


class ZooKeeper:
    """zklocks.testing's ZkServer (forceSync on, tickTime 500 ms, as benchmarks/servers.py starts it)."""

    def __init__(self) -> None:
        self.server = zookeeper()
        self.port = self.server.port

    def start(self) -> ZooKeeper:
        self.server.start()
        self.port = self.server.port  # a first start that failed may have moved it
        return self

    def kill(self) -> None:
        self.server.kill()
        self.server.proc = None

    def restart(self) -> None:
        self.server.restart()

    def cleanup(self) -> None:
        self.server.cleanup()

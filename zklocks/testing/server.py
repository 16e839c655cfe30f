"""Real ZooKeeper servers for tests: a standalone server or a 3-node ensemble on loopback.

Uses Debian's ZooKeeper package (``apt-get install zookeeper``). Every server runs in its own process group
with its own data directory and free ports, and ``stop()`` always kills what ``start()`` began.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .runtime import CLASSPATH, JAVA

MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def four_letter(port: int, cmd: str, host: str = "127.0.0.1", timeout: float = 2.0) -> str:
    """Send a four-letter word (srvr, mntr, wchc, cons, ...) and return the answer ('' if none)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(cmd.encode())
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode("utf-8", errors="replace")
    except OSError:
        return ""


def mntr(port: int) -> dict[str, str]:
    out = {}
    for line in four_letter(port, "mntr").splitlines():
        if "\t" in line:
            key, value = line.split("\t", 1)
            out[key.strip()] = value.strip()
    return out


class ZkServer:
    """One ZooKeeper server process (standalone, or a member of a :class:`ZkEnsemble`)."""

    def __init__(
        self,
        *,
        tick_time: int = 200,
        force_sync: bool = False,
        workdir: str | None = None,
        myid: int | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.tick_time = tick_time
        self.force_sync = force_sync
        self.myid = myid
        self.extra = dict(extra or {})
        self._own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="zklocks-zk-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.peers: str = ""  # server.N lines, for ensembles

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def seed(self, cversions: dict[str, int]) -> ZkServer:
        """Before the first start: give the data dir a snapshot in which each path exists with that child
        counter, e.g. ``{"/ns/lock": 2**31 - 4}`` (``snapshot.py``; needs ``javac``)."""
        from .snapshot import seed_snapshot

        if self.proc is not None:
            raise RuntimeError("seed() must come before the server's first start")
        seed_snapshot(self.dir / "data", cversions)
        return self

    def write_config(self) -> Path:
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_time}",
            f"dataDir={data}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "maxClientCnxns=0",
            "initLimit=20",
            "syncLimit=10",
            f"forceSync={'yes' if self.force_sync else 'no'}",
            "autopurge.purgeInterval=0",
            "preAllocSize=1024",
        ]
        lines += [f"{k}={v}" for k, v in self.extra.items()]
        if self.peers:
            lines.append(self.peers)
            (data / "myid").write_text(f"{self.myid}\n")
        cfg = self.dir / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        (self.dir / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
            f"log4j.appender.F.File={self.dir}/server.log\n"
            "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.F.layout.ConversionPattern=%d %p [%t] %c{1}: %m%n\n"
        )
        return cfg

    def spawn(self) -> None:
        """Start the JVM without waiting for it to serve."""
        if self.proc is not None and self.proc.poll() is None:
            return
        cfg = self.write_config()
        if shutil.which(JAVA) is None or not Path(CLASSPATH.split(":")[0]).exists():
            raise RuntimeError("ZooKeeper is not installed: run `apt-get install -y zookeeper` (make test does)")
        log = open(self.dir / "stdout.log", "ab")
        self.proc = subprocess.Popen(
            [
                JAVA,
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                f"-Dlog4j.configuration=file:{self.dir}/log4j.properties",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp",
                CLASSPATH,
                MAIN,
                str(cfg),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def mode(self) -> str | None:
        for line in four_letter(self.port, "srvr", timeout=0.5).splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_serving(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.dir}/stdout.log")
            if self.mode():
                return
            time.sleep(0.1)
        raise RuntimeError(f"ZooKeeper on port {self.port} did not start within {timeout}s")

    def start(self, timeout: float = 60.0) -> ZkServer:
        self.spawn()
        self.wait_serving(timeout)
        return self

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def pause(self) -> None:
        """SIGSTOP: the server freezes with its sockets open (a hung machine)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self) -> None:
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc = None

    def restart(self, timeout: float = 60.0) -> None:
        self.kill()
        self.proc = None
        self.start(timeout)

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ZkServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()


class ZkEnsemble:
    """A 3-node (or n-node) ensemble on loopback, each member in its own process group.

    With ``server_links=True`` the servers reach each other only through proxies the ensemble owns
    (:mod:`zklocks.testing.links`), and a test can partition them: ``cut(i, j)``, ``heal(i, j)``,
    ``isolate(i)``, ``split([[0], [1, 2]])``, ``heal_all()``. Servers are given by index (0-based) or as
    :class:`ZkServer`. Clients keep their direct connections to every server.
    """

    def __init__(
        self, size: int = 3, *, tick_time: int = 200, force_sync: bool = False, server_links: bool = False
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="zklocks-ensemble-"))
        self.servers = [
            ZkServer(tick_time=tick_time, force_sync=force_sync, workdir=str(self.dir / f"s{i}"), myid=i)
            for i in range(1, size + 1)
        ]
        self.links = None
        if server_links:
            from .links import ServerLinks

            self.links = ServerLinks(
                [s.myid for s in self.servers if s.myid is not None],
                [free_port() for _ in self.servers],
                [free_port() for _ in self.servers],
            )
            for i, s in enumerate(self.servers):
                s.peers = self.links.peers_for(i)
            return
        peers = "\n".join(f"server.{s.myid}=127.0.0.1:{free_port()}:{free_port()}" for s in self.servers)
        for s in self.servers:
            s.peers = peers

    # -- partitions between servers (server_links=True) --

    def index(self, server: int | ZkServer) -> int:
        return self.servers.index(server) if isinstance(server, ZkServer) else int(server)

    def _links(self):
        if self.links is None:
            raise RuntimeError("this ensemble has no server links: create it with ZkEnsemble(server_links=True)")
        return self.links.links

    def cut(self, i: int | ZkServer, j: int | ZkServer, *, mode: str = "blackhole", one_way: bool = False) -> None:
        """Cut the link between servers i and j (both directions; only i -> j with ``one_way``).
        ``mode="blackhole"`` holds every byte (a real partition); ``mode="reset"`` closes their connections."""
        self._links().cut(self.index(i), self.index(j), mode=mode, one_way=one_way)

    def heal(self, i: int | ZkServer, j: int | ZkServer) -> None:
        self._links().heal(self.index(i), self.index(j))

    def isolate(self, i: int | ZkServer, *, mode: str = "blackhole") -> None:
        """Cut server i from every other server (its clients still reach it)."""
        i = self.index(i)
        for j in range(len(self.servers)):
            if j != i:
                self._links().cut(i, j, mode=mode)

    def split(self, groups: list[list[int | ZkServer]], *, mode: str = "blackhole") -> None:
        """Partition the servers into ``groups``: every link between two groups is cut."""
        idx = [[self.index(s) for s in g] for g in groups]
        for a, group in enumerate(idx):
            for other in idx[a + 1 :]:
                for i in group:
                    for j in other:
                        self._links().cut(i, j, mode=mode)

    def heal_all(self) -> None:
        self._links().heal_all()

    @property
    def hosts(self) -> str:
        return ",".join(s.hosts for s in self.servers)

    def start(self, timeout: float = 90.0) -> ZkEnsemble:
        for s in self.servers:
            s.spawn()
        for s in self.servers:
            s.wait_serving(timeout)
        return self

    def leader(self) -> ZkServer | None:
        for s in self.servers:
            if s.mode() == "leader":
                return s
        return None

    def followers(self) -> list[ZkServer]:
        return [s for s in self.servers if s.mode() == "follower"]

    def wait_quorum(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.leader() is not None:
                return
            time.sleep(0.1)
        raise RuntimeError("ensemble has no leader")

    def restart_all(self, timeout: float = 90.0) -> None:
        for s in self.servers:
            s.kill()
            s.proc = None
        self.start(timeout)

    def cleanup(self) -> None:
        for s in self.servers:
            s.stop()
        if self.links is not None:
            self.links.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ZkEnsemble:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()


def expire_session(hosts: str, client_id: tuple[int, bytes], timeout: float = 10.0) -> None:
    """Expire a session for real: join it from a second client with the same id and password, then close."""
    from kazoo.client import KazooClient

    session_id, password = client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=10.0)
    twin.start(timeout=timeout)
    try:
        if twin.client_id[0] != session_id:
            raise RuntimeError("the session was already gone")
    finally:
        twin.stop()
        twin.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m zklocks.testing.server``: a standalone ZooKeeper for development, until Ctrl-C."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m zklocks.testing.server",
        description="Run a local ZooKeeper for development (Debian's zookeeper package). Prints host:port on "
        "stdout, stops on Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=2181, help="client port; 0 for a free one (default 2181)")
    parser.add_argument(
        "--tick-time",
        type=int,
        default=2000,
        help="tickTime in ms; sessions may last 2 to 20 ticks (default 2000: SESSION_TIMEOUT from 4 to 40 s)",
    )
    parser.add_argument("--data-dir", help="keep the data in this directory (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    port = args.port or free_port()
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            print(f"port {port} is busy (another ZooKeeper?): give --port 0 for a free one", file=sys.stderr)
            return 2
    server = ZkServer(tick_time=args.tick_time, workdir=args.data_dir)
    server.port = port

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        server.start()
        print(server.hosts, flush=True)
        print(
            f"ZooKeeper serving on {server.hosts} (tickTime {args.tick_time} ms, data in {server.dir}); "
            f'settings: ZKLOCKS = {{"default": {{"HOSTS": "{server.hosts}"}}}}. Ctrl-C stops it.',
            file=sys.stderr,
            flush=True,
        )
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(0.5)
        print(f"ZooKeeper exited; see {server.dir}/stdout.log", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except RuntimeError as exc:
        print(f"ZooKeeper did not start: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        server.cleanup()
        print("ZooKeeper stopped", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())

"""Real ZooKeeper servers for tests: a standalone server or a 3-node ensemble on loopback, each server in its own
process group with its own data directory and ports (docs/testing.md, "Servers and ensembles"); ``stop()`` always
kills what ``start()`` began.

A start is over when every server serves *and its own process* listens on its client port (and a member on its
election port, a leader on its quorum port): another process could answer on a port the server failed to bind,
and a server that lost its election port takes part in an election and exits seconds later. Ports are held from
the moment they are picked until the servers spawn (:mod:`zklocks.testing.ports`); a first start that fails all
the same (a server exited, or another socket has one of its ports) is tried again on fresh ports, within the
start's timeout. A failed start also prints its
ZkStartError's text on stderr, before ``cleanup()`` removes the logs.
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

from . import orphans
from . import ports as _ports
from .runtime import CLASSPATH, JAVA, LOG_CLASSPATH, start_group
from .startup import (
    StartedInWith,
    ZkStartError,
    listening_sockets,
    poll_until,
    port_owner,
    socket_inodes,
    start_attempts,
)

MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
SERVING_MODES = ("leader", "follower", "standalone")


def server_classpath() -> str:
    """The servers' class path: ``CLASSPATH`` and, when all of its jars exist, ``LOG_CLASSPATH`` (an SLF4J
    binding, so that the servers write their server.log)."""
    jars = [j for j in LOG_CLASSPATH.split(":") if j]
    if jars and all(os.path.exists(j) for j in jars):
        return ":".join([CLASSPATH, *(j for j in jars if j not in CLASSPATH.split(":"))])
    return CLASSPATH


def free_port() -> int:
    """A port that is free now (bind to port 0, close). Fine for "nothing listens there"; the servers' own ports
    come from :class:`zklocks.testing.ports.Reservation`, held until the server binds them."""
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


# The JVM of a test server: small, and quick to start and to reach speed (the first compiler only). Benchmarks
# pass () instead: the JVM's defaults, as Debian's zookeeper service runs it (JAVA_OPTS="").
TEST_JVM = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class ZkServer(StartedInWith):
    """One ZooKeeper server process (standalone, or a member of a [ZkEnsemble][zklocks.testing.ensemble.ZkEnsemble]).

    ``port`` fixes the client port; by default one is picked and held until the server spawns, and a first
    start that fails (the server exited, or another socket has its port) is tried again on a fresh one.
    """

    def __init__(
        self,
        *,
        tick_time: int = 200,
        force_sync: bool = False,
        workdir: str | None = None,
        myid: int | None = None,
        extra: dict[str, str] | None = None,
        port: int | None = None,
        jvm_options: tuple[str, ...] = TEST_JVM,
    ) -> None:
        self.tick_time = tick_time
        self.jvm_options = jvm_options
        self.force_sync = force_sync
        self.myid = myid
        self.extra = dict(extra or {})
        self._own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="zklocks-zk-"))
        self._reservation: _ports.Reservation | None = None
        if port is None:
            self._reservation = _ports.Reservation(1)
            port = self._reservation.ports[0]
        self.port = port
        # A member's own quorum and election ports (its own server.N line); set by ZkEnsemble.
        self.quorum_port: int | None = None
        self.election_port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.spawned_at: float | None = None  # time.monotonic() of the last spawn
        self.peers: str = ""  # server.N lines, for ensembles
        self._served = False  # once it served, clients know its port: a start never moves it again

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def name(self) -> str:
        return f"server {self.myid}" if self.myid is not None else "the standalone server"

    def ports(self) -> dict[str, int]:
        """Its own ports: ``client``, and for a member ``quorum`` and ``election``."""
        out = {"client": self.port}
        if self.quorum_port is not None:
            out["quorum"] = self.quorum_port
        if self.election_port is not None:
            out["election"] = self.election_port
        return out

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

    def _release_ports(self) -> None:
        if self._reservation is not None:
            self._reservation.release()

    def spawn(self) -> None:
        """Start the JVM without waiting for it to serve."""
        if self.proc is not None and self.proc.poll() is None:
            return
        cfg = self.write_config()
        if shutil.which(JAVA) is None or not Path(CLASSPATH.split(":")[0]).exists():
            raise RuntimeError("ZooKeeper is not installed: run `apt-get install -y zookeeper` (make test does)")
        self._release_ports()
        if self.proc is not None:  # one that ended on its own (a crash, a kill -9 by a test)
            orphans.release(self.proc.pid)
        log = open(self.dir / "stdout.log", "ab")
        own = ", ".join(f"{what} {port}" for what, port in self.ports().items())
        log.write(f"--- {time.strftime('%H:%M:%S')} starting {self.name}: {own}\n".encode())
        log.flush()
        self.proc = start_group(
            [
                JAVA,
                *self.jvm_options,
                f"-Dlog4j.configuration=file:{self.dir}/log4j.properties",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp",
                server_classpath(),
                MAIN,
                str(cfg),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self.spawned_at = time.monotonic()

    def mode(self) -> str | None:
        for line in four_letter(self.port, "srvr", timeout=0.5).splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def owners(self, ports: dict[str, int] | None = None) -> dict[str, str]:
        """Who listens on each of ``ports`` (default: its own): "own" (this server's process), "other", "none",
        or "unknown" (no /proc). One read of the socket tables for all of them."""
        ports = self.ports() if ports is None else ports
        listeners = listening_sockets()  # before the process's own sockets: one it binds meanwhile is not "other"
        if self.proc is None or self.proc.poll() is not None:
            mine: set[str] | None = set()  # no process of its own: any listener is another's
        else:
            mine = socket_inodes(self.proc.pid)
        return {what: port_owner(listeners, mine, port) for what, port in ports.items()}

    def listener(self, port: int) -> str:
        """Who listens on ``port`` (see :meth:`owners`)."""
        return self.owners({"port": port})["port"]

    def serving_mode(self) -> str | None:
        """The server's Mode once it serves on its own ports (its client port; a member's election port, a
        leader's quorum port too), else None. ZkStartError when it never will: its process exited, or another
        socket listens on one of its ports (a follower's quorum port too: it would fail each time it is
        elected)."""
        if self.proc is None:
            raise ZkStartError(f"{self.name} is not running")
        code = self.proc.poll()
        if code is not None:
            raise ZkStartError(f"{self.name} exited with {code}")
        owners = self.owners()
        for what, owner in owners.items():
            if owner == "other":
                raise ZkStartError(f"another socket listens on the {what} port {self.ports()[what]} of {self.name}")
        mode = self.mode()
        if mode not in SERVING_MODES:
            return None
        needed = ["client"]
        if mode in ("leader", "follower") and "election" in owners:
            needed.append("election")
        if mode == "leader" and "quorum" in owners:
            needed.append("quorum")
        if all(owners[what] in ("own", "unknown") for what in needed):
            return mode
        return None  # not bound yet, or given up: then the process exits and the next look says so

    def ready(self) -> bool:
        """True once it serves on its own ports; ZkStartError when it never will (see :meth:`serving_mode`)."""
        return self.serving_mode() is not None

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of its server.log and stdout.log, Java stack frames left out."""
        out = []
        for name in ("server.log", "stdout.log"):
            try:
                text = (self.dir / name).read_text(errors="replace")
            except OSError:
                continue
            kept = [line for line in text.splitlines() if line.strip() and not line.startswith("\tat ")]
            if kept:
                out.append(f"  --- {self.dir / name} (last {min(lines, len(kept))} of {len(kept)} lines)")
                out += ["  " + line for line in kept[-lines:]]
        return "\n".join(out) if out else f"  (no log in {self.dir})"

    def describe(self, *, logs: bool = True, lines: int = 25) -> str:
        """Its process state, mode, who listens on each of its ports, and (``logs``) the tail of its logs."""
        code = None if self.proc is None else self.proc.poll()
        state = "not started" if self.proc is None else "running" if code is None else f"exited with {code}"
        mode = self.mode() if self.proc is not None and code is None else None
        ports = self.ports()
        owners = ", ".join(f"{what} {ports[what]}: {owner}" for what, owner in self.owners(ports).items())
        pid = self.proc.pid if self.proc is not None else "-"
        text = f"{self.name} (pid {pid}, {state}, mode {mode}): {owners}"
        return text + "\n" + self.log_tail(lines) if logs else text

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until it serves on its own ports; ZkStartError (with its state and log) if it does not within
        ``timeout`` or never will. The process is left as it is."""
        poll_until(self.ready, self.describe, f"{self.name} did not serve within {timeout:.0f}s", timeout)

    def _movable(self) -> bool:
        """Whether a failed start may move it to a fresh port: a standalone server on a port it picked (not one
        given, or set on ``.port``) that never served."""
        held = self._reservation is not None and self.port in self._reservation.ports
        return held and not self._served and self.myid is None

    def _repick(self) -> None:
        assert self._reservation is not None  # noqa: S101 for mypy only: called when _movable() said so
        old = self._reservation
        self._reservation = _ports.Reservation(1, avoid=old.ports)
        old.unclaim()
        self.port = self._reservation.ports[0]

    def start(self, timeout: float = 60.0) -> ZkServer:
        """Spawn and wait until it serves on its own ports. A first start on picked ports that fails is killed
        and tried again on a fresh port, all within ``timeout``; ZkStartError (what each try saw, logs
        included, also printed on stderr) when none succeeds, with the server stopped."""

        def attempt(deadline: float) -> None:
            self.spawn()
            poll_until(
                self.ready, None, f"{self.name} did not serve on its own ports in time", deadline - time.monotonic()
            )

        start_attempts(self, attempt, self.kill, self._repick, self._movable, self.describe, timeout)
        self._served = True
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
        """kill -9 (its whole process group), and wait for the process to be gone."""
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        orphans.release(self.proc.pid)

    def stop(self) -> None:
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.kill()
        orphans.release(self.proc.pid)
        self.proc = None

    def wipe(self) -> None:
        """Delete its data (snapshots, transaction logs, epochs), keeping ``myid`` and the config, as a server
        that comes back with an empty disk does. Only while its process is not running."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self.name} is running: kill or stop it before wiping its data")
        data = self.dir / "data"
        if not data.is_dir():
            return
        for entry in data.iterdir():
            if entry.name == "myid":
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def restart(self, timeout: float = 60.0, *, wipe: bool = False) -> None:
        """kill -9 and start again on the same ports; ``wipe=True`` deletes its data in between (:meth:`wipe`)."""
        self.kill()
        self.proc = None
        if wipe:
            self.wipe()
        self.start(timeout)

    def cleanup(self) -> None:
        self.stop()
        if self._reservation is not None:
            self._reservation.unclaim()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


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
    """``python -m zklocks.testing.server``: a standalone ZooKeeper for development, until Ctrl-C (its options and
    its data directory: :mod:`zklocks.testing.devserver`)."""
    from .devserver import run

    return run(ZkServer, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""Starting a ZooKeeper ensemble so that a failed start says why, and a start that lost a port is tried again.

``ZkEnsemble`` picks its servers' ports with ``free_port()`` (bind to port 0, close) and the JVMs bind them
seconds later. In between, the port is free for anyone: the ensemble's own link proxies bind port 0 right after
the server ports were picked (and may get one of them), as may any other socket on the machine. A server that
cannot bind its client port exits at once; one that cannot bind its election port takes part in an election,
may even lead for a moment, and exits with code 14 a few seconds later ("I won't be able to participate in
leader election any longer"); one that cannot bind its quorum port fails every time it is elected.

``start_ensemble()`` therefore

- picks the ports again while two of them are the same or one cannot be bound right now;
- starts the servers with an SLF4J binding on the class path, so that each writes the ``server.log`` its
  ``log4j.properties`` asks for (Debian's zookeeper.jar only brings slf4j-api: without a binding nothing is
  logged), and prints the tail of every server's log when the start fails;
- waits until one server leads, the others follow, and every server process itself listens on its client and
  election ports (the leader on its quorum port too), failing at once when a server has exited or another
  socket holds one of its ports;
- on failure kills the servers (each in its own process group) and tries once more with fresh ports, within a
  bounded time per attempt.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import zklocks.testing.server as zk_server_module
from zklocks.testing import ZkEnsemble

LOG_JARS = ("/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar")
_OWN_LINE = re.compile(r"^server\.(\d+)=[^:]+:(\d+):(\d+)", re.MULTILINE)


class EnsembleStartError(RuntimeError):
    pass


@contextmanager
def server_logging():
    """While spawning: the servers' class path with an SLF4J binding (log4j 1.2), when Debian has both jars."""
    if all(os.path.exists(jar) for jar in LOG_JARS):
        with mock.patch.object(zk_server_module, "CLASSPATH", ":".join([zk_server_module.CLASSPATH, *LOG_JARS])):
            yield
    else:
        yield


def server_ports(server) -> dict[str, int]:
    """A member's own ports: client, quorum and election (its own ``server.N`` line)."""
    ports = {"client": server.port}
    for sid, quorum, election in _OWN_LINE.findall(server.peers):
        if int(sid) == server.myid:
            ports.update(quorum=int(quorum), election=int(election))
    return ports


def port_problem(ens: ZkEnsemble) -> str | None:
    """Why the ports of a not yet started ensemble cannot all be bound by its servers, or None."""
    ports = [p for s in ens.servers for p in server_ports(s).values()]
    if ens.links is not None:
        ports += [p.port for p in ens.links.links.proxies]  # bound and held by the proxies
    if len(set(ports)) != len(ports):
        return f"a port was picked twice: {sorted(p for p in set(ports) if ports.count(p) > 1)}"
    for s in ens.servers:
        for what, port in server_ports(s).items():
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM's ServerSocket
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError as exc:
                    return f"server {s.myid}'s {what} port {port} is taken: {exc}"
    return None


def fresh_ensemble(size: int, tries: int = 20, **options) -> ZkEnsemble:
    for _ in range(tries):
        ens = ZkEnsemble(size, **options)
        if port_problem(ens) is None:
            return ens
        ens.cleanup()
    raise EnsembleStartError(f"no free set of ports for a {size}-server ensemble in {tries} tries")


def _listening_inodes(port: int) -> set[str]:
    """Inodes of the sockets listening on 127.0.0.1:port (or any address), from /proc/net/tcp and tcp6."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def _socket_inodes(pid: int) -> set[str] | None:
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    out = set()
    for name in names:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def listener(server, port: int) -> str:
    """'own' if the server's process listens on ``port``, 'other' if another socket does, 'none' if no one does,
    'unknown' without /proc."""
    mine = _socket_inodes(server.proc.pid) if server.proc is not None else None
    if mine is None:
        return "unknown"
    inodes = _listening_inodes(port)
    if not inodes:
        return "none"
    return "own" if inodes & mine else "other"


def log_tail(server, lines: int = 25) -> str:
    """The last ``lines`` lines of the server's logs, stack frames left out."""
    out = []
    for name in ("server.log", "stdout.log"):
        path = Path(server.dir) / name
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        kept = [line for line in text.splitlines() if line.strip() and not line.startswith("\tat ")]
        if kept:
            out.append(f"  --- {name} (last {min(lines, len(kept))} of {len(kept)} lines)")
            out += ["  " + line for line in kept[-lines:]]
    return "\n".join(out) if out else "  (no log)"


def describe(ens: ZkEnsemble, *, logs: bool = True) -> str:
    """Each server: ports, process state, mode, who listens on its ports, and the tail of its logs."""
    out = []
    for s in ens.servers:
        code = None if s.proc is None else s.proc.poll()
        state = "not started" if s.proc is None else "running" if code is None else f"exited with {code}"
        ports = server_ports(s)
        owners = ", ".join(f"{what} {port}: {listener(s, port)}" for what, port in ports.items())
        out.append(f"server {s.myid} (pid {s.proc.pid if s.proc else '-'}, {state}, mode {s.mode()}): {owners}")
        if logs:
            out.append(log_tail(s))
    return "\n".join(out)


def ensemble_ready(ens: ZkEnsemble) -> bool:
    """True once the ensemble serves with its servers on their own ports; EnsembleStartError when it never can
    (a server exited, or another socket listens on one of its ports)."""
    for s in ens.servers:
        if s.proc is None or s.proc.poll() is not None:
            raise EnsembleStartError(f"server {s.myid} exited with {s.proc.returncode if s.proc else None}")
    modes = [s.mode() for s in ens.servers]
    if modes.count("leader") != 1 or modes.count("follower") != len(modes) - 1:
        return False
    ready = True
    for s, mode in zip(ens.servers, modes, strict=True):
        for what, port in server_ports(s).items():
            owner = listener(s, port)
            if owner == "other":  # a follower's quorum port too: it would fail each time it is elected
                raise EnsembleStartError(f"another socket listens on server {s.myid}'s {what} port {port}")
            if owner == "none" and (what != "quorum" or mode == "leader"):
                ready = False  # not bound yet (or given up: then the process exits and a next round says so)
    return ready


def start_ensemble(size: int = 3, *, attempts: int = 2, timeout: float = 60.0, **options) -> ZkEnsemble:
    """A started ``ZkEnsemble(size, **options)`` with a leader and followers, each server on its own ports.

    Each attempt has ``timeout`` seconds; a failed one is cleaned up (process groups killed) and the next gets
    fresh ports. EnsembleStartError with what each attempt saw, logs included, when none succeeds.
    """
    failures = []
    for attempt in range(1, attempts + 1):
        ens = fresh_ensemble(size, **options)
        began = time.monotonic()
        started = False
        try:
            with server_logging():
                for s in ens.servers:
                    s.spawn()
            deadline = began + timeout
            while not ensemble_ready(ens):
                if time.monotonic() > deadline:
                    raise EnsembleStartError(f"no leader with {size - 1} followers within {timeout:.0f}s")
                time.sleep(0.1)
            started = True
            return ens
        except Exception as exc:
            failures.append(f"attempt {attempt} ({time.monotonic() - began:.1f}s): {exc}\n{describe(ens)}")
            print(f"ZooKeeper ensemble, {failures[-1]}", file=sys.stderr, flush=True)
        finally:
            if not started:
                ens.cleanup()
    raise EnsembleStartError(f"the {size}-server ensemble did not start:\n" + "\n".join(failures))

"""The servers' zoo.cfg as the lease sees it: tickTime and session bounds, read through the ``conf`` four-letter
word, for ``manage.py zklocks_check`` and the deploy checks: zklocks.E017 refuses what the lease's relay gap
(lease.relay_gap) cannot cover, W004 warns of servers that negotiate different session timeouts (safe: the lease
counts on the shortest). See docs/reliability.md, "The tick when `TICK_TIME` is not set" and "Mixed session
timeouts".

Reading is :func:`read`; judging is :func:`lease_problems`, a pure function of the servers' settings.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

DEFAULT_PORT = 2181


@dataclass(frozen=True)
class ServerConf:
    """What one server's ``conf`` says about sessions, in milliseconds as in zoo.cfg."""

    host: str
    tick_ms: int
    min_session_ms: int
    max_session_ms: int

    def negotiates(self, requested: float) -> float:
        """The session timeout (seconds) this server gives a client that asks for ``requested`` seconds."""
        ms = int(requested * 1000)
        return max(self.min_session_ms, min(ms, self.max_session_ms)) / 1000.0


def parse(host: str, text: str) -> ServerConf | None:
    """A ServerConf from the answer to ``conf`` (``key=value`` lines), or None without the three settings."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    try:
        tick = int(values["tickTime"])
        low = int(values.get("minSessionTimeout", -1))
        high = int(values.get("maxSessionTimeout", -1))
    except (KeyError, ValueError):
        return None
    # As ZooKeeper itself: -1 (or absent) means 2 and 20 ticks.
    return ServerConf(host, tick, low if low > 0 else 2 * tick, high if high > 0 else 20 * tick)


def split_hosts(hosts: str) -> list[tuple[str, int]]:
    """(host, port) of each member of a HOSTS string (``zk1:2181,zk2``, ``[::1]:2181``)."""
    out = []
    for part in hosts.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("["):
            name, _, rest = part[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") else DEFAULT_PORT
        elif part.count(":") == 1:
            name, port_text = part.split(":")
            port = int(port_text)
        else:
            name, port = part, DEFAULT_PORT
        out.append((name, port))
    return out


def read(host: str, port: int, timeout: float) -> ServerConf | str:
    """The server's ``conf``, or why it could not be read (unreachable, TLS only, not whitelisted)."""
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"conf")
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
    except OSError as exc:
        return f"{where}: {exc}"
    text = b"".join(chunks).decode("utf-8", errors="replace")
    found = parse(where, text)
    if found is not None:
        return found
    if "whitelist" in text:
        return f"{where} does not answer `conf` (add it to 4lw.commands.whitelist)"
    return f"{where} gave no answer to `conf`" + (f": {text.strip()[:200]!r}" if text.strip() else "")


def lease_problems(
    servers: list[ServerConf], session_timeout: float, tick_time: float | None
) -> tuple[list[str], list[str]]:
    """(problems, notes) of an alias whose HOSTS are ``servers``. A problem is a configuration under which the
    lease could outlive the session; a note, one under which sessions get different timeouts."""
    if not servers:
        return [], []
    problems: list[str] = []
    notes: list[str] = []
    slowest = max(servers, key=lambda s: s.tick_ms)
    tick = slowest.tick_ms / 1000.0
    if tick_time is None:
        shortest = min(servers, key=lambda s: s.negotiates(session_timeout))
        timeout = shortest.negotiates(session_timeout)
        if timeout < 2 * tick:
            problems.append(
                f"{shortest.host} negotiates a {timeout:g}s session (minSessionTimeout "
                f"{shortest.min_session_ms} ms, maxSessionTimeout {shortest.max_session_ms} ms), less than twice "
                f"the tickTime of {slowest.host} ({slowest.tick_ms} ms): without TICK_TIME, lease proofs wait "
                f"{timeout / 2:g}s for the leader's PING, shorter than a tick; set TICK_TIME={tick:g}"
            )
    elif tick_time < tick:
        problems.append(
            f"TICK_TIME={tick_time:g}s is shorter than the tickTime of {slowest.host} ({slowest.tick_ms} ms): lease "
            f"proofs would not wait for the leader's PING; set TICK_TIME={tick:g}"
        )
    given = {s.host: s.negotiates(session_timeout) for s in servers}
    if len(set(given.values())) > 1:
        notes.append(
            f"the servers negotiate different session timeouts for SESSION_TIMEOUT={session_timeout:g}s ("
            + ", ".join(f"{host} {t:g}s" for host, t in given.items())
            + "): a session's lease counts on the shortest it has negotiated on any connection; give all servers "
            "the same minSessionTimeout and maxSessionTimeout once the rolling change is over"
        )
    return problems, notes


def read_all(hosts: str, timeout: float) -> tuple[list[ServerConf], list[str]]:
    """Read every server of a HOSTS string: the confs read, and why each of the others is unknown."""
    servers: list[ServerConf] = []
    unread: list[str] = []
    for host, port in split_hosts(hosts):
        found = read(host, port, timeout)
        if isinstance(found, ServerConf):
            servers.append(found)
        else:
            unread.append(found)
    return servers, unread

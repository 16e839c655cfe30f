"""Loopback ports for the test servers, held until the server processes are about to bind them.

A port found with "bind to port 0, close" is free for anyone until the JVM binds it seconds later: the link
proxies of an ensemble (which bind port 0 too), a client's outgoing connection, a second pick. So the ports of
a server or an ensemble are

- picked together and held: each is a listening socket of this process until just before the servers spawn,
  so two picks are never the same port and nothing binds one meanwhile;
- picked below the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``) where it leaves room:
  no ``bind(port 0)`` and no outgoing connection on the machine is ever given one of them, before the server
  binds it or later (a follower binds its quorum port only once it is elected);
- remembered while their servers live (:func:`claimed`), so that later picks and the proxies of this process
  (:func:`listening_socket`) stay off them.
"""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Iterable
from pathlib import Path

HOST = "127.0.0.1"
MIN_RANGE = 2000  # fewer ports than this below the ephemeral range: pick ephemeral ports (port 0) instead
LOWEST = 10000

_lock = threading.Lock()
_claimed: set[int] = set()
_random = random.Random()  # noqa: S311 port picking, no secret


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def pick_range() -> tuple[int, int] | None:
    """The ports [low, high) the servers' ports are picked from, or None to let the kernel pick (port 0)."""
    low, _ = ephemeral_range()
    start = max(LOWEST, low - 12000)
    return (start, low) if low - start >= MIN_RANGE else None


def claim(ports: Iterable[int]) -> None:
    with _lock:
        _claimed.update(ports)


def unclaim(ports: Iterable[int]) -> None:
    with _lock:
        _claimed.difference_update(ports)


def claimed() -> frozenset[int]:
    """The ports of this process's servers (held, or given to a server process)."""
    with _lock:
        return frozenset(_claimed)


def _try_hold(port: int) -> socket.socket | None:
    # No SO_REUSEADDR, and listening: no other socket can bind the port while this one holds it. Closed without
    # ever accepting a connection, it leaves nothing behind (no TIME_WAIT) for the server's own bind.
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((HOST, port))
        s.listen(1)
    except OSError:
        s.close()
        return None
    return s


def bindable(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on ``host:port`` now. The probe binds and listens as ZooKeeper does, with
    SO_REUSEADDR: the connections a server left behind when it stopped a moment ago (TIME_WAIT and the other
    states of a closed connection, owned by no process) do not make the port busy, a socket listening there (on
    this address or on any) does. Without SO_REUSEADDR, a ``bind`` fails for a minute after a server that had
    clients was stopped, though the server itself could start there at once."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(1)  # Linux checks listeners again here; closed without accepting, it leaves nothing behind
        return True
    except OSError:
        return False
    finally:
        s.close()


class Reservation:
    """``n`` distinct loopback ports, each held by a listening socket until :meth:`release` and claimed (see
    :func:`claimed`) until :meth:`unclaim`."""

    def __init__(self, n: int, *, avoid: Iterable[int] = (), tries: int = 500) -> None:
        self._socks: list[socket.socket] = []
        self.ports: list[int] = []
        avoid = set(avoid)
        span = pick_range()
        try:
            for _ in range(tries):
                if len(self._socks) == n:
                    break
                port = _random.randrange(*span) if span else 0
                if port and (port in avoid or port in self.ports or port in claimed()):
                    continue
                s = _try_hold(port)
                if s is None:
                    continue
                got = s.getsockname()[1]
                if got in avoid or got in claimed():
                    s.close()
                    continue
                self._socks.append(s)
                self.ports.append(got)
            if len(self._socks) != n:
                raise RuntimeError(f"no {n} free loopback ports in {tries} tries (range {span or 'ephemeral'})")
        except BaseException:
            self.release()
            raise
        claim(self.ports)

    def release(self) -> None:
        """Close the held sockets: the ports are free for the servers to bind (they stay claimed)."""
        socks, self._socks = self._socks, []
        for s in socks:
            s.close()

    def unclaim(self) -> None:
        self.release()
        unclaim(self.ports)


def listening_socket(port: int = 0, backlog: int = 64, tries: int = 20) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:``port`` (SO_REUSEADDR); with port 0, on a port no server of this
    process uses (:func:`claimed`)."""
    for _ in range(tries):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((HOST, port))
            if port == 0 and s.getsockname()[1] in claimed():
                s.close()
                continue
            s.listen(backlog)
            return s
        except BaseException:
            s.close()
            raise
    raise RuntimeError(f"no free port outside this process's servers' ports in {tries} tries")


def close_listener(s: socket.socket) -> None:
    """Close a listening socket and wake the thread blocked in its ``accept()``: on Linux, ``close()`` alone
    leaves that call waiting (and the port listening) for as long as the process lives."""
    for end in (lambda: s.shutdown(socket.SHUT_RDWR), s.close):
        try:
            end()
        except OSError:
            pass

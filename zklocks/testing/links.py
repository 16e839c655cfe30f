"""Proxies on the links *between* the servers of an ensemble, so a test can partition servers from each other.
The wiring (server i reaches server j only through a proxy P(i->j) that only i uses) and the faults (``cut``,
``heal``, "blackhole", "reset"): docs/reliability.md, "Set-up", and docs/testing.md, "Servers and ensembles".

Why the election proxy rewrites the address announced in the handshake: the server with the larger id keeps the
election connection; when the smaller one connects first, the larger one closes it and connects back to the
announced address (not the one in its zoo.cfg), which the rewrite points at the reverse proxy P(j->i). A
blackholed link accepts new connections and holds them without reaching the other server (like SYNs that get no
answer), and closes them at heal. Client ports are not proxied.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

from .ports import close_listener, listening_socket

ELECTION_HEADER = struct.Struct(">qqi")  # protocol version (negative), server id, length of the address
QUORUM_CONNECT_WINDOW = 3.0  # seconds a quorum proxy keeps trying to reach a leader that does not listen yet


class Links:
    """The blocked directions between servers, shared by every proxy of an ensemble. Servers are 0-based."""

    def __init__(self) -> None:
        self.blocked: set[tuple[int, int]] = set()  # (src, dst): nothing passes from src to dst
        self.refuse: set[tuple[int, int]] = set()  # directions cut with "reset": new connections closed
        self.lock = threading.Lock()
        self.proxies: list[PeerProxy] = []

    def is_blocked(self, src: int, dst: int) -> bool:
        return (src, dst) in self.blocked

    def cut(self, i: int, j: int, *, mode: str = "blackhole", one_way: bool = False) -> None:
        if mode not in ("blackhole", "reset"):
            raise ValueError(f"mode must be 'blackhole' or 'reset', not {mode!r}")
        if i == j:
            raise ValueError("a server cannot be cut from itself")
        directions = [(i, j)] if one_way else [(i, j), (j, i)]
        with self.lock:
            self.blocked.update(directions)
            if mode == "reset":
                self.refuse.update(directions)
        if mode == "reset":
            for p in self.proxies:
                p.close_between(i, j)

    def heal(self, i: int, j: int) -> None:
        with self.lock:
            self.blocked -= {(i, j), (j, i)}
            self.refuse -= {(i, j), (j, i)}
        for p in self.proxies:
            p.release_held(i, j)

    def heal_all(self) -> None:
        with self.lock:
            pairs = set(self.blocked)
            self.blocked.clear()
            self.refuse.clear()
        for i, j in pairs:
            for p in self.proxies:
                p.release_held(i, j)

    def stop(self) -> None:
        for p in self.proxies:
            p.stop()


class PeerProxy:
    """Forwards connections from server ``src`` to one port of server ``dst``; obeys ``links``."""

    def __init__(self, links: Links, src: int, dst: int, target_port: int, *, election: bool = False) -> None:
        self.links = links
        self.src, self.dst = src, dst
        self.target = ("127.0.0.1", target_port)
        self.election = election
        self.reverse_port: int | None = None  # election: the port of P(dst->src), announced instead of src's
        self._listener = listening_socket(0, 64)  # never on a port of this process's servers
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []  # accepted while black-holed: never reached dst
        self._stopped = False
        self.connections = 0  # accepted so far (tests check that the servers really use the proxies)
        links.proxies.append(self)
        self._thread = threading.Thread(target=self._accept_loop, name=f"zklocks-link-{src}-{dst}", daemon=True)

    def start(self) -> PeerProxy:
        self._thread.start()
        return self

    def _between(self, i: int, j: int) -> bool:
        return {self.src, self.dst} == {i, j}

    def close_between(self, i: int, j: int) -> None:
        if not self._between(i, j):
            return
        with self._lock:
            pairs, self._pairs = self._pairs, []
            held, self._held = self._held, []
        for s in [s for pair in pairs for s in pair] + held:
            _close(s)

    def release_held(self, i: int, j: int) -> None:
        """At heal: connections accepted during a black-hole never reached the other side; close them."""
        if not self._between(i, j):
            return
        with self._lock:
            held, self._held = self._held, []
        for s in held:
            _close(s)

    def stop(self) -> None:
        self._stopped = True
        close_listener(self._listener)
        self.close_between(self.src, self.dst)

    def _accept_loop(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            links = self.links
            if (self.src, self.dst) in links.refuse or (self.dst, self.src) in links.refuse:
                _close(client)
                continue
            if links.is_blocked(self.src, self.dst) or links.is_blocked(self.dst, self.src):
                with self._lock:
                    self._held.append(client)
                continue
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        """Reach dst, then pump. On the quorum port keep trying for a while: a follower may connect before the
        new leader listens, and would retry on "connection refused"; it must not see a connection that opens
        and closes at once (it would give up following and start a new election)."""
        give_up = time.monotonic() + (0.0 if self.election else QUORUM_CONNECT_WINDOW)
        while True:
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                break
            except OSError:
                if self._stopped or time.monotonic() >= give_up:
                    _close(client)
                    return
                time.sleep(0.05)
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._pairs.append((client, upstream))
        self._pump(client, upstream)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        # client side is src, upstream side is dst
        peers = {client: upstream, upstream: client}
        direction = {client: (self.src, self.dst), upstream: (self.dst, self.src)}
        header = bytearray() if self.election and self.reverse_port else None
        try:
            while not self._stopped:
                # A blocked direction is not read: its bytes wait in the kernel buffers, as on a cut cable.
                readers = [s for s in (client, upstream) if not self.links.is_blocked(*direction[s])]
                if not readers:
                    select.select([], [], [], 0.05)
                    continue
                readable, _, _ = select.select(readers, [], [], 0.05)
                for s in readable:
                    if self.links.is_blocked(*direction[s]):
                        continue
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is client and header is not None:
                        header += data
                        rewritten = self._rewrite_handshake(header)
                        if rewritten is None:
                            continue  # the handshake is not complete yet
                        data, header = rewritten, None
                    peers[s].sendall(data)
        except (OSError, ValueError):  # ValueError: a socket closed by a reset under our feet
            return
        finally:
            _close(client)
            _close(upstream)
            with self._lock:
                if (client, upstream) in self._pairs:
                    self._pairs.remove((client, upstream))

    def _rewrite_handshake(self, buf: bytearray) -> bytes | None:
        """The election handshake announces the connecting server's own election address; announce the reverse
        proxy instead, so that a connection back (from the larger id) also passes through this pair's proxies.
        Returns the bytes to forward, or None while the handshake is incomplete."""
        if len(buf) < 8:
            return None
        version = struct.unpack(">q", buf[:8])[0]
        if version >= 0:  # the oldest protocol: just the server id, no address
            return bytes(buf)
        if len(buf) < ELECTION_HEADER.size:
            return None
        version, sid, length = ELECTION_HEADER.unpack(buf[: ELECTION_HEADER.size])
        end = ELECTION_HEADER.size + length
        if len(buf) < end:
            return None
        address = f"127.0.0.1:{self.reverse_port}".encode()
        return ELECTION_HEADER.pack(version, sid, len(address)) + address + bytes(buf[end:])


def _close(s: socket.socket) -> None:
    try:
        s.close()
    except OSError:
        pass


class ServerLinks:
    """The proxies of an n-server ensemble: for every ordered pair (i, j), i != j, one proxy to j's quorum
    port and one to j's election port, used only by server i. ``peers_for(i)`` gives server i's server lines."""

    def __init__(self, sids: list[int], quorum_ports: list[int], election_ports: list[int]) -> None:
        self.sids = sids
        self.quorum_ports = quorum_ports
        self.election_ports = election_ports
        self.links = Links()
        n = len(sids)
        self.quorum: dict[tuple[int, int], PeerProxy] = {}
        self.election: dict[tuple[int, int], PeerProxy] = {}
        for i in range(n):
            for j in range(n):
                if i != j:
                    self.quorum[i, j] = PeerProxy(self.links, i, j, quorum_ports[j])
                    self.election[i, j] = PeerProxy(self.links, i, j, election_ports[j], election=True)
        for (i, j), p in self.election.items():
            p.reverse_port = self.election[j, i].port
        for p in self.links.proxies:
            p.start()

    def retarget(self, quorum_ports: list[int], election_ports: list[int]) -> None:
        """The servers moved to new quorum and election ports (a start tried again): the proxies forward there,
        on the same listening ports."""
        self.quorum_ports = list(quorum_ports)
        self.election_ports = list(election_ports)
        for (_, j), p in self.quorum.items():
            p.target = ("127.0.0.1", self.quorum_ports[j])
        for (_, j), p in self.election.items():
            p.target = ("127.0.0.1", self.election_ports[j])

    def peers_for(self, i: int) -> str:
        lines = []
        for j, sid in enumerate(self.sids):
            if j == i:
                lines.append(f"server.{sid}=127.0.0.1:{self.quorum_ports[j]}:{self.election_ports[j]}")
            else:
                lines.append(f"server.{sid}=127.0.0.1:{self.quorum[i, j].port}:{self.election[i, j].port}")
        return "\n".join(lines)

    def connections(self) -> dict[tuple[int, int], int]:
        """Connections accepted so far per ordered pair (both ports)."""
        return {key: self.quorum[key].connections + self.election[key].connections for key in self.quorum}

    def stop(self) -> None:
        self.links.stop()

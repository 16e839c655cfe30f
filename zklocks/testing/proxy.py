"""A small TCP proxy on loopback for fault tests: cut a client off, or drop it mid-request.

proxy = TcpProxy("127.0.0.1", zk_port).start()
client connects to proxy.hosts
proxy.partition()        # black-hole: connections stay open, nothing passes (like a cut cable)
proxy.heal()
proxy.drop_after_next_request()   # forward the next request to the server, then drop the connection
proxy.drop_after_next_request((15,), skip=1)  # ... the second create2 instead
proxy.drop_after_next_request((14,), contains=b"/x", then_partition=True)  # forward the next multi that
                         # names a path with "/x", then black-hole the link
proxy.cancel_drop()      # disarm it
proxy.latency = 0.2      # delay every request (client to server) by 0.2 s, in order, from now on
proxy.reset()            # close every connection now
"""

from __future__ import annotations

import collections
import queue
import select
import socket
import threading
import time

from .ports import close_listener, listening_socket


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, listen_port: int = 0) -> None:
        self.target = (target_host, target_port)
        # With listen_port 0: never on a port of this process's ZooKeeper servers (zklocks.testing.ports).
        self._listener = listening_socket(listen_port, 128)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._blocked = threading.Event()
        self._open = threading.Event()  # the opposite of _blocked: what the pumps wait on while partitioned
        self._open.set()
        self._refuse = False
        self._drop_next = threading.Event()
        self._drop_opcodes: frozenset[int] = frozenset((1, 15))
        self._drop_skip = 0
        self._partition_on_drop = False
        self._drop_contains = b""
        self._drop_settle = 0.0
        self.dropped = threading.Event()  # set when an armed drop happened
        self.latency = 0.0  # seconds each client-to-server packet is held back (not combined with drops)
        self.requests: collections.Counter[int] = collections.Counter()  # by opcode, best effort (see opcodes)
        self._stopped = False
        self._thread = threading.Thread(target=self._accept_loop, name="zklocks-proxy", daemon=True)

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def partition(self, refuse_new: bool = True) -> None:
        """Stop forwarding in both directions; new connections are refused (closed) while partitioned."""
        self._refuse = refuse_new
        self._open.clear()
        self._blocked.set()

    def heal(self) -> None:
        self._refuse = False
        self._blocked.clear()
        self._open.set()

    def drop_after_next_request(
        self,
        opcodes: tuple[int, ...] = (1, 15),
        skip: int = 0,
        *,
        contains: bytes = b"",
        then_partition: bool = False,
        settle: float = 0.0,
    ) -> None:
        """Forward the next request with one of ``opcodes`` (default: create, create2), then drop.

        ``skip`` lets that many matching requests pass first (e.g. skip=1: drop after the second create).
        ``contains``: only a request whose packet holds these bytes (e.g. a path) counts.
        ``then_partition``: at the drop, also partition (the client's reconnect is refused until heal()), so the
        request commits while its answer is lost with the link.
        ``settle``: before the drop, end the upstream side gently (FIN after the request) and wait this long, so
        that the server surely reads the request (a close with unread answers resets the connection, and the
        server may then lose the request).
        """
        self._drop_settle = settle
        self._partition_on_drop = then_partition
        self._drop_contains = contains
        self._drop_opcodes = frozenset(opcodes)
        self._drop_skip = skip
        self.dropped.clear()
        self._drop_next.set()

    def cancel_drop(self) -> None:
        """Disarm a drop_after_next_request() that has not happened yet."""
        self._drop_next.clear()

    def reset(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def stop(self) -> None:
        self._stopped = True
        close_listener(self._listener)
        self.reset()

    def _accept_loop(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refuse and self._blocked.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        peers = {client: upstream, upstream: client}
        requests_seen = 0
        delayed: queue.Queue | None = None
        try:
            while not self._stopped:
                readable, _, _ = select.select([client, upstream], [], [], 0.05)
                if self._blocked.is_set():
                    # Hold the bytes in the kernel buffers: nothing passes. Wait rather than spin on a readable
                    # socket (a spinning pump took most of a core, and stretched the blip it was making).
                    self._open.wait(0.05)
                    continue
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is client and (self.latency > 0 or delayed is not None):
                        if delayed is None:
                            delayed = queue.Queue()
                            threading.Thread(target=self._send_later, args=(delayed, upstream), daemon=True).start()
                        delayed.put((time.monotonic() + self.latency, data))
                        continue
                    peers[s].sendall(data)
                    if s is client:
                        requests_seen += 1
                        if requests_seen > 1:
                            self.requests.update(opcodes(data))
                        # The first client packet is the session handshake; then each packet starts with
                        # length, xid and the request's opcode (several packets may share one read).
                        if (
                            requests_seen > 1
                            and self._drop_next.is_set()
                            and self._drop_opcodes.intersection(opcodes(data))
                            and self._drop_contains in data
                        ):
                            with self._lock:
                                if self._drop_skip > 0:
                                    self._drop_skip -= 1
                                    continue
                            self._drop_next.clear()
                            if self._partition_on_drop:
                                self.partition()
                            self.dropped.set()
                            if self._drop_settle > 0:
                                upstream.shutdown(socket.SHUT_WR)
                                time.sleep(self._drop_settle)
                            return
        except (OSError, ValueError):  # ValueError: a socket closed by reset() meanwhile (select on fd -1)
            return
        finally:
            if delayed is not None:
                delayed.put(None)
            for s in (client, upstream):
                try:
                    s.close()
                except OSError:
                    pass
            with self._lock:
                if (client, upstream) in self._pairs:
                    self._pairs.remove((client, upstream))

    def _send_later(self, delayed: queue.Queue, upstream: socket.socket) -> None:
        """Forward the held-back packets of one connection, each at its due time, in order."""
        while True:
            item = delayed.get()
            if item is None:
                return
            due, data = item
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            try:
                upstream.sendall(data)
            except OSError:
                return


def opcodes(data: bytes) -> list[int]:
    """Opcodes of the ZooKeeper requests framed in ``data`` (best effort: reads may split packets)."""
    found, offset = [], 0
    while offset + 12 <= len(data):
        length = int.from_bytes(data[offset : offset + 4], "big")
        found.append(int.from_bytes(data[offset + 8 : offset + 12], "big", signed=True))
        offset += 4 + length
    return found

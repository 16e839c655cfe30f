"""The hooks every session installs on its KazooClient (session.py): on its request path, and on its connection
(the lease's view of the traffic, the short read path)."""

from __future__ import annotations

import socket
import threading
import time
import weakref
from typing import Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, KazooException
from kazoo.protocol.serialization import CloseInstance, Connect
from kazoo.protocol.states import KeeperState

from ... import forking
from ..iohandler import HAS_POLL, PollingHandler


def raise_through_wakeup(client: KazooClient) -> None:
    """Let an exception raised by a signal handler while a request is sent reach the caller.

    kazoo's ``_call`` queues the request, then wakes its connection thread inside a bare ``except:``: an
    exception a signal handler raises there (KeyboardInterrupt, Celery's SoftTimeLimitExceeded) would be
    swallowed, and the request failed with ConnectionClosedError although it is queued and goes out (a create
    would leave a node nobody knows of, a read would report a live session as ended). This ``_call`` is
    kazoo's, with only a socket error taken for a closed connection; any other exception reaches the caller
    once the connection thread is woken for the queued request. ``create_async`` raises at once what kazoo's
    keeps for the result (an answer would overwrite it).
    """
    kazoo_call = client._call

    def _call(request, async_object):
        if client.client_state in (KeeperState.AUTH_FAILED, KeeperState.CLOSED, KeeperState.EXPIRED_SESSION):
            return kazoo_call(request, async_object)  # fails the request at once, nothing is queued
        try:
            client._queue.append((request, async_object))
            write_sock = client._connection._write_sock
            if write_sock is None:
                async_object.set_exception(ConnectionClosedError("Connection has been closed"))
                return None
            _wake_byte(client, write_sock)
        except OSError:
            async_object.set_exception(ConnectionClosedError("Connection has been closed"))
        except BaseException:
            # Raised anywhere after the append (before the wake, or after it): wake the connection thread for
            # the queued request all the same. A wake byte too many is harmless (kazoo drops a byte that finds
            # the queue empty); one too few would leave the request unsent until the next one.
            wake(client)
            raise
        return None

    kazoo_create_async = client.create_async

    def create_async(*args, **kwargs):
        # kazoo's create_async keeps what its sending raised for the result, where a later answer overwrites it.
        result = kazoo_create_async(*args, **kwargs)
        error = result.exception
        if error is not None and not isinstance(error, KazooException):
            raise error
        return result

    client._call = _call
    client.create_async = create_async


# The requests that change something: create, delete, setData, setACL, multi, create2, createContainer,
# createTTL, reconfig.
WRITES = frozenset({1, 2, 5, 7, 14, 15, 16, 19, 21})


def refuse_writes(client: KazooClient, alias: str) -> None:
    """A READ_ONLY alias's client: every write fails before it is sent (ZkConfigError), whichever path forgot
    to refuse first, so that its identity never makes a node (a namespace it made under an open "/" would be
    the reader's, and lock the project out)."""
    from ...exceptions import ZkConfigError

    call = client._call

    def _call(request, async_object):
        if getattr(request, "type", None) in WRITES:
            async_object.set_exception(
                ZkConfigError(f"zklocks alias {alias!r} is READ_ONLY: it changes nothing in ZooKeeper")
            )
            return None
        return call(request, async_object)

    client._call = _call


def send_close(client: KazooClient) -> None:
    """Queue kazoo's close request and wake its connection thread: what kazoo's ``stop()`` does the first time,
    and skips when its stop flag is already set (a stop cut short by a signal handler's exception after it set
    the flag): the connected loop would then wait for a close that was never sent, and ``stop()`` join it for
    ever."""
    client._queue.append((CloseInstance, None))
    wake(client)


def wake(client: KazooClient) -> None:
    """Wake kazoo's connection thread (it sends what is queued); nothing if the connection is closed."""
    write_sock = client._connection._write_sock
    if write_sock is not None:
        try:
            _wake_byte(client, write_sock)
        except OSError:
            pass


_owed_lock = threading.Lock()
_owed: weakref.WeakKeyDictionary[KazooClient, int] = weakref.WeakKeyDictionary()  # wake bytes not written yet
_payer: threading.Thread | None = None  # writes them; started when a byte is owed, ends when none is
# Where the OS has it; zklocks' handler also makes the write socket non-blocking (iohandler.create_socket_pair).
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)


def _wake_byte(client: KazooClient, write_sock: socket.socket) -> None:
    """Write one wake byte for one queued request (kazoo's connection thread sends a request per byte it reads),
    without ever blocking the caller, which may be an event loop.

    The connection thread reads the bytes only while connected: during an outage the socket pair fills after a
    few hundred requests (a byte takes a buffer of its own), and a plain send would then block until the
    connection is back, or for ever. A byte that does not fit is owed instead, and one thread writes the owed
    bytes as the connection threads read them again (none may be dropped: its request would stay queued until
    the next one)."""
    global _payer
    try:
        write_sock.send(b"\0", _DONTWAIT)
    except BlockingIOError:
        with _owed_lock:
            _owed[client] = _owed.get(client, 0) + 1
            # Started under the lock, and ended under it once nothing is owed: an owed byte always has a payer
            # (one that failed to start, or never started, is replaced by the next byte owed).
            if _payer is None or not _payer.is_alive():
                _payer = threading.Thread(target=_pay_owed_wakes, name="zklocks-wake", daemon=True)
                _payer.start()


def _pay_owed_wakes() -> None:
    global _payer
    while True:
        with _owed_lock:
            for client in list(_owed):
                write_sock = client._connection._write_sock
                try:
                    while _owed[client] and write_sock is not None:
                        write_sock.send(b"\0", _DONTWAIT)
                        _owed[client] -= 1
                except BlockingIOError:
                    continue  # still full: its connection thread reads nothing yet
                except OSError:
                    pass  # closed: kazoo fails what is still queued
                del _owed[client]
            if not _owed:
                _payer = None
                return
        time.sleep(0.01)


def bounded_stop(client: KazooClient) -> None:
    """kazoo's ``stop()``, whose wake byte for the close request cannot block it for ever: during an outage the
    socket pair may be full, and the connection thread, stopping on the client's stop flag, never reads it again.

    A wake byte goes first, owed if the pair is full, so that the close request has one whatever becomes of
    kazoo's own (a byte too many is harmless). kazoo's own send then fails at once on zklocks' non-blocking pair;
    on another handler's blocking one it gives up after a second (that timeout would make every later wake byte
    wait, but nothing is sent after a stop)."""
    write_sock = client._connection._write_sock
    if write_sock is not None:
        try:
            _wake_byte(client, write_sock)
        except (OSError, RuntimeError):
            pass  # closed already; or no thread may start any more (interpreter shutdown): kazoo's own send tries
        if write_sock.gettimeout() is None:  # blocking: not zklocks' handler
            write_sock.settimeout(1.0)
    try:
        client.stop()
    except OSError:  # BlockingIOError, TimeoutError: kazoo's finally has stopped its threads
        pass


def _reset_after_fork() -> None:
    global _owed_lock, _payer
    _owed_lock = threading.Lock()
    _owed.clear()
    _payer = None


forking.register(_reset_after_fork)


class TrafficListener(Protocol):
    """What a connection tells its session (session.py), from kazoo's connection thread: record, never block."""

    def request_sent(self, xid: int, opcode: int) -> None:
        """A request (or a ping) goes out now; a handshake's Connect is told by handshake_sent() instead."""

    def answer_read(self, xid: int, zxid: int, err: int) -> None:
        """An answer's header was read now (a watch event's too: xid -1)."""

    def handshake_sent(self) -> None:
        """The handshake of a new connection goes out now."""

    def handshake_answered(self, timeout_ms: int, resumed: bool, read_only: bool, zxid: int) -> None:
        """The handshake was answered (before kazoo reports CONNECTED): the negotiated timeout, whether an existing
        session was resumed, whether the server is read-only, the last zxid it has seen."""


# The listener's methods, in the order above: what kazoo_adapter.CONNECTION_THREAD declares for each listener.
TRAFFIC = ("request_sent", "answer_read", "handshake_sent", "handshake_answered")


# The least a server of the list gets to answer the handshake, however many servers share the CONNECT_TIMEOUT
# (capped at half of it, so that one server that accepts and answers nothing, a paused JVM, leaves the next one
# the other half; and at kazoo's own limit): a slow but working ensemble (a quorum write with a slow fsync, a WAN)
# still connects. The TCP connect gets the plain share: a working server accepts at once.
ATTEMPT_FLOOR = 2.0


def wrap_connection(
    client: KazooClient, listener: TrafficListener, attempt_limit: float | None = None, *, cap_connect: bool = False
) -> None:
    """Tell ``listener`` of each request sent, each answer read and each handshake of the client's connection:
    kazoo's connection thread calls these in place of the ConnectionHandler's own methods, through ``self``
    (compat.py checks that it does), and each calls kazoo's method.

    With ``attempt_limit`` (CONNECT_TIMEOUT), each server of the list gets its share of it for the TCP and TLS
    connect (with ``cap_connect``: a handler of this client's own, never shared) and, ATTEMPT_FLOOR at the least
    (half of CONNECT_TIMEOUT at the most), for the handshake's answer: kazoo gives each the session timeout to
    connect (and its share of it for the handshake), so a hung server would otherwise use up the whole
    CONNECT_TIMEOUT before the next one is tried.
    """
    conn = client._connection
    kazoo_submit, kazoo_read_header, kazoo_invoke = conn._submit, conn._read_header, conn._invoke
    share = handshake_share = None
    if attempt_limit is not None:
        share = attempt_limit / max(1, len(client.hosts))
        handshake_share = max(share, min(attempt_limit / 2, ATTEMPT_FLOOR))

    def _submit(request, timeout, xid=None):
        # A Connect (no xid, no opcode) is answered outside the header stream: handshake_answered() tells of it.
        if not isinstance(request, Connect):
            listener.request_sent(xid, request.type)
        return kazoo_submit(request, timeout, xid)

    def _read_header(timeout):
        header, buffer, offset = kazoo_read_header(timeout)
        listener.answer_read(header.xid, header.zxid, header.err)
        return header, buffer, offset

    def _invoke(timeout, request, xid=None):
        if not isinstance(request, Connect):
            return kazoo_invoke(timeout, request, xid)
        if handshake_share is not None:
            timeout = min(timeout, handshake_share)
        listener.handshake_sent()
        answer = kazoo_invoke(timeout, request, xid)
        result, zxid = answer
        listener.handshake_answered(
            result.time_out, bool(request.session_id), bool(getattr(result, "read_only", False)), zxid or 0
        )
        return answer

    conn._submit = _submit
    conn._read_header = _read_header
    conn._invoke = _invoke
    if share is not None and cap_connect:
        kazoo_create_connection = conn.handler.create_connection

        def create_connection(*args, **kwargs):
            if kwargs.get("timeout") is not None:
                kwargs["timeout"] = min(kwargs["timeout"], share)
            return kazoo_create_connection(*args, **kwargs)

        conn.handler.create_connection = create_connection


def read_without_select(client: KazooClient) -> None:
    """Wrap the ``_read`` of the client's ConnectionHandler, if it runs on a PollingHandler (iohandler.py): the reads
    of an answer try the (non-blocking) socket first.

    Only plain sockets take the short path. A read that finds no data or a closed peer goes through kazoo's own
    read, which waits or reports the dropped connection; a socket error is reported as kazoo's read reports it.
    """
    conn = client._connection
    if not HAS_POLL or not isinstance(conn.handler, PollingHandler):
        return  # another handler's sockets (gevent, eventlet) are not ours to read; no short path without poll(2)
    kazoo_read = conn._read

    def _read(length: int, timeout: float) -> bytes:
        sock = conn._socket
        if length <= 0 or type(sock) is not socket.socket:  # TLS has its own framing; a bad length is kazoo's
            return kazoo_read(length, timeout)
        with conn._socket_error_handling():  # a socket error is a dropped connection, in kazoo's words
            try:
                chunk = sock.recv(length)  # kazoo's sockets are non-blocking
            except BlockingIOError:
                return kazoo_read(length, timeout)
        if len(chunk) == length:
            return chunk
        if not chunk:
            return kazoo_read(length, timeout)  # closed by the peer: kazoo's read reports it
        return chunk + kazoo_read(length - len(chunk), timeout)

    conn._read = _read

"""A hook on a KazooClient's request path, installed by every session (session.py)."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, KazooException
from kazoo.protocol.serialization import CloseInstance
from kazoo.protocol.states import KeeperState


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
        if client._state in (KeeperState.AUTH_FAILED, KeeperState.CLOSED, KeeperState.EXPIRED_SESSION):
            return kazoo_call(request, async_object)  # fails the request at once, nothing is queued
        try:
            client._queue.append((request, async_object))
            write_sock = client._connection._write_sock
            if write_sock is None:
                async_object.set_exception(ConnectionClosedError("Connection has been closed"))
                return None
            write_sock.send(b"\0")
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
    from ..exceptions import ZkConfigError

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
            write_sock.send(b"\0")
        except OSError:
            pass

"""The calls other modules make instead of naming kazoo's private attributes, and kazoo's request records built
by position (compat.py checks their fields)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.utils import AsyncResult, fileobj_to_fd
from kazoo.protocol.serialization import (
    Delete,
    Exists,
    GetChildren,
    GetData,
    MultiHeader,
    SetData,
    Sync,
    Transaction,
)

log = logging.getLogger("zklocks")

__all__ = ["AsyncResult", "fileobj_to_fd"]  # kazoo's own, for the I/O handler (kazoo.handlers.utils)

_EPHEMERAL_SEQUENTIAL = 1 | 2  # kazoo's create flags


def reads_answers_here(client: KazooClient) -> bool:
    """Whether the caller may be where the client's answers are read: its connection thread, or anywhere when the
    connection runs on green threads (gevent, eventlet), which a thread's identity cannot tell apart."""
    routine = client._connection._connection_routine
    return not isinstance(routine, threading.Thread) or routine is threading.current_thread()


def send(client: KazooClient, request: Any, result: AsyncResult | Outcome) -> None:
    """Send a request record through the client's request path (with the session's hooks), as kazoo's own
    Transaction does; the connection thread calls ``result.set`` or ``result.set_exception``."""
    client._call(request, result)


class Outcome:
    """The result of a request :func:`send` sends when nobody waits for its answer: kazoo's connection thread runs
    ``on_answer(value)`` or ``on_error(exception)`` as it reads the answer, under a guard, since an exception there
    would end kazoo's loop and close the client. Neither may block or send."""

    __slots__ = ("on_answer", "on_error")

    def __init__(self, on_answer: Callable[[Any], None], on_error: Callable[[BaseException], None]) -> None:
        self.on_answer, self.on_error = on_answer, on_error

    def set(self, value: Any = None) -> None:
        try:
            self.on_answer(value)
        except Exception:  # noqa: BLE001 see above
            log.exception("zklocks: %r failed on an answer, on kazoo's connection thread", self.on_answer)

    def set_exception(self, exception: BaseException) -> None:
        try:
            self.on_error(exception)
        except Exception:  # noqa: BLE001 see above
            log.exception("zklocks: %r failed on an error, on kazoo's connection thread", self.on_error)


def create_contender_async(client: KazooClient, path: str, data: bytes, acl: Any) -> Any:
    """Create an ephemeral sequential node, with its stat, answered by the connection thread (kazoo's callback
    thread is skipped)."""
    return client._create_async_inner(path, data, acl, _EPHEMERAL_SEQUENTIAL, trailing=True, include_data=True)


def unanswered(client: KazooClient) -> int:
    """The client's requests not sent yet, or sent and not answered yet."""
    return len(client._queue) + len(client._pending)


def connection_socket(client: Any) -> Any:
    """The socket of the client's connection, or None."""
    return getattr(getattr(client, "_connection", None), "_socket", None)


def new_async_result(handler: Any, condition_factory: Any, timeout_factory: Any) -> AsyncResult:
    """kazoo's AsyncResult with the handler's own condition factory (built by position, as kazoo's handlers do)."""
    return AsyncResult(handler, condition_factory, timeout_factory)


def sync_request(path: str) -> Sync:
    return Sync(path)


def exists_request(path: str | None, watcher: Any = None) -> Exists:
    return Exists(path, watcher)


def children_request(path: str) -> GetChildren:
    return GetChildren(path, None)


def data_request(path: str) -> GetData:
    return GetData(path, None)


def delete_request(path: str) -> Delete:
    return Delete(path, -1)  # any version


def set_data_request(path: str, data: bytes) -> SetData:
    return SetData(path, data, -1)  # any version


def transaction_request(operations: list[Any]) -> Transaction:
    return Transaction(operations)


def operation_header(op_type: int) -> MultiHeader:
    return MultiHeader(op_type, False, -1)  # of one operation in a multi request

"""Many reads in few requests: ZooKeeper's ``multiRead`` (3.6+, opcode 22), which answers each read separately (a
missing node fails only its own), with a per-client fallback to one request per read where a server answers
Unimplemented (docs/operations.md, "Read model").

The namespace may hold anything, so every request is bounded (the reasons: docs/security.md, "Names and the admin"):
in path bytes (REQUEST_BYTES); in answer size (the first request reads as many nodes as REPLY_BYTES holds of nodes
as large as a node can be (NODE_BYTES), each next one at most twice as many as the last and as REPLY_BYTES holds of
the largest answer seen, up to BATCH); and in requests outstanding (WINDOW). The server then holds at most WINDOW *
BATCH * 1 MB of answers for us, and a server without multiRead at most SINGLES answers.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import NoAuthError, NoNodeError, UnimplementedError

from .kazoo_adapter.calls import children_request, data_request, send
from .kazoo_adapter.wire import STAT_BYTES, MultiRead

DATA, CHILDREN = "data", "children"
BATCH = 64  # most reads per request (nodes of zklocks' own hold about 1 KB; as fast as 200 per request here)
REQUEST_BYTES = 128 * 1024  # most path bytes per request, far below a server's jute.maxbuffer (1 MB)
REPLY_BYTES = 4 * 1024 * 1024  # the answer a request aims at, by the largest answer seen
NODE_BYTES = 1024 * 1024  # the largest answer one read may have (a node's data is below jute.maxbuffer)
WINDOW = 2  # requests outstanding at once
SINGLES = 32  # single reads outstanding at once, against a server without multiRead
_OP_BYTES = 16  # a read's own bytes in a request besides its path
_UNSUPPORTED = (UnimplementedError,)  # what a server older than 3.6 answers to an unknown opcode
multiread_support: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # client -> bool


def _op(client, kind: str, path: str):
    full = (client.chroot or "") + path
    return data_request(full) if kind == DATA else children_request(full)


def _single(client, kind: str, path: str):
    return client.get_async(path) if kind == DATA else client.get_children_async(path)


def _send(client, ops: list[tuple[str, str]]):
    result = client.handler.async_result()
    # kazoo has no public call for a request type it does not know: sent as its own Transaction sends.
    send(client, MultiRead([_op(client, kind, path) for kind, path in ops]), result)
    return result


def fetch(
    client,
    ops: list[tuple[str, str]],
    wait: Callable[[Any], Any],
    keep: int | None = None,
    unreadable: Callable[[str], None] | None = None,
) -> list[Any]:
    """Answer every ``(kind, path)`` read: ``(data, stat)``, a list of children, or None for a missing node.

    Batches are sent WINDOW at a time, each bounded as the module says; ``wait(async_result)`` returns a result's
    value or raises. Errors other than NoNode (NoAuth, connection loss) propagate. ``keep``: data longer than
    that many bytes is cut to ``keep + 1`` as it arrives (the reader sees that it was longer, and memory stays
    bounded whatever the nodes hold). ``unreadable``: a read refused with NoAuth answers None, and its path is
    passed to it (one node that anyone made unreadable to us must not hide the others).
    """
    if not ops:
        return []
    if multiread_support.get(client) is False:
        return _one_by_one(client, ops, wait, keep, unreadable)
    out: list[Any] = []
    largest = NODE_BYTES  # the largest answer seen so far; before any, as large as a node can be
    count = 0  # reads in the last request
    pending: deque[Any] = deque()
    sent = 0
    while sent < len(ops) or pending:
        # Until the server is known to take multiRead, one request at a time (the first tells).
        window = WINDOW if multiread_support.get(client) else 1
        while sent < len(ops) and len(pending) < window:
            count = max(1, min(BATCH, REPLY_BYTES // largest, 2 * count if count else BATCH))
            batch = _next_batch(ops, sent, count)
            pending.append(_send(client, batch))
            sent += len(batch)
        try:
            answers = wait(pending.popleft())
        except _UNSUPPORTED:
            if multiread_support.get(client) is None:
                multiread_support[client] = False
                return _one_by_one(client, ops, wait, keep, unreadable)
            raise
        multiread_support[client] = True
        seen = max(_size(a) for a in answers)
        largest = seen if len(out) == 0 else max(largest, seen)  # the first answer replaces the guess
        out.extend(_cut(a, keep) for a in answers)
    return [_unwrap(answer, path, unreadable) for answer, (_, path) in zip(out, ops, strict=True)]


def _next_batch(ops: list[tuple[str, str]], start: int, count: int) -> list[tuple[str, str]]:
    """Up to ``count`` reads from ``start`` whose paths fit REQUEST_BYTES (always at least one)."""
    size = 0
    end = start
    while end < len(ops) and end - start < count:
        size += len(ops[end][1].encode()) + _OP_BYTES
        if size > REQUEST_BYTES and end > start:
            break
        end += 1
    return ops[start:end]


def _cut(answer: Any, keep: int | None) -> Any:
    if keep is not None and isinstance(answer, tuple) and answer[0] is not None and len(answer[0]) > keep + 1:
        return (answer[0][: keep + 1], *answer[1:])
    return answer


def _size(answer: Any) -> int:
    """About how many bytes a read's answer took (at least 1)."""
    if isinstance(answer, tuple):
        return len(answer[0] or b"") + STAT_BYTES
    if isinstance(answer, list):
        return 4 + sum(len(child) + 4 for child in answer)
    return 16


def _one_by_one(
    client, ops: list[tuple[str, str]], wait: Callable[[Any], Any], keep: int | None, unreadable
) -> list[Any]:
    """A server without multiRead: one request per read, SINGLES outstanding, each answer cut as it arrives."""
    out: list[Any] = []
    pending: deque[Any] = deque()
    sent = 0
    while sent < len(ops) or pending:
        while sent < len(ops) and len(pending) < SINGLES:
            pending.append(_single(client, *ops[sent]))
            sent += 1
        try:
            out.append(_cut(wait(pending.popleft()), keep))
        except NoNodeError:
            out.append(None)
        except NoAuthError as exc:
            out.append(_unwrap(exc, ops[len(out)][1], unreadable))
    return out


def _unwrap(answer: Any, path: str, unreadable: Callable[[str], None] | None) -> Any:
    if isinstance(answer, NoNodeError):
        return None
    if isinstance(answer, NoAuthError) and unreadable is not None:
        unreadable(path)
        return None
    if isinstance(answer, Exception):
        raise answer
    return answer

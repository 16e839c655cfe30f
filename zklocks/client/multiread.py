"""Many reads in few requests: ZooKeeper's ``multiRead`` (3.6+), with a fallback to one request per read.

kazoo sends one request per loop turn of its connection thread (about 0.1 ms each here), so reading 5,000 nodes
one by one costs half a second. ``multiRead`` (opcode 22) carries up to a batch of getData/getChildren
operations in one request and answers each one separately: a missing node fails only its own operation.
A server older than 3.6 answers Unimplemented; we remember that per client and read one by one.
"""

from __future__ import annotations

import weakref
from collections import namedtuple
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import EXCEPTIONS, NoNodeError, UnimplementedError
from kazoo.protocol.serialization import (
    GetChildren,
    GetData,
    MultiHeader,
    ZnodeStat,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
)

DATA, CHILDREN = "data", "children"
BATCH = 200  # operations per request: answers stay far below ZooKeeper's 1 MB packet limit (data is <= 1 KB)
_UNSUPPORTED = (UnimplementedError,)  # what a server older than 3.6 answers to an unknown opcode
multiread_support: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # client -> bool


class MultiRead(namedtuple("MultiRead", "operations")):
    """The multiRead request: like a transaction, but of reads, each answered on its own."""

    type = 22

    def serialize(self) -> bytearray:
        b = bytearray()
        for op in self.operations:
            b.extend(MultiHeader(op.type, False, -1).serialize() + op.serialize())
        return b + multiheader_struct.pack(-1, True, -1)

    @classmethod
    def deserialize(cls, buf, offset) -> list[Any]:
        results: list[Any] = []
        while True:
            header, offset = MultiHeader.deserialize(buf, offset)
            if header.done:
                return results
            if header.type == GetData.type:
                data, offset = read_buffer(buf, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buf, offset))
                offset += stat_struct.size
                results.append((data, stat))
            elif header.type == GetChildren.type:
                count = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(buf, offset)
                    children.append(child)
                results.append(children)
            elif header.type == -1:
                err = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[err]())
            else:
                raise ValueError(f"unexpected multiRead result type {header.type}")


def _op(client, kind: str, path: str):
    full = (client.chroot or "") + path
    return GetData(full, None) if kind == DATA else GetChildren(full, None)


def _single(client, kind: str, path: str):
    return client.get_async(path) if kind == DATA else client.get_children_async(path)


def _send(client, ops: list[tuple[str, str]]):
    result = client.handler.async_result()
    # kazoo has no public call for a request type it does not know; _call is how its own Transaction sends.
    client._call(MultiRead([_op(client, kind, path) for kind, path in ops]), result)
    return result


def fetch(client, ops: list[tuple[str, str]], wait: Callable[[Any], Any]) -> list[Any]:
    """Answer every ``(kind, path)`` read: ``(data, stat)``, a list of children, or None for a missing node.

    Every request is sent before any answer is awaited; ``wait(async_result)`` returns a result's value or
    raises. Errors other than NoNode (NoAuth, connection loss) propagate.
    """
    if not ops:
        return []
    supported = multiread_support.get(client)
    out: list[Any] = []
    if supported is not False:
        batches = [ops[i : i + BATCH] for i in range(0, len(ops), BATCH)]
        pending = []
        if supported is None:  # first use on this client: probe with one batch
            first = _send(client, batches[0])
            try:
                answers = wait(first)
            except _UNSUPPORTED:
                multiread_support[client] = False
                return fetch(client, ops, wait)
            multiread_support[client] = True
            out.extend(answers)
            batches = batches[1:]
        pending = [_send(client, batch) for batch in batches]
        for result in pending:
            out.extend(wait(result))
        return [_unwrap(answer) for answer in out]
    singles = [_single(client, kind, path) for kind, path in ops]
    for result in singles:
        try:
            out.append(wait(result))
        except NoNodeError:
            out.append(None)
    return out


def _unwrap(answer: Any) -> Any:
    if isinstance(answer, NoNodeError):
        return None
    if isinstance(answer, Exception):
        raise answer
    return answer

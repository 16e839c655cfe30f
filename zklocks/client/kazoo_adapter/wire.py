"""zklocks' own request record, ``multiRead`` (opcode 22), written and read with kazoo's serialization helpers and
sent through the client's request path (calls.send; docs/compatibility.md). ``deserialize`` runs on kazoo's
connection thread: it only parses."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from kazoo.exceptions import EXCEPTIONS
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

from .calls import operation_header

STAT_BYTES = stat_struct.size  # a node's stat on the wire


class MultiRead(namedtuple("MultiRead", "operations")):
    """The multiRead request: like a transaction, but of reads, each answered on its own."""

    type = 22

    def serialize(self) -> bytearray:
        b = bytearray()
        for op in self.operations:
            b.extend(operation_header(op.type).serialize() + op.serialize())
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

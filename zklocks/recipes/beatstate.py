"""What the Celery beat leader has sent: each schedule entry's last send, kept below the election node.

    NAMESPACE/<election>/__beat__/<entry>    {"v": 1, "entry": ..., "sent_at": <epoch s>, "token": <leader token>}

The leader writes an entry's node BEFORE it sends, in ONE transaction with a ``check`` of its own candidate node:
the write commits only while that node exists, that is while no other candidate can lead. A leader that lost
its session (expired, frozen past its timeout, cut off) cannot commit, and so never sends. A new leader reads
these nodes when elected, so it neither repeats a send nor skips one beyond the failover.

This module knows kazoo and paths, nothing of Django or Celery.
"""

from __future__ import annotations

import hashlib
import json
import socket
from typing import Any

from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, OperationTimeoutError

from ..client.session import Session
from ..names import MAX_NAME_LENGTH, encode_name
from .kazoo_calls import Deadline, call, wait_result
from .layout import beat_state_path


def entry_node(entry: str) -> str:
    """The child name of an entry: its encoded name, or a digest for a name too long for one znode name."""
    encoded = encode_name(entry) if entry else ""
    if not encoded or len(encoded) > MAX_NAME_LENGTH or encoded.startswith("__"):
        return "sha1-" + hashlib.sha1(entry.encode("utf-8"), usedforsecurity=False).hexdigest()
    return encoded


def _data(entry: str, sent_at: float, token: int | None) -> bytes:
    record: dict[str, Any] = {"v": 1, "entry": entry, "sent_at": round(sent_at, 6), "token": token}
    record["host"] = socket.gethostname()[:64]
    return json.dumps(record, separators=(",", ":")).encode()


def _parse(raw: bytes | None) -> tuple[str, float] | None:
    try:
        data = json.loads(raw or b"")
        entry, sent_at = data["entry"], data["sent_at"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(entry, str) or isinstance(sent_at, bool) or not isinstance(sent_at, (int, float)):
        return None
    return entry, float(sent_at)


def read_sent(session: Session, election: str, deadline: Deadline) -> dict[str, float]:
    """{entry name: epoch seconds of its last send} as every committed write left it.

    A ``sync`` goes first, so that a server behind the leader of the ensemble cannot hide the previous beat
    leader's last writes. Creates the state node if it is missing (a later create of an entry needs it).
    """
    client = session.client
    state = beat_state_path(election)
    try:
        call(session, lambda: client.create_async(state, b"", acl=session.acl, makepath=True), deadline)
    except NodeExistsError:
        pass
    call(session, lambda: client.sync_async(state), deadline)
    children = call(session, lambda: client.get_children_async(state), deadline)
    pending = [client.get_async(f"{state}/{child}") for child in children]  # pipelined: one round trip
    sent: dict[str, float] = {}
    for result in pending:
        try:
            raw, _ = wait_result(result, session, deadline)
        except NoNodeError:
            continue
        parsed = _parse(raw)
        if parsed is not None:
            sent[parsed[0]] = parsed[1]
    return sent


def record_sent(
    session: Session,
    own_node: str,
    election: str,
    entry: str,
    sent_at: float,
    token: int | None,
    *,
    exists: bool,
    deadline: Deadline,
) -> bool:
    """Write ``entry``'s last send, fenced by ``own_node``; True only if the transaction committed.

    False when our candidate node is gone (we no longer lead) or the outcome is unknown (the connection was
    lost before the answer): the caller must not send then. ``exists`` says whether the entry's node is there
    already (set) or not (create); a wrong guess fails the transaction and is corrected by a re-read.
    """
    client = session.client
    path = f"{beat_state_path(election)}/{entry_node(entry)}"
    data = _data(entry, sent_at, token)
    transaction = client.transaction()
    transaction.check(own_node, -1)
    if exists:
        transaction.set_data(path, data)
    else:
        transaction.create(path, data, acl=session.acl)
    if session.dead:
        return False
    try:
        results = wait_result(transaction.commit_async(), session, deadline)
    except (ConnectionLoss, OperationTimeoutError):
        return False
    return not any(isinstance(r, Exception) for r in results)

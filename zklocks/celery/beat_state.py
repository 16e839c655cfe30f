"""What the Celery beat leader has sent: each entry's last send in ``__beat__/<entry>``, claimed before the send in
one transaction with a ``check`` of the leader's candidate node; orphan notes in ``__beat__/__orphans__``. See
docs/design.md §11, "Beat claims" (and the node table of §12).

This module knows kazoo and paths, nothing of Django or Celery.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import socket
from typing import Any, NamedTuple, TypeGuard

from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, OperationTimeoutError

from ..client.deadline import Deadline
from ..client.multiread import DATA, fetch
from ..client.session import Session
from ..exceptions import ZkAuthError, ZkUnavailable
from ..names import MAX_NAME_LENGTH, encode_name
from ..recipes import node_data
from ..recipes.kazoo_calls import SessionGone, call, wait_result
from ..recipes.layout import beat_state_path

log = logging.getLogger("zklocks")


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


class Claim(NamedTuple):
    """An entry's last committed claim: when, by which leader (token, host), and the node's version."""

    entry: str
    sent_at: float
    token: int | None
    version: int
    host: str = ""


COMMITTED, REJECTED, UNKNOWN = "committed", "rejected", "unknown"  # the outcomes of a fenced write
# A claim's data holds its entry's name, which beat does not bound: read claims up to ZooKeeper's own node limit.
MAX_CLAIM = 1024 * 1024
ORPHANS = "__orphans__"


def _parse(raw: bytes | None, version: int = -1, *, node: str | None = None) -> Claim | None:
    """The claim in ``raw``, or None for anything else: data that is not a claim (bounded in size and depth by
    node_data.parse: a deeply nested node must not stop the beat), and a claim that does not belong to its
    ``node`` (a child written beside the entry's own, naming that entry, must not replace its last send)."""
    data = node_data.parse(raw, limit=MAX_CLAIM)
    entry, sent_at = data.get("entry"), data.get("sent_at")
    if not isinstance(entry, str) or not plausible_time(sent_at) or not _encodable(entry):
        return None
    if node is not None and node != entry_node(entry):
        return None
    token = data.get("token")
    host = data.get("host")
    return Claim(
        entry,
        float(sent_at),
        token if isinstance(token, int) and not isinstance(token, bool) else None,
        version,
        host if isinstance(host, str) else "",
    )


def plausible_time(value: Any) -> TypeGuard[int | float]:
    """An epoch time in seconds that beat and its pages can use (node data is not trusted: 1e300, NaN or "soon"
    must not stop the beat or break a page)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e11


def _encodable(entry: str) -> bool:
    """JSON carries lone surrogates, which no node name (entry_node) can encode: such an entry is no claim."""
    try:
        entry.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def same_claim(claim: Claim | None, sent_at: float, token: int | None) -> bool:
    return claim is not None and claim.token == token and abs(claim.sent_at - round(sent_at, 6)) < 1e-6


def world_of(session: Session, election: str, deadline: Deadline) -> int:
    """The creation time (the server's epoch ms) of the election's node: it names the data's lifetime. Fencing
    tokens are zxids, which start again low when the ensemble loses its data; an election node made after that
    is younger than every node of the old data, so (world, token) keeps increasing across it."""
    client = session.client
    stat = call(session, lambda: client.exists_async(election), deadline)
    return 0 if stat is None else stat.ctime


def read_sent(session: Session, election: str, deadline: Deadline) -> dict[str, Claim]:
    """{entry name: its last committed claim} as every committed write left it.

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
    # pipelined: one round trip
    ours = [child for child in children if not child.startswith("__")]
    pending = [client.get_async(f"{state}/{child}") for child in ours]
    sent: dict[str, Claim] = {}
    for child, result in zip(ours, pending, strict=True):
        try:
            raw, stat = wait_result(result, session, deadline)
        except NoNodeError:
            continue
        except ZkAuthError:
            _unreadable(state, child)
            continue
        parsed = _parse(raw, stat.version, node=child)
        if parsed is not None:
            sent[parsed.entry] = parsed
    return sent


def read_claim(session: Session, election: str, entry: str, deadline: Deadline) -> Claim | None:
    """``entry``'s last committed claim, after a ``sync`` (retried through connection loss); None if none."""
    client = session.client
    path = f"{beat_state_path(election)}/{entry_node(entry)}"
    call(session, lambda: client.sync_async(path), deadline)
    try:
        raw, stat = call(session, lambda: client.get_async(path), deadline)
    except NoNodeError:
        return None
    return _parse(raw, stat.version, node=entry_node(entry))


def record_sent(
    session: Session,
    own_node: str,
    election: str,
    entry: str,
    sent_at: float,
    token: int | None,
    *,
    version: int | None,
    deadline: Deadline,
) -> str:
    """Claim ``entry``'s send, fenced by ``own_node``: COMMITTED, REJECTED or UNKNOWN.

    REJECTED: our candidate node is gone (we no longer lead) or the entry's node is not at ``version`` (None:
    absent, so it is created). UNKNOWN: the connection was lost before the answer; the transaction may commit
    yet, so the caller resolves it with :func:`read_claim` (or sends the same claim again) before it sends.
    """
    client = session.client
    path = f"{beat_state_path(election)}/{entry_node(entry)}"
    data = _data(entry, sent_at, token)
    transaction = client.transaction()
    transaction.check(own_node, -1)
    if version is not None:
        transaction.set_data(path, data, version)
    else:
        transaction.create(path, data, acl=session.acl)
    if session.dead:
        return REJECTED
    try:
        results = wait_result(transaction.commit_async(), session, deadline)
    except (ConnectionLoss, OperationTimeoutError, ZkUnavailable, SessionGone):
        return UNKNOWN  # an ended session cannot commit it any more, but may have committed it before it ended
    return REJECTED if any(isinstance(r, Exception) for r in results) else COMMITTED


def _orphans(election: str) -> str:
    return f"{beat_state_path(election)}/{ORPHANS}"


def write_orphan(session: Session, election: str, entry: str, sent_at: float, token: int | None, deadline: Deadline):
    """Note that our claim (``token``, ``sent_at``) of ``entry``, made in a session that ended before we knew
    whether it committed, was never sent. Not fenced: it only asks the leader that inherited it to send it."""
    client = session.client
    path = f"{_orphans(election)}/{entry_node(entry)}-{token}"
    try:
        call(
            session,
            lambda: client.create_async(path, _data(entry, sent_at, token), acl=session.acl, makepath=True),
            deadline,
        )
    except NodeExistsError:
        pass


def _answer_by(result, deadline: Deadline):
    """A read's answer (its error raised as kazoo's), or ZkUnavailable once ``deadline`` has passed."""
    remaining = deadline.remaining()
    if not result.wait(5.0 if remaining is None else max(0.0, remaining)):
        raise ZkUnavailable("ZooKeeper did not answer the read of the beat's state in time")
    return result.get_nowait()


def _unreadable(parent: str, child: str) -> None:
    # A node we may not read was not written by this alias (its nodes all give it READ): one such node, put there
    # by anyone who may create in the namespace, must not stop every beat from leading or adopting.
    log.warning("zklocks: beat: skipping %s/%s, which this alias may not read (NoAuth)", parent, child[:64])


def read_orphans(session: Session, election: str, deadline: Deadline) -> list[tuple[str, Claim]]:
    """The orphan notes: (child name, the claim it names)."""
    client = session.client
    where = _orphans(election)
    try:
        children = call(session, lambda: client.get_children_async(where), deadline)
    except NoNodeError:
        return []
    found = []
    for child in children:
        path = f"{where}/{child}"
        try:
            raw, _ = call(session, functools.partial(client.get_async, path), deadline)
        except NoNodeError:
            continue
        except ZkAuthError:
            _unreadable(where, child)
            continue
        claim = _parse(raw)
        if claim is not None and child == f"{entry_node(claim.entry)}-{claim.token}":
            found.append((child, claim))
    return found


def take_orphan(session: Session, own_node: str, election: str, child: str, deadline: Deadline) -> str:
    """Delete an orphan note, fenced by ``own_node``: COMMITTED means this leader, and no one else, sends it."""
    client = session.client
    path = f"{_orphans(election)}/{child}"
    transaction = client.transaction()
    transaction.check(own_node, -1)
    transaction.delete(path)
    if session.dead:
        return REJECTED
    try:
        results = wait_result(transaction.commit_async(), session, deadline)
    except (ConnectionLoss, OperationTimeoutError, ZkUnavailable, SessionGone):
        try:  # resolve: the note is gone only if our delete committed (no one else deletes it)
            gone = call(session, lambda: client.exists_async(path), deadline) is None
        except Exception:  # noqa: BLE001 - any failure leaves the outcome unknown
            return UNKNOWN
        return COMMITTED if gone else REJECTED
    return REJECTED if any(isinstance(r, Exception) for r in results) else COMMITTED


SCHEDULE = "__schedule__"  # the beat_schedule the last started beat published (celery/schedule_share.py)


def publish_schedule(session: Session, election: str, data: bytes, deadline: Deadline) -> None:
    """Write ``data`` as the shared schedule. Not fenced: every beat, standby or not, publishes its own."""
    _put(session, f"{beat_state_path(election)}/{SCHEDULE}", data, deadline)


def _put(session: Session, path: str, data: bytes, deadline: Deadline) -> None:
    """Set ``path`` to ``data``, creating it (and its parents) when it is not there yet; unfenced."""
    client = session.client
    try:
        call(session, lambda: client.set_async(path, data), deadline)
    except NoNodeError:
        try:
            call(session, lambda: client.create_async(path, data, acl=session.acl, makepath=True), deadline)
        except NodeExistsError:
            call(session, lambda: client.set_async(path, data), deadline)


def schedule_version(session: Session, election: str, deadline: Deadline) -> int | None:
    """The shared schedule's modification zxid (cheap: one exists), or None if none was published."""
    client = session.client
    stat = call(session, lambda: client.exists_async(f"{beat_state_path(election)}/{SCHEDULE}"), deadline)
    return None if stat is None else stat.mzxid


def read_schedule(session: Session, election: str, deadline: Deadline) -> tuple[bytes, int] | None:
    """The shared schedule and its modification zxid, or None."""
    client = session.client
    try:
        raw, stat = call(session, lambda: client.get_async(f"{beat_state_path(election)}/{SCHEDULE}"), deadline)
    except NoNodeError:
        return None
    return raw, stat.mzxid


STATUS = "__status__"  # what the leader alone knows: each entry's next due time and catch-up policy


def write_status(session: Session, election: str, data: bytes, deadline: Deadline) -> None:
    """The leader's view of its schedule, for the admin and ``zklocks_status --beat``. Not fenced: it carries
    the leader's token, and readers show it only while that token leads."""
    _put(session, f"{beat_state_path(election)}/{STATUS}", data, deadline)


def read_view(session: Session, election: str, deadline: Deadline) -> tuple[dict[str, Claim], bytes | None]:
    """Read-only: every entry's last claim, and the leader's status node (None if none); nothing is created."""
    client = session.client
    state = beat_state_path(election)
    try:
        children = call(session, lambda: client.get_children_async(state), deadline)
    except NoNodeError:
        return {}, None
    claims: dict[str, Claim] = {}
    # Batched and cut as the admin's readers are (client/multiread.py): anyone who may create in the namespace can
    # put thousands of children of a megabyte each here, and the page must still answer.
    ours = [child for child in children if not child.startswith("__") and len(child) <= MAX_NAME_LENGTH]
    answers = fetch(
        client,
        [(DATA, f"{state}/{child}") for child in ours],
        lambda result: _answer_by(result, deadline),
        keep=MAX_CLAIM,
        unreadable=lambda path: _unreadable(state, path.rsplit("/", 1)[1]),
    )
    for child, answer in zip(ours, answers, strict=True):
        claim = _parse(answer[0], answer[1].version, node=child) if answer is not None else None
        if claim is not None:
            claims[claim.entry] = claim
    try:
        status, _ = call(session, lambda: client.get_async(f"{state}/{STATUS}"), deadline)
    except NoNodeError:
        status = None
    return claims, status

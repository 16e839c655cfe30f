"""Worker-side fencing of beat ticks (``ZKLOCKS_BEAT["FENCE_WORKERS"] = True``): before a stamped task runs, its
signed token is recorded in ``__beat__/__executed__/<entry>`` with one versioned write, and a tick older than the
recorded one is dropped: tokens are compared within one data "world", and a tick of an older world is older whatever
its token. See docs/design.md §11, "Worker fencing", and docs/reliability.md, "Tokens after data loss".

Installed by apps.py when the setting is on, by wrapping ``celery.app.task.Task.before_start``: a task class that
overrides ``before_start`` must call ``super().before_start(...)`` to stay fenced.
"""

from __future__ import annotations

import functools
import json
import logging
import socket
import time
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ..client.deadline import Deadline
from ..client.pools import connections
from ..names import join_path
from ..recipes.kazoo_calls import call
from ..recipes.layout import beat_state_path
from . import conf as celery_conf
from . import signatures
from .beat_state import entry_node

log = logging.getLogger("zklocks")
HEADER = "zklocks_beat"
EXECUTED = "__executed__"
_installed = False


class StaleTick(Exception):
    """A tick of a deposed leader: a newer leader's tick of the same entry already ran."""


def stamp_of(request: Any) -> dict[str, Any] | None:
    stamp = getattr(request, HEADER, None) or (getattr(request, "headers", None) or {}).get(HEADER)
    if not isinstance(stamp, dict):
        return None
    if not isinstance(stamp.get("entry"), str) or not isinstance(stamp.get("election"), str):
        return None
    token = stamp.get("token")
    return stamp if isinstance(token, int) and not isinstance(token, bool) else None


# Stamps are signed with the project's SECRET_KEY (SECRET_KEY_FALLBACKS honoured): anyone who can publish to the
# broker could otherwise record a token of 2**62 for an entry, and every genuine tick after it would be dropped.
_SALT = "zklocks.beat-tick"
_unsigned_told = False


_SIGNED = ("election", "entry", "token", "world", "sent_at", "due", "catch_up")


def _signed_fields(stamp: dict[str, Any]) -> str:
    return json.dumps([stamp.get(k) for k in _SIGNED], separators=(",", ":"))


def sign(stamp: dict[str, Any]) -> dict[str, Any]:
    """``stamp`` with its signature ("sig"), made by the leader as it sends the tick. Without a SECRET_KEY the
    stamp goes unsigned (a send is never held back for it), and fencing workers drop it, saying why."""
    global _unsigned_told
    try:
        stamp["sig"] = signatures.signature(_signed_fields(stamp), _SALT)
    except ImproperlyConfigured:
        if not _unsigned_told:
            _unsigned_told = True
            log.error("zklocks: beat stamps go unsigned (SECRET_KEY is empty): workers with FENCE_WORKERS drop them")
    return stamp


def signed(stamp: dict[str, Any]) -> bool:
    """Whether ``stamp`` was signed by a beat of this project (same SECRET_KEY, or one of its fallbacks)."""
    return signatures.verified(_signed_fields(stamp), stamp.get("sig"), _SALT)


def executed_path(namespace: str, election: str, entry: str) -> str:
    return f"{beat_state_path(join_path(namespace, election))}/{EXECUTED}/{entry_node(entry)}"


def _world(record: dict[str, Any]) -> int:
    """The data lifetime a stamp's or a record's token belongs to (beat_state.world_of); 0 if it names none."""
    world = record.get("world")
    return world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else 0


def _recorded(raw: bytes | None, stamp: dict[str, Any]) -> tuple[int, int] | None:
    """The token and world of the tick recorded as run for ``stamp``'s entry, if a beat of this project signed
    that tick. Anyone who can write the node (write access to ZooKeeper, not to the broker) could otherwise record
    a token of 2**62, and every genuine tick after it would be dropped: such a record is taken as no record."""
    try:
        recorded = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        return None
    ran = recorded.get("stamp") if isinstance(recorded, dict) else None
    if not isinstance(ran, dict) or not signed(ran):
        return None
    token = ran.get("token")
    if ran.get("election") != stamp["election"] or ran.get("entry") != stamp["entry"]:
        return None
    if not isinstance(token, int) or isinstance(token, bool):
        return None
    return token, _world(ran)


def admit(stamp: dict[str, Any], task_id: str | None = None) -> None:
    """Record ``stamp``'s token as executed for its entry, or raise StaleTick if a newer one was."""
    using = celery_conf.beat_settings()["USING"]
    pool = connections[using]
    session = pool.session()
    client = session.client
    path = executed_path(pool.cfg.namespace, stamp["election"], stamp["entry"])
    token: int = stamp["token"]
    world = _world(stamp)
    data = json.dumps(
        {
            "token": token,
            "world": world,
            "task_id": task_id,
            "host": socket.gethostname()[:64],
            "at": round(time.time(), 6),
            # The tick's signed stamp: what a reader trusts (_recorded), not the fields above.
            "stamp": {**{k: stamp.get(k) for k in _SIGNED}, "sig": stamp.get("sig")},
        },
        separators=(",", ":"),
    ).encode()
    deadline = Deadline(session.cfg.connect_timeout * 2)
    while True:
        try:
            raw, stat = call(session, lambda: client.get_async(path), deadline)
        except NoNodeError:
            try:
                call(session, lambda: client.create_async(path, data, acl=session.acl, makepath=True), deadline)
                return
            except NodeExistsError:
                continue  # another worker recorded first: compare with its token
        ran = _recorded(raw, stamp)
        if ran is not None:
            newest, newest_world = ran
            if newest_world > world:
                raise StaleTick(
                    f"token {token} was issued before ZooKeeper's data was replaced (a tick of the data created at "
                    f"{newest_world} ms already ran)"
                )
            if newest_world == world and newest > token:
                raise StaleTick(f"token {token} is older than token {newest}, whose tick of this entry already ran")
        try:
            # One versioned write: it fails if another worker recorded a token since our read.
            call(session, functools.partial(client.set_async, path, data, stat.version), deadline)
            return
        except BadVersionError:
            continue


def _before_start(self, task_id, args, kwargs):
    stamp = stamp_of(self.request)
    if stamp is not None:
        if not signed(stamp):
            from celery.exceptions import Ignore

            log.warning(
                "zklocks: dropping task %s: its beat stamp (entry %r, token %r) is not signed by a beat with this "
                "project's SECRET_KEY (or this worker has none to check it with)",
                task_id,
                stamp["entry"],
                stamp["token"],
            )
            raise Ignore()
        try:
            admit(stamp, task_id)
        except StaleTick as exc:
            from celery.exceptions import Ignore

            log.warning(
                "zklocks: dropping beat tick %s of entry %r (election %r, sent by %s at %s): %s",
                task_id,
                stamp["entry"],
                stamp["election"],
                stamp.get("host", "?"),
                stamp.get("sent_at"),
                exc,
            )
            raise Ignore() from None
    return _original(self, task_id, args, kwargs)


_original: Any = None


def install() -> None:
    """Fence every task's start (idempotent). Celery's tracer sees the wrapper as a custom before_start: its
    __module__ is ours, not celery.app.task."""
    global _installed, _original
    if _installed:
        return
    from celery.app.task import Task

    _original = Task.before_start
    Task.before_start = _before_start
    _installed = True

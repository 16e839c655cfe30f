"""What a contender writes into its node: small versioned JSON, written once in the create."""

from __future__ import annotations

import contextvars
import json
import os
import socket
import threading
import time
from typing import Any

from ..owners import current_owner

MAX_BYTES = 1024
_FIELD_LIMIT = 120

# Set by zklocks.celery around a task's lock acquire, so the admin can show which task holds a lock.
current_task: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("zklocks_task", default=None)
# Set with it: a digest of the task and its arguments (execution/keys.call_digest), so that a de-duplicated call shares
# a running execution only when it is the same call.
current_call: contextvars.ContextVar[str | None] = contextvars.ContextVar("zklocks_call", default=None)

_host = socket.gethostname()[:_FIELD_LIMIT]


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _FIELD_LIMIT:
        return value[:_FIELD_LIMIT]
    return value


_prefixes: dict[tuple, str] = {}

# The promise of every contender this client creates: an exclusive contender's node is written only by its release
# (node.OwnNode._send_delete; a long hold's acquired_at goes to the lock node, hold_record). docs/design.md §5.
MARKS, RELEASE = "marks", "release"
_PROMISE = f'"{MARKS}":"{RELEASE}"'.encode()


def marks_release_only(raw: bytes | None) -> bool:
    """Whether node data carries the promise above. Exact for our encoder: outside a key, a JSON string never
    holds an unescaped quote."""
    return raw is not None and _PROMISE in raw


def hold_record(child: str, acquired_at: float, **extra: Any) -> bytes:
    """The lock node's data while an exclusive holder that waited has held for long: who, and since when (and, for
    a lock-delay's guard, ``extra``: lock_delay.guard)."""
    data = {"v": 1, "holder": child, "acquired_at": round(acquired_at, 3), **extra}
    return json.dumps(data, separators=(",", ":")).encode()


def parse_hold_record(raw: bytes | None) -> tuple[str, float] | None:
    """(child, acquired_at) of a lock node's hold_record; None for any other data (a semaphore's marker, none)."""
    data = parse(raw)
    child, acquired_at = data.get("holder"), data.get("acquired_at")
    if isinstance(child, str) and (moment := timestamp(acquired_at)) is not None:
        return child, moment
    return None


# The epoch seconds a reader accepts from node data: from 1970 to the year 5138, so that a date can be shown.
LATEST = 1e11


def timestamp(value: Any) -> float | None:
    """``value`` as epoch seconds if it is a finite number in [0, LATEST], else None (NaN, 1e999, a bool, a
    400-digit integer, a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and not 0 <= value <= LATEST:
        return None  # before float(): a huge integer does not fit a float
    moment = float(value)
    return moment if 0.0 <= moment <= LATEST else None  # NaN fails both comparisons


def thread_name(owner: object) -> str:
    """The name of the thread of ``owner`` (a hold_registry.Owner; for an asyncio task, its event loop's thread), read
    now when called in that thread."""
    if getattr(owner, "ident", None) == threading.get_ident():
        return threading.current_thread().name
    return getattr(owner, "thread_name", None) or threading.current_thread().name


def _owner_fields(owner: object) -> dict[str, Any]:
    number = getattr(owner, "number", None)
    if number is None:
        return {}
    fields = {"ident": getattr(owner, "ident", None), "owner": number}
    task_name = getattr(owner, "task_name", None)
    if task_name is not None:
        fields["asyncio_task"] = _clip(task_name)
    return fields


def payload(
    *, thread: str | None = None, task: tuple[str, str] | None = None, owner: object = None, **extra: Any
) -> bytes:
    """Node data for a contender. The fixed part is encoded once per (thread, task, owner, pid).

    ``thread``, ``task`` and ``owner`` (owners.Owner) default to the caller's; give them when writing for another
    thread. The owner is written as ``ident`` (its thread's ident), ``owner`` (its number, never reused within
    the process) and, for an asyncio task, ``asyncio_task`` (the task's name): the deadlock finder tells actors
    apart by them. Data with only ``extra`` (a Celery unique-task marker) names no owner.
    """
    if extra or thread is not None or task is not None or owner is not None:
        return _encode(_fields(thread, task, owner), extra)
    owner = current_owner()
    thread = thread_name(owner)
    task = current_task.get()
    call = current_call.get() if task is not None else None
    key = (thread, task, call, owner, os.getpid())
    prefix = _prefixes.get(key)
    if prefix is None:
        if len(_prefixes) > 4096:
            _prefixes.clear()
        encoded = _encode(_fields(thread, task, owner, call), {}).decode("utf-8")
        prefix = _prefixes[key] = encoded[:-1]  # without the closing brace
    return f'{prefix},"queued_at":{time.time():.3f}}}'.encode()


def _fields(
    thread: str | None = None, task: tuple[str, str] | None = None, owner: object = None, call: str | None = None
) -> dict[str, Any]:
    if thread is None:
        thread = thread_name(owner) if owner is not None else threading.current_thread().name
    data: dict[str, Any] = {
        "v": 1,
        MARKS: RELEASE,
        "host": _host,
        "pid": os.getpid(),
        "thread": _clip(thread),
    }
    data.update(_owner_fields(owner))
    if task is None:
        task = current_task.get()
        call = current_call.get() if task is not None else None
    if task is not None:
        data["task_id"], data["task_name"] = _clip(task[0]), _clip(task[1])
        if call is not None:
            data["call"] = call
    return data


def _encode(data: dict[str, Any], extra: dict[str, Any]) -> bytes:
    if "queued_at" not in extra and extra:
        data["queued_at"] = round(time.time(), 3)
    for key, value in extra.items():
        data[key] = _clip(value)
    raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(raw) > MAX_BYTES - 40:  # only absurd fields get here: keep the identity, drop the rest
        kept = {k: data[k] for k in ("v", MARKS, "host", "pid", "ident", "owner") if k in data}
        raw = json.dumps(kept, separators=(",", ":")).encode("utf-8")
    return raw


# Node data is read from a namespace anyone may write to (without AUTH): it is parsed only when it is no longer
# than what any zklocks writes (with room to spare) and nests no deeper than MAX_DEPTH; anything else is foreign.
MAX_PARSE = 4 * MAX_BYTES
MAX_DEPTH = 8


def _shallow(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON ``text`` nests arrays and objects at most ``limit`` deep (a scan: no recursion)."""
    if text.count("[") + text.count("{") <= limit:
        return True
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def parse(raw: bytes | None, limit: int = MAX_PARSE) -> dict[str, Any]:
    """Holder data as a dict. Foreign data (e.g. a kazoo identifier) comes back as {"raw": <text>}, and so does
    data longer than ``limit`` bytes or nested deeper than MAX_DEPTH: never parsed, so never a cost or an error.
    Values are not checked here: a reader takes each field only when it has the expected type and range."""
    if not raw:
        return {}
    if len(raw) > limit:
        return {"raw": raw[:MAX_PARSE].decode("utf-8", errors="replace")}
    try:
        text = raw.decode("utf-8")
        if not _shallow(text):
            return {"raw": text}
        data = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {"raw": raw.decode("utf-8", errors="replace")}
    if isinstance(data, dict) and data.get("v") == 1:
        return data
    return {"raw": raw.decode("utf-8", errors="replace")}

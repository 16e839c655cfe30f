"""What a contender writes into its node: small versioned JSON, written once in the create."""

from __future__ import annotations

import contextvars
import json
import os
import socket
import threading
import time
from typing import Any

MAX_BYTES = 1024
_FIELD_LIMIT = 120

# Set by zklocks.celery around a task's lock acquire, so the admin can show which task holds a lock.
current_task: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("zklocks_task", default=None)

_host = socket.gethostname()[:_FIELD_LIMIT]


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _FIELD_LIMIT:
        return value[:_FIELD_LIMIT]
    return value


_prefixes: dict[tuple, str] = {}


def payload(*, thread: str | None = None, task: tuple[str, str] | None = None, **extra: Any) -> bytes:
    """Node data for a contender. The fixed part is encoded once per (thread, task, pid).

    ``thread`` and ``task`` default to the calling thread's; give them when writing for another thread.
    """
    if extra or thread is not None or task is not None:
        return _encode(_fields(thread, task), extra)
    thread = threading.current_thread().name
    task = current_task.get()
    key = (thread, task, os.getpid())
    prefix = _prefixes.get(key)
    if prefix is None:
        if len(_prefixes) > 4096:
            _prefixes.clear()
        encoded = _encode(_fields(thread, task), {}).decode("utf-8")
        prefix = _prefixes[key] = encoded[:-1]  # without the closing brace
    return f'{prefix},"queued_at":{time.time():.3f}}}'.encode()


def _fields(thread: str | None = None, task: tuple[str, str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "v": 1,
        "host": _host,
        "pid": os.getpid(),
        "thread": _clip(thread if thread is not None else threading.current_thread().name),
    }
    task = task if task is not None else current_task.get()
    if task is not None:
        data["task_id"], data["task_name"] = _clip(task[0]), _clip(task[1])
    return data


def _encode(data: dict[str, Any], extra: dict[str, Any]) -> bytes:
    if "queued_at" not in extra and extra:
        data["queued_at"] = round(time.time(), 3)
    for key, value in extra.items():
        data[key] = _clip(value)
    raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(raw) > MAX_BYTES - 40:  # only absurd fields get here: keep the identity, drop the rest
        raw = json.dumps({k: data[k] for k in ("v", "host", "pid") if k in data}).encode("utf-8")
    return raw


def parse(raw: bytes | None) -> dict[str, Any]:
    """Holder data as a dict. Foreign data (e.g. a kazoo identifier) comes back as {"raw": <text>}."""
    if not raw:
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {"raw": raw.decode("utf-8", errors="replace")}
    if isinstance(data, dict) and data.get("v") == 1:
        return data
    return {"raw": raw.decode("utf-8", errors="replace")}

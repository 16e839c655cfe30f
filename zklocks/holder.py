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


def payload(**extra: Any) -> bytes:
    data: dict[str, Any] = {
        "v": 1,
        "host": _host,
        "pid": os.getpid(),
        "thread": _clip(threading.current_thread().name),
        "queued_at": round(time.time(), 3),
    }
    task = current_task.get()
    if task is not None:
        data["task_id"], data["task_name"] = _clip(task[0]), _clip(task[1])
    for key, value in extra.items():
        data[key] = _clip(value)
    raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(raw) > MAX_BYTES:  # only absurd extra fields get here: keep the identity, drop the rest
        raw = json.dumps({k: data[k] for k in ("v", "host", "pid", "queued_at")}).encode("utf-8")
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

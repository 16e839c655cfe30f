"""The lock name of a task execution: a ``lock_key`` template, or the task name plus a digest of the arguments.

Pure functions (no Celery, no ZooKeeper). A bad key is an ``InvalidLockName`` (a ValueError), arguments that do
not fit the task a TypeError; both messages start with the task name, so a log line says which task it is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from .. import names
from ..exceptions import InvalidLockName
from ..names import MAX_NAME_LENGTH

DIGEST_CHARS = 32  # 128 bits of SHA-256


def bind_arguments(task_name: str, func: Callable, args: tuple | list, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults applied; TypeError (as for any call) if they do not fit."""
    try:
        return names.bind_arguments(func, args, kwargs)
    except TypeError as exc:
        raise TypeError(
            f"task {task_name!r}: the arguments {tuple(args)!r} {kwargs!r} do not fit {names.signature(func)}: {exc}"
        ) from None


def canonical_json(task_name: str, arguments: dict[str, Any]) -> str:
    try:
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidLockName(
            f"task {task_name!r}: the default lock_key is a digest of the arguments as JSON, and these arguments "
            f"are not JSON-serialisable ({exc}). Give the task an explicit lock_key template, e.g. "
            f'lock_key="{task_name}:{{some_argument}}".'
        ) from None


def call_digest(task_name: str, func: Callable, args: tuple | list | None, kwargs: dict | None) -> str:
    """Which call this is, the task and its bound arguments, as a digest: a de-duplicated call shares another's
    execution only when the two digests are equal (a lock_key may be the same for different calls). Never raises:
    arguments that are not JSON are taken by repr (which may differ between processes: then nothing is shared)."""
    try:
        arguments: Any = names.bind_arguments(func, args or (), kwargs or {})
    except TypeError:
        arguments = {"args": list(args or ()), "kwargs": dict(kwargs or {})}
    try:
        body = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        body = repr(arguments)
    return hashlib.sha256(f"{task_name}\n{body}".encode()).hexdigest()[:DIGEST_CHARS]


def default_name(task_name: str, arguments: dict[str, Any]) -> str:
    """``<task name>:<digest>``; the digest covers the full task name too, so a clipped name cannot collide."""
    body = canonical_json(task_name, arguments)
    digest = hashlib.sha256(f"{task_name}\n{body}".encode()).hexdigest()[:DIGEST_CHARS]
    return f"{task_name[: MAX_NAME_LENGTH - DIGEST_CHARS - 1]}:{digest}"


def lock_name(
    task_name: str, func: Callable, template: str | None, args: tuple | list | None, kwargs: dict | None
) -> str:
    """The lock name of one execution of ``task_name`` called with ``args`` and ``kwargs``."""
    arguments = bind_arguments(task_name, func, args or (), kwargs or {})
    if template is None:
        return names.validate_name(default_name(task_name, arguments))
    return names.render_template(
        template,
        arguments,
        what=f"task {task_name!r}",
        label="lock_key",
        owner=f"the task (arguments: {', '.join(arguments) or 'none'})",
    )

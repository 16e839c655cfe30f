"""The lock name of a task execution: a ``lock_key`` template, or the task name plus a digest of the arguments.

Pure functions (no Celery, no ZooKeeper). A bad key is an ``InvalidLockName`` (a ValueError), arguments that do
not fit the task a TypeError; both messages start with the task name, so a log line says which task it is.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from typing import Any, Callable

from ..exceptions import InvalidLockName
from ..names import MAX_NAME_LENGTH, validate_name

DIGEST_CHARS = 32  # 128 bits of SHA-256


@functools.lru_cache(maxsize=1024)
def _signature(func: Callable) -> inspect.Signature:
    return inspect.signature(func)


def bind_arguments(task_name: str, func: Callable, args: tuple | list, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults applied; TypeError (as for any call) if they do not fit."""
    try:
        bound = _signature(func).bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"task {task_name!r}: the arguments {tuple(args)!r} {kwargs!r} do not fit "
                        f"{_signature(func)}: {exc}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def canonical_json(task_name: str, arguments: dict[str, Any]) -> str:
    try:
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidLockName(
            f"task {task_name!r}: the default lock_key is a digest of the arguments as JSON, and these arguments "
            f"are not JSON-serialisable ({exc}). Give the task an explicit lock_key template, e.g. "
            f"lock_key=\"{task_name}:{{some_argument}}\"."
        ) from None


def default_name(task_name: str, arguments: dict[str, Any]) -> str:
    """``<task name>:<digest>``; the digest covers the full task name too, so a clipped name cannot collide."""
    body = canonical_json(task_name, arguments)
    digest = hashlib.sha256(f"{task_name}\n{body}".encode()).hexdigest()[:DIGEST_CHARS]
    return f"{task_name[:MAX_NAME_LENGTH - DIGEST_CHARS - 1]}:{digest}"


def render_template(task_name: str, template: str, arguments: dict[str, Any]) -> str:
    try:
        return template.format(**arguments)
    except (KeyError, AttributeError) as exc:
        raise InvalidLockName(f"task {task_name!r}: lock_key {template!r} refers to {exc}, which is not an "
                              f"argument of the task (arguments: {', '.join(arguments) or 'none'})") from None
    except (IndexError, ValueError, TypeError) as exc:
        raise InvalidLockName(f"task {task_name!r}: cannot fill lock_key {template!r} from the arguments "
                              f"{arguments!r}: {exc}") from None


def lock_name(task_name: str, func: Callable, template: str | None, args: tuple | list | None,
              kwargs: dict | None) -> str:
    """The lock name of one execution of ``task_name`` called with ``args`` and ``kwargs``."""
    arguments = bind_arguments(task_name, func, args or (), kwargs or {})
    name = default_name(task_name, arguments) if template is None else render_template(task_name, template,
                                                                                         arguments)
    try:
        return validate_name(name)
    except InvalidLockName as exc:
        raise InvalidLockName(f"task {task_name!r}: lock_key {template!r} gives an invalid lock name: {exc}") \
            from None

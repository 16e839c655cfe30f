"""Lock names: validation and a safe, reversible mapping onto one znode name.

Names made only of ASCII letters, digits, ``-``, ``_`` and ``:`` map to themselves, so other ZooKeeper
clients find ``NAMESPACE/<name>``. Every other character is percent-encoded as UTF-8 (``%`` itself included),
which makes the mapping injective and keeps ``/``, ``.`` and ``..`` from ever forming a path step.
"""

from __future__ import annotations

import re
import string
from urllib.parse import unquote

from .exceptions import InvalidLockName

MAX_NAME_LENGTH = 200
_SAFE = frozenset(string.ascii_letters + string.digits + "-_:")
_PLAIN = re.compile(r"[A-Za-z0-9_:\-]+\Z")


def _is_control(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7F <= code <= 0x9F


def validate_name(name: object) -> str:
    """Return ``name`` if it is a valid lock name, else raise InvalidLockName (a ValueError)."""
    if not isinstance(name, str):
        raise InvalidLockName(f"lock name must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidLockName("lock name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidLockName(f"lock name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}")
    if any(_is_control(ch) for ch in name):
        raise InvalidLockName(f"lock name {name!r} contains a control character")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidLockName(f"lock name {name!r} is not valid Unicode (a lone surrogate)") from None
    return name


def encode_name(name: str) -> str:
    """Map a valid lock name to a single znode name (no ``/``, never ``.`` or ``..``)."""
    if _PLAIN.match(name):
        return name
    out = []
    for ch in name:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def decode_name(node: str) -> str:
    """Inverse of :func:`encode_name`; a foreign node name comes back as it is (modulo ``%XX``)."""
    if "%" not in node:
        return node
    return unquote(node, errors="strict") if _looks_encoded(node) else node


def _looks_encoded(node: str) -> bool:
    try:
        return encode_name(unquote(node, errors="strict")) == node
    except UnicodeDecodeError:
        return False


def join_path(namespace: str, name: str) -> str:
    """The lock node of ``name`` below ``namespace`` (already validated)."""
    return namespace.rstrip("/") + "/" + encode_name(validate_name(name))

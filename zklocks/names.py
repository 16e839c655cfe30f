"""Lock names: validation, a safe, reversible mapping onto one znode name (every character but ASCII letters, digits,
``-``, ``_`` and ``:`` is percent-encoded as UTF-8, ``%`` included, so ``/``, ``.`` and ``..`` never form a path
step), and the one template engine (docs/design.md §12; docs/reference.md,
"Lock names")."""

from __future__ import annotations

import functools
import inspect
import re
import string
import unicodedata
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from .exceptions import InvalidLockName

MAX_NAME_LENGTH = 200
# The longest node name a valid name encodes to: 200 four-byte characters, each byte as "%XX".
MAX_NODE_LENGTH = 3 * 4 * MAX_NAME_LENGTH
_SAFE = frozenset(string.ascii_letters + string.digits + "-_:")
_PLAIN = re.compile(r"[A-Za-z0-9_:\-]+\Z")


# Bidirectional controls: they make a name display in another order than it is stored (an admin row, a log
# line or a health message that reads as another lock's name).
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Joiners that scripts (Persian, Indic) and emoji sequences need: the only format characters names may hold.
_JOINERS = frozenset("\u200c\u200d")


def _is_control(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7F <= code <= 0x9F


def _is_hidden_format(ch: str) -> bool:
    """A bidi control or another invisible format character (Unicode category Cf: U+200B, U+2060, U+FEFF...)."""
    return ch in BIDI_CONTROLS or (unicodedata.category(ch) == "Cf" and ch not in _JOINERS)


def unsafe_to_show(ch: str) -> bool:
    """A character that would make a name display differently from what it is: a control, a bidi control or
    another invisible format character, or a line or paragraph separator (U+2028, U+2029); or one that cannot be
    written at all: a lone surrogate (a node's JSON may hold ``"\\ud800"``), which UTF-8 refuses."""
    return _is_control(ch) or _is_hidden_format(ch) or ch in "\u2028\u2029" or "\ud800" <= ch <= "\udfff"


def shown(name: str) -> str:
    """``name`` as the admin and the commands show it: the characters a valid name never holds but a foreign node's
    name may (it was not made by zklocks) as visible escapes (``\\u202e``), so that one lock cannot pose as
    another."""
    if _PLAIN.match(name):
        return name
    return "".join(_escaped(ch) if unsafe_to_show(ch) or ch == "\\" else ch for ch in name)


def _escaped(ch: str) -> str:
    """A character as Python writes it in a string literal; a backslash doubled, so that a name holding the text
    of an escape never reads as one holding the character."""
    code = ord(ch)
    if ch == "\\":
        return "\\\\"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _char_name(ch: str) -> str:
    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'FORMAT CHARACTER')}"


def validate_name(name: object) -> str:
    """Return ``name`` if it is a valid lock name, else raise InvalidLockName (a ValueError)."""
    if type(name) is str and len(name) <= MAX_NAME_LENGTH and _PLAIN.match(name):
        return name  # the common case (letters, digits, "-", "_", ":"), checked once per acquire and per path
    if not isinstance(name, str):
        raise InvalidLockName(f"lock name must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidLockName("lock name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidLockName(f"lock name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}")
    if any(_is_control(ch) for ch in name):
        raise InvalidLockName(f"lock name {name!r} contains a control character")
    hidden = next((ch for ch in name if _is_hidden_format(ch)), None)
    if hidden is not None:
        what = "a bidirectional control" if hidden in BIDI_CONTROLS else "an invisible format character"
        raise InvalidLockName(
            f"lock name {name!r} contains {what} ({_char_name(hidden)}): it would display differently from what it is"
        )
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


# -- name templates: the one engine behind decorator names ("invoice:{invoice_id}") and Celery lock_key --


@functools.lru_cache(maxsize=1024)
def signature(func: Callable) -> inspect.Signature:
    return inspect.signature(func)


def bind_arguments(func: Callable, args: tuple | list, kwargs: dict) -> dict[str, Any]:
    """A call's arguments by parameter name, defaults applied; TypeError (as for the call itself) if they do not
    fit ``func``."""
    bound = signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def template_fields(template: str) -> list[str] | None:
    """The top-level argument names a template uses (``[]`` for a plain name). ValueError with the reason if it
    cannot be filled from named arguments: malformed braces, or positional fields such as ``{}`` or ``{0}``."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"is malformed ({exc}); write {{{{ and }}}} for literal braces") from None
    fields = []
    for _, field, _, _ in parsed:
        if field is None:
            continue
        if field == "" or field.isdigit():
            raise ValueError(
                "uses a positional field ({} or {0}), which cannot be filled: name the argument, e.g. {account_id}"
            )
        fields.append(field.split(".", 1)[0].split("[", 1)[0])
    return fields


def missing_fields(template: str, func: Callable) -> list[str]:
    """Fields of ``template`` that no parameter of ``func`` provides (none if it takes ``**kwargs``)."""
    try:
        params = signature(func).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    return [f for f in template_fields(template) or () if f not in params]


# What a value filled into a template may not hold as itself: the separators of names (``:``, ``/``) and the
# escape. "report:{account_id}" given "42:pdf" would be "report:42:pdf", another call's key.
_VALUE_ESCAPES = str.maketrans({"%": "%25", ":": "%3A", "/": "%2F"})


class _KeyFormatter(string.Formatter):
    """str.format, with each filled value escaped (``_VALUE_ESCAPES``): keys of different calls never collide."""

    def format_field(self, value: Any, format_spec: str) -> str:
        return super().format_field(value, format_spec).translate(_VALUE_ESCAPES)


_KEY_FORMATTER = _KeyFormatter()


def render_template(template: str, arguments: dict[str, Any], *, what: str, label: str, owner: str) -> str:
    """Fill ``template`` from a call's ``arguments`` and validate the result as a lock name. Each value's ``%``,
    ``:`` and ``/`` are escaped (``%25``, ``%3A``, ``%2F``): a value cannot fake the template's separators.

    ``what`` starts every message (the decorated function, the task), ``label`` names the template ("lock name
    template", "lock_key") and ``owner`` says whose arguments they are. InvalidLockName with the reason otherwise.
    """
    try:
        name = _KEY_FORMATTER.vformat(template, (), arguments)
    except KeyError as exc:
        raise InvalidLockName(
            f"{what}: {label} {template!r} refers to {exc}, which is not an argument of {owner}"
        ) from None
    except (IndexError, AttributeError, ValueError, TypeError) as exc:
        # e.g. "{user.nme}", "{ids[3]}", a positional "{0}", or a format spec the value does not take
        raise InvalidLockName(f"{what}: cannot fill {label} {template!r}: {exc}") from None
    try:
        return validate_name(name)
    except InvalidLockName as exc:
        raise InvalidLockName(f"{what}: {label} {template!r} gives an invalid lock name: {exc}") from None

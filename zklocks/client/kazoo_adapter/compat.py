"""Does the installed kazoo still have what zklocks uses of it beyond its public API? :func:`verify` checks each entry
of ``PRIVATE`` (``__init__.py``) as it says, before the first session and in the system check zklocks.E060
(docs/compatibility.md, "Python, Django, kazoo"). Hooks are checked in the bytecode: one that kazoo renamed, inlined
or called through its class would be left uncalled, the lease unproven and every hold lost for no visible reason.
"""

from __future__ import annotations

import dis
import inspect
import logging
import threading
from collections.abc import Callable
from importlib import metadata
from types import CodeType, ModuleType

from kazoo.client import KazooClient
from kazoo.handlers.utils import AsyncResult
from kazoo.protocol import serialization
from kazoo.protocol.connection import ConnectionHandler

from ...exceptions import ZkConfigError
from . import EXISTS, FIELDS, OPCODE, PRIVATE, RECORD, SET_ON_SELF, SIGNATURE, STRUCT, THROUGH_SELF, USED_IN

# The kazoo releases zklocks is tested with (noxfile.py's kazoo cells: the lowest and the highest); the same range
# as pyproject.toml's dependency.
SUPPORTED = "kazoo>=2.9,<2.12"

log = logging.getLogger("zklocks")

_STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL", "STORE_ATTR", "STORE_SUBSCR"})
_verdict: list[str | None] = []  # the installed kazoo's problems ("" for none), computed once
_verdict_lock = threading.Lock()


def verify(connection_class: type | None = None, client_class: type | None = None) -> None:
    """Raise ZkConfigError naming every entry of ``PRIVATE`` the installed kazoo fails (missing, another signature,
    no longer used through ``self``, other fields). Without arguments: the installed kazoo, checked once per process."""
    if connection_class is None and client_class is None:
        with _verdict_lock:
            if not _verdict:
                _verdict.append("; ".join(_problems(ConnectionHandler, KazooClient)))
        problems = _verdict[0]
    else:
        problems = "; ".join(_problems(connection_class or ConnectionHandler, client_class or KazooClient))
    if problems:
        raise ZkConfigError(
            f"kazoo {_installed_version()} lacks internals zklocks relies on: {problems}. zklocks supports "
            f"{SUPPORTED} (tested); install a kazoo in that range"
        )


def _installed_version() -> str:
    try:
        return metadata.version("kazoo")
    except metadata.PackageNotFoundError:
        return "(version unknown)"


class _Probe:
    """Code of the shapes the bytecode reader meets in kazoo: ``__init__`` sets ``self.kept``; ``call`` unpacks
    ``self.pair(...)`` into two values; ``keep`` sets ``self.other`` with ``self`` a closure's cell (as in
    KazooClient.__init__); ``put`` sets ``self.third`` from an argument (one paired load on Python 3.13)."""

    def __init__(self) -> None:
        self.kept = 0

    def call(self) -> int:
        first, second = self.pair(self.kept)
        return first + second

    def pair(self, value: int) -> tuple[int, int]:
        return value, value

    def keep(self, value: int) -> Callable[[], int]:
        self.other = value
        return lambda: self.kept

    def put(self, value: int) -> None:
        self.third = value


_readable: list[bool] = []  # bytecode_readable()'s answer, computed once


def bytecode_readable() -> bool:
    """Whether the bytecode reader reads this Python's bytecode right (checked on :class:`_Probe`).

    The reader depends on CPython's opcode names, which change between versions. Where it no longer reads them
    right, two checks fall back to the names a method's code mentions (set on self, called through self: see
    _problems), zklocks.W063 says so and sessions log it once: no working kazoo is refused for a misreading."""
    if not _readable:
        try:
            code = _code(_Probe, "call")
            readable = (
                code is not None
                and _self_stores_of(_Probe) == {"kept", "other", "third"}
                and _self_uses(code, "pair") == {2}
            )
        except Exception:  # noqa: BLE001 any failure of the reader is a misreading
            readable = False
        if not readable:
            log.warning(
                "zklocks: this Python's bytecode is not read right; the check of kazoo's internals falls back to "
                "names (zklocks.W063)"
            )
        _readable.append(readable)
    return _readable[0]


def _problems(conn_cls: type, client_cls: type, wire: ModuleType = serialization) -> list[str]:
    out: list[str] = []
    owners = {"ConnectionHandler": conn_cls, "KazooClient": client_cls, "AsyncResult": AsyncResult}
    readable = bytecode_readable()  # if not, set on self and called through self fall back to names
    # What each class sets on self; misread, every name its methods mention (co_names: no opcode involved).
    stored = {cls: _self_stores_of(cls) if readable else _names_of(cls) for cls in (conn_cls, client_cls)}
    for entry in PRIVATE:
        name, why = entry.name, entry.needs
        cls = owners.get(entry.owner)
        for check in entry.checks:
            if check.kind == SIGNATURE and cls is not None:
                out.extend(_method_problem(cls, name, check.detail, why))
            elif check.kind == SET_ON_SELF and cls is not None:
                if name not in stored[cls]:
                    out.append(f"{cls.__name__} no longer sets self.{name} ({why})")
            elif check.kind == THROUGH_SELF and cls is not None:
                code = _code(cls, check.detail)
                if code is None:
                    out.append(f"{cls.__name__}.{check.detail} is missing ({check.lost})")
                    continue
                if readable:
                    shapes = _self_uses(code, name)
                else:  # misread: only whether the caller names it at all, with no shape to compare
                    shapes = {None} if name in _all_names(code) else set()
                if not shapes:
                    out.append(f"{cls.__name__}.{check.detail} no longer uses self.{name} ({check.lost})")
                elif readable and check.unpacked is not None and check.unpacked not in shapes:
                    out.append(
                        f"{cls.__name__}.{check.detail} no longer unpacks self.{name}(...) into {check.unpacked} "
                        f"values ({check.lost})"
                    )
            elif check.kind == USED_IN:
                code = _code(conn_cls, check.detail)
                if code is None:
                    out.append(f"{conn_cls.__name__}.{check.detail} is missing ({check.lost})")
                elif name not in _all_names(code):
                    out.append(f"{conn_cls.__name__}.{check.detail} no longer uses .{name} ({check.lost})")
            elif check.kind == EXISTS and getattr(wire, name, None) is None:
                out.append(f"kazoo.protocol.serialization.{name} is missing ({why})")
            elif check.kind == STRUCT and getattr(getattr(wire, name, None), "format", None) != check.detail:
                out.append(f"kazoo.protocol.serialization.{name} is not a struct of {check.detail!r} ({why})")
            elif check.kind == OPCODE and getattr(getattr(wire, name, None), "type", None) != check.detail:
                out.append(f"kazoo.protocol.serialization.{name} is not opcode {check.detail} ({why})")
            elif check.kind in (FIELDS, RECORD):
                out.extend(_record_problem(getattr(wire, name, None), name, check.kind, check.detail, why))
    return list(dict.fromkeys(out))


def _record_problem(record: object, name: str, kind: str, fields: tuple[str, ...], why: str) -> list[str]:
    if record is None:
        return [f"kazoo.protocol.serialization.{name} is missing ({why})"]
    have = tuple(getattr(record, "_fields", ()))
    if kind == RECORD and have != fields:
        return [f"{name} is not a record of ({', '.join(fields)}) (zklocks builds it so)"]
    missing = [f for f in fields if f not in have]
    return [f"{name} has no field {', '.join(missing)} ({why})"] if missing else []


def _method_problem(cls: type, name: str, signature: str, why: str) -> list[str]:
    method = inspect.getattr_static(cls, name, None)
    if method is None or not callable(method):
        return [f"{cls.__name__}.{name} is missing ({why})"]
    try:
        actual = str(inspect.signature(method))
    except (TypeError, ValueError):
        actual = "(?)"
    if actual != signature:
        return [f"{cls.__name__}.{name} has the signature {actual}, not {signature} ({why})"]
    return []


def _code(cls: type, name: str) -> CodeType | None:
    return _code_of(inspect.getattr_static(cls, name, None))


def _code_of(value: object) -> CodeType | None:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if not callable(value):
        return None
    code = getattr(inspect.unwrap(value), "__code__", None)
    return code if isinstance(code, CodeType) else None


def _codes(code: CodeType):
    """The code object and those nested in it (comprehensions, closures)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


def _all_names(code: CodeType) -> set[str]:
    return {name for c in _codes(code) for name in c.co_names}


def _loads_self(instr: dis.Instruction, self_name: str) -> bool:
    if not (instr.opname.startswith("LOAD_FAST") or instr.opname == "LOAD_DEREF"):
        return False
    value = instr.argval
    return (value[-1] if isinstance(value, tuple) else value) == self_name


def _self_name(code: CodeType) -> str:
    return code.co_varnames[0] if code.co_argcount else "self"


def _self_uses(code: CodeType, name: str) -> set[int | None]:
    """For each ``self.<name>`` loaded in ``code``: the length of the tuple its value (or the value of the call on
    it) is unpacked into, or None. Empty: ``code`` never loads ``self.<name>``."""
    self_name = _self_name(code)
    shapes: set[int | None] = set()
    for c in _codes(code):
        instrs = list(dis.get_instructions(c))
        for i, instr in enumerate(instrs[1:], 1):
            if instr.opname in ("LOAD_ATTR", "LOAD_METHOD") and instr.argval == name:
                if _loads_self(instrs[i - 1], self_name):
                    shapes.add(_unpacked_into(instrs, i + 1))
    return shapes


def _unpacked_into(instrs: list[dis.Instruction], start: int) -> int | None:
    for instr in instrs[start:]:
        if instr.opname == "UNPACK_SEQUENCE":
            return int(instr.arg or 0)
        if instr.opname in _STORES or instr.opname.startswith("STORE_FAST") or instr.opname == "POP_TOP":
            return None
        if instr.opname.startswith("RETURN"):
            return None
    return None


def _method_codes(cls: type) -> list[CodeType]:
    """The code of every method of ``cls``, its own and those it inherits."""
    values = [value for c in cls.__mro__ if c is not object for value in vars(c).values()]
    return [code for value in values if (code := _code_of(value))]


def _self_stores_of(cls: type) -> set[str]:
    """The attributes the methods of ``cls`` set on self."""
    return {name for code in _method_codes(cls) for name in _self_stores(code)}


def _names_of(cls: type) -> set[str]:
    """Every name the methods of ``cls`` mention."""
    return {name for code in _method_codes(cls) for name in _all_names(code)}


def _self_stores(code: CodeType) -> set[str]:
    """The attributes ``code`` sets on its first argument."""
    self_name = _self_name(code)
    out: set[str] = set()
    instrs = list(dis.get_instructions(code))
    for i, instr in enumerate(instrs[1:], 1):
        if instr.opname == "STORE_ATTR" and _loads_self(instrs[i - 1], self_name):
            out.add(str(instr.argval))
    return out

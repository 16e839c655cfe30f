"""Does the installed kazoo still have the internals zklocks hooks?

None of these is kazoo's public API:

- session.py replaces ``_submit``, ``_read_header`` and ``_invoke`` on each session's ``ConnectionHandler``
  (``KazooClient._connection``): the lease is proven from what they see. They only see what kazoo calls through
  ``self``; a kazoo that renamed one, inlined it or called it through its class would leave the replacement
  uncalled, the lease unproven, and every hold lost for no visible reason.
- iohandler.py replaces ``_read`` (called by ``_read_header``) and reads ``_socket`` inside
  ``_socket_error_handling``.
- multiread.py sends through ``KazooClient._call``; recipes/gate.py counts ``KazooClient._queue`` and
  ``_pending``, which the connection moves requests between; recipes/kazoo_calls.py creates contenders with
  ``KazooClient._create_async_inner``; handles/hold_registry.py takes a released hold's watcher off
  ``KazooClient._data_watchers``.
- recipes/kazoo_calls.py and recipes/node.py build kazoo's request records (``Sync``, ``Exists``, ``GetChildren``,
  ``Delete``, ``SetData``, ``Transaction``) by position and send them through ``_call``: their fields must be the
  ones, in the order, that they are built with.

:func:`verify` checks each one against kazoo's classes: present, with the signature zklocks calls it with, and
used as expected (``self._submit`` in ``_send_request`` and ``_send_ping``, ``self._read_header`` in
``_read_socket``, ``self._invoke`` in ``_connect``, ...), from the bytecode, so it works without kazoo's
sources. Sessions run it before the first one starts (once per process); the system check zklocks.E060 runs it
too. A kazoo that fails is refused with ZkConfigError, never run with a lease that cannot be kept.
"""

from __future__ import annotations

import dis
import inspect
import threading
from importlib import metadata
from types import CodeType

from kazoo.client import KazooClient
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Connect, Delete, Exists, GetChildren, ReplyHeader, SetData, Sync, Transaction

from ..exceptions import ZkConfigError

# The kazoo releases zklocks is tested with (noxfile.py's kazoo cells: the lowest and the highest); the same range
# as pyproject.toml's dependency.
SUPPORTED = "kazoo>=2.9,<2.12"

# ConnectionHandler methods zklocks replaces or calls: name, signature, what depends on it.
_CONNECTION_METHODS = (
    ("_submit", "(self, request, timeout, xid=None)", "the lease records when each request goes out"),
    ("_read_header", "(self, timeout)", "the lease reads the header of every answer"),
    ("_invoke", "(self, timeout, request, xid=None)", "the lease of a new connection is settled at its handshake"),
    ("_read", "(self, length, timeout)", "the short read path replaces it"),
    ("_socket_error_handling", "(self)", "the short read path reports socket errors as kazoo does"),
)
# Where kazoo must go through self.<name> for the replacements to be called: caller, name, what is lost
# otherwise, and the length of the tuple the result is unpacked into (None: not checked).
_THROUGH_SELF = (
    ("_send_request", "_submit", "requests would go out unseen by the lease", None),
    ("_send_ping", "_submit", "pings would go out unseen by the lease", None),
    ("_read_socket", "_read_header", "answers would never prove the lease", 3),
    ("_connect", "_invoke", "a new connection's lease would never be settled", 2),
    ("_read_header", "_read", "the short read path would be skipped", None),
    ("_read", "_socket", "the short read path would read another socket than kazoo", None),
    ("_read", "_socket_error_handling", "socket errors would be reported unlike kazoo's", None),
    ("_connect", "_socket", "the short read path would read another socket than kazoo", None),
)
# Names the connection uses on its client (not through self): recipes/gate.py counts both deques.
_CLIENT_NAMES = (
    ("_send_request", "_queue", "the loop driver's gate would not see queued requests"),
    ("_send_request", "_pending", "the loop driver's gate would not see requests in flight"),
)
_CLIENT_METHODS = (
    ("_call", "(self, request, async_object)", "multiRead is sent through it"),
    (
        "_create_async_inner",
        "(self, path, value, acl, flags, trailing=False, include_data=False)",
        "contenders' creates are answered without kazoo's callback thread",
    ),
)
# Attributes a KazooClient method must set on self.
_CLIENT_ATTRIBUTES = (
    ("_connection", "the lease hooks its ConnectionHandler"),
    ("_queue", "the loop driver's gate counts it"),
    ("_pending", "the loop driver's gate counts it"),
    ("_data_watchers", "a release takes its own node's watcher off it"),
)
# Fields of kazoo's protocol records the lease reads.
_FIELDS = ((Connect, ("time_out", "session_id")), (ReplyHeader, ("xid", "zxid", "err")))
# Request records zklocks builds by position (recipes/kazoo_calls.py, recipes/node.py): their exact fields.
_RECORDS: tuple[tuple[type, tuple[str, ...]], ...] = (
    (Sync, ("path",)),
    (Exists, ("path", "watcher")),
    (GetChildren, ("path", "watcher")),
    (Delete, ("path", "version")),
    (SetData, ("path", "data", "version")),
    (Transaction, ("operations",)),
)

_STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL", "STORE_ATTR", "STORE_SUBSCR"})
_verdict: list[str | None] = []  # the installed kazoo's problems ("" for none), computed once
_verdict_lock = threading.Lock()


def verify(connection_class: type | None = None, client_class: type | None = None) -> None:
    """Raise ZkConfigError naming every kazoo internal zklocks hooks that is missing, has another signature or is
    no longer used through ``self``. Without arguments: the installed kazoo, checked once per process."""
    if connection_class is None and client_class is None:
        with _verdict_lock:
            if not _verdict:
                _verdict.append("; ".join(_problems(ConnectionHandler, KazooClient)))
        problems = _verdict[0]
    else:
        problems = "; ".join(_problems(connection_class or ConnectionHandler, client_class or KazooClient))
    if problems:
        raise ZkConfigError(
            f"kazoo {_installed_version()} lacks what zklocks hooks for its lease: {problems}. zklocks supports "
            f"{SUPPORTED} (tested); install a kazoo in that range"
        )


def _installed_version() -> str:
    try:
        return metadata.version("kazoo")
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def _problems(conn_cls: type, client_cls: type) -> list[str]:
    out: list[str] = []
    for cls, methods in ((conn_cls, _CONNECTION_METHODS), (client_cls, _CLIENT_METHODS)):
        for name, signature, why in methods:
            out.extend(_method_problem(cls, name, signature, why))
    for caller, name, why, unpacked in _THROUGH_SELF:
        code = _code(conn_cls, caller)
        if code is None:
            out.append(f"{conn_cls.__name__}.{caller} is missing ({why})")
            continue
        shapes = _self_uses(code, name)
        if not shapes:
            out.append(f"{conn_cls.__name__}.{caller} no longer uses self.{name} ({why})")
        elif unpacked is not None and unpacked not in shapes:
            out.append(
                f"{conn_cls.__name__}.{caller} no longer unpacks self.{name}(...) into {unpacked} values ({why})"
            )
    for caller, name, why in _CLIENT_NAMES:
        code = _code(conn_cls, caller)
        if code is not None and name not in _all_names(code):
            out.append(f"{conn_cls.__name__}.{caller} no longer uses client.{name} ({why})")
    stored = set()
    for value in vars(client_cls).values():
        code = _code_of(value)
        if code is not None:
            stored |= _self_stores(code)
    for name, why in _CLIENT_ATTRIBUTES:
        if name not in stored:
            out.append(f"{client_cls.__name__} no longer sets self.{name} ({why})")
    for record, fields in _FIELDS:
        missing = [f for f in fields if f not in getattr(record, "_fields", ())]
        if missing:
            out.append(f"{record.__name__} has no field {', '.join(missing)} (the lease reads it)")
    for record, names in _RECORDS:
        if tuple(getattr(record, "_fields", ())) != names:
            out.append(f"{record.__name__} is not a record of ({', '.join(names)}) (zklocks builds it so)")
    return list(dict.fromkeys(out))


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


def _self_stores(code: CodeType) -> set[str]:
    """The attributes ``code`` sets on its first argument."""
    self_name = _self_name(code)
    out: set[str] = set()
    instrs = list(dis.get_instructions(code))
    for i, instr in enumerate(instrs[1:], 1):
        if instr.opname == "STORE_ATTR" and _loads_self(instrs[i - 1], self_name):
            out.add(str(instr.argval))
    return out

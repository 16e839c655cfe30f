"""kazoo's private names, its wire modules and the callables it runs on its connection thread are used in
zklocks/client/kazoo_adapter/ only or declared there (PRIVATE, which the self-check, compat.py, checks against the
installed kazoo; CONNECTION_THREAD); CPython's internals are used in zklocks/client/interrupts.py only."""

import ast
from pathlib import Path

import kazoo
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.protocol.connection import ConnectionHandler

from zklocks.client import interrupts
from zklocks.client.kazoo_adapter import CONNECTION_THREAD, NAMES, PRIVATE, RECORD
from zklocks.client.kazoo_adapter.hooks import TRAFFIC

ROOT = Path(__file__).resolve().parents[2] / "zklocks"
ADAPTER = ROOT / "client" / "kazoo_adapter"
# Names with an underscore that are no kazoo private: namedtuple's own API.
ALLOWED = frozenset({"_fields", "_make", "_replace", "_asdict"})
# kazoo's modules of wire formats, connections and result internals: imported by the adapter only.
WIRE_MODULES = {"kazoo.protocol.serialization", "kazoo.protocol.connection", "kazoo.handlers.utils"}
CPYTHON_INTERNALS = {*interrupts.RLOCK_INTERNALS, *interrupts.EVENT_INTERNALS, *interrupts.ASYNCIO_INTERNALS}
ATTRIBUTE_CALLS = {"getattr", "setattr", "hasattr", "delattr"}
BUILT_BY_POSITION = {p.name for p in PRIVATE if any(c.kind == RECORD for c in p.checks)}


def _modules(under: Path):
    for path in sorted(under.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path, ast.parse(path.read_text(), filename=str(path))


def _named_attribute(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(the object, the attribute's name) if ``node`` names an attribute: ``x.name``, ``getattr(x, "name")`` and
    its kin."""
    if isinstance(node, ast.Attribute):
        return node.value, node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ATTRIBUTE_CALLS
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return node.args[0], node.args[1].value
    return None


def _attributes(tree: ast.AST):
    """(line, name) of each attribute ``tree`` names (_named_attribute)."""
    for node in ast.walk(tree):
        if (named := _named_attribute(node)) is not None:
            yield node.lineno, named[1]


def _records_built(tree: ast.AST):
    """(line, name) of each of kazoo's records that ``tree`` imports from kazoo.protocol.serialization and calls."""
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "kazoo.protocol.serialization"
        for alias in node.names
        if alias.name in BUILT_BY_POSITION
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported:
            yield node.lineno, node.func.id


def _private_names_defined(under: Path) -> set[str]:
    """Every non-dunder ``_name`` the modules under ``under`` define: functions, classes, module globals, and
    attributes set on self or cls."""
    names: set[str] = set()
    for _, tree in _modules(under):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _outside_the_adapter():
    for path, tree in _modules(ROOT):
        if not path.is_relative_to(ADAPTER):
            yield path.relative_to(ROOT), tree


# Where a name that kazoo and zklocks both define is read on something other than ``self``, outside the adapter:
# (module, what it is read on, name), each an object that is not kazoo's.
NOT_KAZOO = {
    ("celery/beat.py", "_inner", "_do_sync"): "Celery's scheduler (its own private, wrapped there)",
    ("contrib/metrics.py", "gauge", "_lock"): "prometheus_client's gauge",
    ("handles/async_bridge.py", "handle", "_acquire"): "a zklocks handle",
    ("handles/multilock.py", "lock", "_acquire"): "a zklocks handle",
}


def _shared_name_reads(tree: ast.AST, shared: set[str]):
    """(line, receiver, name) of each use of a name in ``shared`` (``x.name``, ``getattr(x, "name")`` and its kin)
    that is not on the ``self`` or ``cls`` of a method of a zklocks class: a function outside a class has no self
    of ours, and on the ``self`` of a subclass of kazoo's class the attribute is kazoo's."""

    def kazoo_base(base: ast.expr) -> bool:
        if isinstance(base, ast.Name):
            return base.id in kazoo_names
        return ast.unparse(base).startswith("kazoo.")  # kazoo.client.KazooClient

    def visit(node: ast.AST, own_self: bool):
        if isinstance(node, ast.ClassDef):
            own_self = not any(kazoo_base(b) for b in node.bases)
        found = _named_attribute(node)
        if found is not None and found[1] in shared:
            receiver, attr = found
            name = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", "?")
            if not (own_self and isinstance(receiver, ast.Name) and name in ("self", "cls")):
                yield node.lineno, name, attr
        for child in ast.iter_child_nodes(node):
            yield from visit(child, own_self)

    kazoo_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kazoo")
        for alias in node.names
    }
    yield from visit(tree, False)


def test_no_module_outside_the_adapter_names_a_kazoo_private():
    # Any private name of the installed kazoo, declared or not. One that zklocks defines too counts where it is
    # read on anything but a zklocks object's self, unless NOT_KAZOO says what that object is.
    kazoo_private = _private_names_defined(Path(kazoo.__file__).parent)
    shared = (kazoo_private & _private_names_defined(ROOT)) - NAMES - ALLOWED
    foreign = (kazoo_private | NAMES) - shared - ALLOWED
    found = []
    for relative, tree in _outside_the_adapter():
        found += [f"{relative}:{line}: {name}" for line, name in _attributes(tree) if name in foreign]
        found += [
            f"{relative}:{line}: {receiver}.{name}"
            for line, receiver, name in _shared_name_reads(tree, shared)
            if (relative.as_posix(), receiver, name) not in NOT_KAZOO
        ]
        found += [f"{relative}:{line}: {name}(...) built by position" for line, name in _records_built(tree)]
    assert not found, "use zklocks.client.kazoo_adapter instead:\n" + "\n".join(found)


def _imported_modules(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)  # a submodule
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)


def test_kazoo_wire_modules_are_imported_by_the_adapter_only():
    found = [
        f"{relative}:{line}: {module}"
        for relative, tree in _outside_the_adapter()
        for line, module in _imported_modules(tree)
        if module in WIRE_MODULES
    ]
    assert not found, "use zklocks.client.kazoo_adapter instead:\n" + "\n".join(found)


class _ConnectionThreadShapes(ast.NodeVisitor):
    """``module:qualname`` of each callable kazoo runs on its connection thread, found by its shape: an object it
    answers (``set`` and ``set_exception``), a request record (``serialize`` and ``deserialize``), a subclass of a
    kazoo class (a handler), the methods of a listener given to ``wrap_connection``, the handlers given to
    ``Outcome`` (a ``functools.partial`` counts as its function, a lambda as undeclared), a function put in place
    of a method of kazoo's connection or its handler, a state listener, a ``logger=``."""

    def __init__(self, module: str, tree: ast.AST) -> None:
        self.module, self.scope, self.found = module, [], {}
        self.kazoo_names = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kazoo")
            for alias in node.names
        }
        # The mark under any name it is imported as (``from ..iohandler import on_connection_thread as inline``).
        self.mark_names = {"on_connection_thread"} | {
            alias.asname
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if alias.name == "on_connection_thread" and alias.asname
        }
        self.top_level = {n.name for n in getattr(tree, "body", []) if isinstance(n, ast.FunctionDef)}
        self.visit(tree)

    def _function_named(self, name: str) -> str:
        """The qualname a bare name refers to: a module-level function, else one defined in this scope."""
        return name if name in self.top_level else ".".join([*self.scope, name])

    def _outcome_handlers(self, node: ast.Call) -> None:
        for handler in [*node.args, *(k.value for k in node.keywords)]:
            if (
                isinstance(handler, ast.Call)
                and getattr(handler.func, "attr", getattr(handler.func, "id", "")) == "partial"
            ):
                handler = handler.args[0] if handler.args else handler
            if isinstance(handler, ast.Name):
                self._note(self._function_named(handler.id), node.lineno)
            elif isinstance(handler, ast.Attribute):
                self._note(".".join([*self.scope[:-1], handler.attr]), node.lineno)  # self.<method>
            else:  # a lambda or anything else runs there too, and has no name to declare
                self._note(f"<{type(handler).__name__.lower()} at line {handler.lineno}>", node.lineno)

    def _note(self, qualname: str, line: int) -> None:
        self.found[f"{self.module}:{qualname}"] = line

    def _scoped(self, node) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
        answered = {"set", "set_exception"} <= methods or {"serialize", "deserialize"} <= methods
        if answered or bases & self.kazoo_names:
            self._note(".".join([*self.scope, node.name]), node.lineno)
        self._scoped(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        marks = {getattr(d, "id", getattr(d, "attr", "")) for d in node.decorator_list}
        if marks & self.mark_names:  # a watch PollingHandler runs where its event is read
            self._note(".".join([*self.scope, node.name]), node.lineno)
        self._scoped(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Assign(self, node: ast.Assign) -> None:
        replaced = [
            t
            for t in node.targets
            if isinstance(t, ast.Attribute)
            and (hasattr(ConnectionHandler, t.attr) or callable(getattr(SequentialThreadingHandler, t.attr, None)))
        ]
        if replaced and isinstance(node.value, ast.Name):
            # conn._read = <a function here>, or conn.handler.create_connection = <one>
            self._note(".".join([*self.scope, node.value.id]), node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called == "wrap_connection":  # the listener's methods: wrap_connection(client, self)
            listeners = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "listener")]
            for listener in listeners:
                owner = self.scope[:-1] if getattr(listener, "id", "") == "self" else [getattr(listener, "id", "?")]
                for method in TRAFFIC:
                    self._note(".".join([*owner, method]), node.lineno)
        if called == "Outcome":  # calls.Outcome(on_answer, on_error): both run on the connection thread
            self._outcome_handlers(node)
        hooks = node.args if called == "add_listener" else []
        hooks += [k.value.func for k in node.keywords if k.arg == "logger" and isinstance(k.value, ast.Call)]
        hooks += node.args if called in self.mark_names else []
        for hook in hooks:
            if isinstance(hook, ast.Name) and hook.id[:1].islower():
                self._note(".".join([*self.scope, hook.id]), node.lineno)  # a function defined in this scope
            elif isinstance(hook, ast.Name):
                self._note(f"<class {hook.id}>", node.lineno)  # an instance of that class
            elif isinstance(hook, ast.Attribute):
                self._note(".".join([*self.scope[:-1], hook.attr]), node.lineno)  # self.<method>
        self.generic_visit(node)


def _connection_thread_callables() -> dict[str, int]:
    found: dict[str, int] = {}
    for path, tree in _modules(ROOT):
        found |= _ConnectionThreadShapes(str(path.relative_to(ROOT)), tree).found
    return found


def test_the_finder_sees_the_mark_under_every_name_and_form():
    source = """
from ..client.iohandler import on_connection_thread
from ..client.iohandler import on_connection_thread as inline
from ..client import iohandler

def outer():
    @on_connection_thread
    def plain(event): pass

    @inline
    def aliased(event): pass

    @iohandler.on_connection_thread
    async def by_module(event): pass

    def called(event): pass
    inline(called)

    def unmarked(event): pass
"""
    found = _ConnectionThreadShapes("m.py", ast.parse(source)).found
    assert set(found) == {f"m.py:outer.{name}" for name in ("plain", "aliased", "by_module", "called")}, found


def test_the_finder_sees_each_handler_given_to_an_outcome():
    source = """
import functools
from ..client.kazoo_adapter.calls import Outcome

def answered(node, result): pass

class Node:
    def release(self):
        def failed(exc): pass
        send(Outcome(functools.partial(answered, self), failed))
        send(Outcome(on_answer=self.done, on_error=lambda exc: None))
"""
    found = _ConnectionThreadShapes("m.py", ast.parse(source)).found
    assert set(found) == {"m.py:answered", "m.py:Node.release.failed", "m.py:Node.done", "m.py:<lambda at line 11>"}


def test_every_callable_kazoo_runs_on_its_connection_thread_is_declared():
    declared = {c.where for c in CONNECTION_THREAD}
    classes = {where.rsplit(":", 1)[1] for where in declared}
    found = _connection_thread_callables()
    undeclared = [
        f"{where} (line {line})"
        for where, line in found.items()
        if where not in declared and not (where.endswith(">") and where.split("<class ")[1][:-1] in classes)
    ]
    assert not undeclared, "declare these in kazoo_adapter.CONNECTION_THREAD:\n" + "\n".join(undeclared)
    # Each declared one is there (and those the shapes above cannot see, by name).
    for where in declared:
        module, qualname = where.split(":")
        tree = ast.parse((ROOT / module).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert set(qualname.split(".")) <= defined, f"{where} is declared but not defined"


def test_cpython_internals_are_used_in_interrupts_only():
    found = [
        f"{relative}:{line}: {name}"
        for relative, tree in _outside_the_adapter()
        if str(relative) != "client/interrupts.py"
        for line, name in _attributes(tree)
        if name in CPYTHON_INTERNALS
    ]
    assert not found, "use zklocks.client.interrupts instead:\n" + "\n".join(found)


def test_every_private_name_the_adapter_uses_is_declared():
    undeclared = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path, tree in _modules(ADAPTER)
        for line, name in _attributes(tree)
        if name.startswith("_") and not name.startswith("__") and name not in NAMES | ALLOWED
    ]
    assert not undeclared, "declare these in kazoo_adapter.PRIVATE:\n" + "\n".join(undeclared)


def test_every_declared_name_is_used_and_checked():
    used = {name for _, tree in _modules(ADAPTER) for _, name in _attributes(tree)}
    assert NAMES <= used, f"declared but unused: {sorted(NAMES - used)}"
    assert all(p.checks for p in PRIVATE)
    assert len({(p.owner, p.name) for p in PRIVATE}) == len(PRIVATE)

"""kazoo's private names are used in zklocks/client/kazoo_adapter/ only, and each one there is declared in its
PRIVATE (which the self-check, compat.py, checks against the installed kazoo)."""

import ast
from pathlib import Path

from zklocks.client.kazoo_adapter import NAMES, PRIVATE, RECORD

ROOT = Path(__file__).resolve().parents[2] / "zklocks"
ADAPTER = ROOT / "client" / "kazoo_adapter"
OUTSIDE = ("testing",)  # the test servers' own helpers; not part of the adapter's contract
# Names with an underscore that the adapter uses and are no kazoo private: namedtuple's own API.
ALLOWED = frozenset({"_fields"})
ATTRIBUTE_CALLS = {"getattr", "setattr", "hasattr", "delattr"}
BUILT_BY_POSITION = {p.name for p in PRIVATE if any(c.kind == RECORD for c in p.checks)}


def _modules(under: Path):
    for path in sorted(under.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path, ast.parse(path.read_text(), filename=str(path))


def _attributes(tree: ast.AST):
    """(line, name) of each attribute ``tree`` names: ``x.name``, and ``getattr(x, "name")`` and its kin."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ATTRIBUTE_CALLS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            yield node.lineno, node.args[1].value


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


def test_no_module_outside_the_adapter_names_a_kazoo_private():
    found = []
    for path, tree in _modules(ROOT):
        relative = path.relative_to(ROOT)
        if path.is_relative_to(ADAPTER) or relative.parts[0] in OUTSIDE:
            continue
        found += [f"{relative}:{line}: {name}" for line, name in _attributes(tree) if name in NAMES]
        found += [f"{relative}:{line}: {name}(...) built by position" for line, name in _records_built(tree)]
    assert not found, "use zklocks.client.kazoo_adapter instead:\n" + "\n".join(found)


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

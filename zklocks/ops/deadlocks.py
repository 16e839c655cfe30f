"""The wait-for graph of one alias's locks, from a read-model snapshot: no ZooKeeper traffic of its own. Actors,
edges, and why semaphores are left out: docs/reference.md, "Holders and the deadlock banner", and
docs/observability.md, "Deadlocks on the admin page". Contenders whose data names no owner, thread or task
(foreign clients) are not actors.

The graph is read from node data, which anyone may write on an alias without AUTH (docs/security.md, "Names and
the admin"): a few dozen forged nodes make a graph with millions of simple cycles. So :func:`search` finds the
strongly connected components first (Tarjan's algorithm, iterative: every actor in a component of two or more is
stuck), then lists at most MAX_CYCLES cycles of at most MAX_LENGTH steps, following at most MAX_STEPS edges in
at most BUDGET seconds, and says when it stopped short. A real thread waits for one lock at a time, so real
deadlocks are far below these bounds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..recipes.layout import Kind
from .snapshots import Contender, LockInfo


@dataclass(frozen=True, order=True)
class Actor:
    """One thread or asyncio task of one process; ``label`` is how it is shown, not what tells it apart."""

    host: str
    pid: str
    key: str  # "owner 12" (its number), or for older data "task <id>" / "thread <name>"
    label: str = field(compare=False)


def actor(c: Contender) -> Actor | None:
    if c.host is None or c.pid is None:
        return None
    if c.owner is not None:
        key = f"owner {c.owner}"
    elif c.task_id:
        key = f"task {c.task_id}"
    elif c.thread:
        key = f"thread {c.thread}"
    else:
        return None
    return Actor(c.host, str(c.pid), key, label(c))


def label(c: Contender) -> str:
    """'thread web-1', 'thread MainThread, asyncio task Task-7', 'task <Celery task id>' or both."""
    parts = []
    if c.thread:
        parts.append(f"thread {c.thread}")
    if c.asyncio_task:
        parts.append(f"asyncio task {c.asyncio_task}")
    if c.task_id:
        parts.append(f"task {c.task_id}")
    return ", ".join(parts) or f"owner {c.owner}"


@dataclass(frozen=True)
class Step:
    """``who`` holds ``holds`` and waits for ``waits_for`` (held by the next step's ``who``)."""

    who: Actor
    holds: str
    waits_for: str

    def describe(self) -> str:
        who = self.who
        return f"{who.label} (pid {who.pid} on {who.host}) holds {self.holds!r} and waits for {self.waits_for!r}"


@dataclass(frozen=True)
class Deadlock:
    alias: str
    steps: tuple[Step, ...]

    @property
    def locks(self) -> list[str]:
        return [s.holds for s in self.steps]

    def describe(self) -> str:
        return "; ".join(s.describe() for s in self.steps)


MAX_CYCLES = 20  # cycles listed per alias
MAX_LENGTH = 16  # actors in one listed cycle
MAX_EDGES = 100_000  # wait-for edges built per alias
MAX_STEPS = 100_000  # edges followed while listing cycles, per alias
BUDGET = 0.25  # seconds spent listing cycles, per alias


@dataclass(frozen=True)
class Found:
    """The deadlocks of one alias: ``cycles`` (each listed once), the actors in some cycle (``stuck``: those in
    strongly connected components of two or more actors, in ``groups`` components), and whether the listing
    stopped short of every cycle (``truncated``)."""

    alias: str
    cycles: list[Deadlock]
    stuck: int = 0
    groups: int = 0
    truncated: bool = False


def find(alias: str, locks: list[LockInfo]) -> list[Deadlock]:
    """The cycles of the wait-for graph of ``locks`` (one alias), each reported once (at most MAX_CYCLES)."""
    return search(alias, locks).cycles


def components(graph: dict[Actor, set[Actor]]) -> list[list[Actor]]:
    """The strongly connected components of two or more actors (Tarjan's algorithm, without recursion)."""
    index: dict[Actor, int] = {}
    low: dict[Actor, int] = {}
    stack: list[Actor] = []
    on_stack: set[Actor] = set()
    out: list[list[Actor]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph.get(root, ()))))]
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        out.append(sorted(group))
    return out


def search(alias: str, locks: list[LockInfo], *, limit: int = MAX_CYCLES, budget: float = BUDGET) -> Found:
    """The stuck actors of ``locks`` (one alias) and at most ``limit`` of their cycles, within ``budget``
    seconds."""
    holds: dict[Actor, list[str]] = {}  # actor -> names of locks it holds
    holders_of: dict[str, list[Actor]] = {}
    waits: dict[Actor, list[str]] = {}  # actor -> names of locks it waits for
    for lock in locks:
        if lock.kind == Kind.SEMAPHORE or lock.max_leases is not None:
            continue
        for h in lock.holders:
            a = actor(h)
            if a is not None:
                holds.setdefault(a, []).append(lock.name)
                holders_of.setdefault(lock.name, []).append(a)
        for w in lock.waiters:
            a = actor(w)
            if a is not None:
                waits.setdefault(a, []).append(lock.name)
    # edges: a -> b when a waits for a lock b holds (labelled with that lock)
    truncated = False
    count = 0
    edges: dict[Actor, list[tuple[Actor, str]]] = {}
    for a, names in waits.items():
        out = edges[a] = []
        for name in names:
            for b in holders_of.get(name, ()):
                if b != a:
                    out.append((b, name))
            count += len(holders_of.get(name, ()))
            if count > MAX_EDGES:
                break
        if count > MAX_EDGES:
            truncated = True  # forged data only: the graph seen is a part of it
            break
    groups = components({a: {b for b, _ in targets} for a, targets in edges.items()})
    found: list[Deadlock] = []
    seen: set[frozenset] = set()
    steps = 0
    longer = False
    deadline = time.monotonic() + budget
    for group in groups:
        members = set(group)
        inner = {a: [(b, n) for b, n in edges.get(a, ()) if b in members] for a in group}
        for start in group:
            # Each cycle is found from its smallest actor only, walking through larger ones (no recursion).
            path: list[tuple[Actor, str]] = []  # (actor, the lock it waits for), from start to the current actor
            on_path = {start}
            work = [(start, iter(inner[start]))]
            while work:
                node, successors = work[-1]
                step = next(successors, None)
                if step is None:
                    work.pop()
                    if path:
                        path.pop()
                        on_path.discard(node)
                    continue
                steps += 1
                if steps > MAX_STEPS or (steps % 1000 == 0 and time.monotonic() > deadline):
                    truncated = True
                    break
                nxt, lock_name = step
                if nxt == start:
                    cycle = [*path, (node, lock_name)]
                    key = frozenset(cycle)
                    if key not in seen:
                        if len(found) == limit:
                            truncated = True
                            break
                        seen.add(key)
                        found.append(_deadlock(alias, cycle, holds))
                elif nxt > start and nxt not in on_path:
                    if len(path) + 2 > MAX_LENGTH:
                        longer = True  # a cycle through here would be longer than MAX_LENGTH: not listed
                        continue
                    path.append((node, lock_name))
                    on_path.add(nxt)
                    work.append((nxt, iter(inner[nxt])))
            if truncated:
                break
        if truncated:
            break
    return Found(alias, found, sum(map(len, groups)), len(groups), truncated or longer)


def _deadlock(alias: str, cycle: list[tuple[Actor, str]], holds: dict[Actor, list[str]]) -> Deadlock:
    """``cycle``: (actor, the lock it waits for); what each holds is the lock the previous one waits for."""
    steps = []
    for i, (who, waits_for) in enumerate(cycle):
        held = cycle[i - 1][1]  # the previous actor waits for a lock this one holds
        steps.append(Step(who, held if held in holds.get(who, ()) else holds[who][0], waits_for))
    return Deadlock(alias, tuple(steps))

"""The wait-for graph of one alias's locks, from an inspect snapshot: no ZooKeeper traffic of its own.

A contender is an actor: (host, pid, owner), read from its node data. The owner is a thread or an asyncio task
(holds.Owner), written as a number that its process never reuses: two coroutines of one event loop are two
actors, though they share a thread. Data of an older zklocks, without that number, names the actor by its
(Celery) task id or else its thread name. An actor that waits in the queue of lock B waits for B's holders; when
following those edges leads back to the actor, the cycle is a deadlock (nobody in it can go on). Semaphores are
left out: a waiter there needs any one of the leases, not all of them, so a cycle through a semaphore is not
necessarily stuck. Contenders whose data does not name their owner, thread or task (foreign clients) are not
actors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .inspect import Contender, LockInfo
from .recipes.layout import Kind


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


def find(alias: str, locks: list[LockInfo]) -> list[Deadlock]:
    """Every cycle of the wait-for graph of ``locks`` (one alias), each reported once."""
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
    edges: dict[Actor, list[tuple[Actor, str]]] = {
        a: [(b, name) for name in names for b in holders_of.get(name, ()) if b != a] for a, names in waits.items()
    }
    found: list[Deadlock] = []
    seen: set[frozenset] = set()

    def walk(start: Actor, node: Actor, path: list[tuple[Actor, str]], on_path: set[Actor]) -> None:
        for nxt, lock_name in edges.get(node, ()):
            if nxt == start:
                cycle = [*path, (node, lock_name)]
                key = frozenset((a, n) for a, n in cycle)
                if key not in seen:
                    seen.add(key)
                    found.append(_deadlock(alias, cycle, holds))
            elif nxt not in on_path and nxt > start:  # each cycle is found from its smallest actor only
                on_path.add(nxt)
                walk(start, nxt, [*path, (node, lock_name)], on_path)
                on_path.discard(nxt)

    for start in sorted(edges):
        walk(start, start, [], {start})
    return found


def _deadlock(alias: str, cycle: list[tuple[Actor, str]], holds: dict[Actor, list[str]]) -> Deadlock:
    """``cycle``: (actor, the lock it waits for); what each holds is the lock the previous one waits for."""
    steps = []
    for i, (who, waits_for) in enumerate(cycle):
        held = cycle[i - 1][1]  # the previous actor waits for a lock this one holds
        steps.append(Step(who, held if held in holds.get(who, ()) else holds[who][0], waits_for))
    return Deadlock(alias, tuple(steps))

"""What a snapshot of the read model holds (read_model.py): each contender, each lock with its holders and
waiters, each alias, the whole snapshot. Plain data, no I/O."""

from __future__ import annotations

import datetime
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..names import shown


@dataclass(frozen=True)
class Contender:
    """One holder or waiter: a node in a lock's queue (or a semaphore lease)."""

    node: str  # the child node's name, e.g. "<guid>__lock__0000000007"
    mode: str  # "exclusive", "shared" or "lease"
    sequence: int
    token: int  # the node's czxid: the fencing token
    session_id: int  # the ephemeralOwner: the ZooKeeper session that holds the node
    created_at: float  # the server's clock when the node was created (epoch seconds)
    host: str | None = None
    pid: int | str | None = None
    thread: str | None = None
    task_id: str | None = None
    task_name: str | None = None
    queued_at: float | None = None
    acquired_at: float | None = None
    raw: str | None = None  # foreign node data (e.g. a kazoo Lock identifier), verbatim
    ident: int | str | None = None  # the thread ident of the owner (an asyncio task's: its loop's thread)
    owner: int | str | None = None  # its number in its process (owners.Owner): a thread or an asyncio task
    asyncio_task: str | None = None  # the asyncio task's name, when the owner is one
    invalid: tuple[str, ...] = ()  # fields of the node data that were there but unusable (wrong type, range)

    @property
    def session_hex(self) -> str:
        return f"0x{self.session_id:x}"

    @property
    def since(self) -> float:
        """When this contender started holding (holders) or waiting (waiters)."""
        return self.acquired_at or self.queued_at or self.created_at

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["session_id"] = self.session_hex
        return data


@dataclass(frozen=True)
class QueuedTask:
    """A task call waiting for a key, named by a SingleExecutionTask policy's node below the lock node."""

    policy: str  # "unique_queued", "debounce" or "keep_lock_on_retry"
    task_id: str
    task_name: str | None = None


@dataclass
class LockInfo:
    alias: str
    name: str
    node: str  # the lock node's znode name (the encoded name)
    path: str
    kind: str | None  # None for a plain lock node with nobody in its queue: nothing tells its kind
    max_leases: int | None = None
    holders: list[Contender] = field(default_factory=list)
    waiters: list[Contender] = field(default_factory=list)
    queued_tasks: list[QueuedTask] = field(default_factory=list)

    @property
    def shown_name(self) -> str:
        """The name as pages show it: a foreign node's name may hold characters that display as another name."""
        return shown(self.name)

    @property
    def running_tasks(self) -> list[Contender]:
        """The holders that are task executions (they recorded a task id)."""
        return [h for h in self.holders if h.task_id]

    # The end of the last lock-delay recorded in the lock node (epoch seconds, the server's clock), if any
    # (docs/design.md §15); it is in force while that time has not come.
    delay_until: float | None = None

    def in_delay(self, now: float | None = None) -> bool:
        return self.delay_until is not None and self.delay_until > (time.time() if now is None else now)

    def delay_text(self, now: float | None = None) -> str | None:
        """'in lock-delay until 12:04:05 UTC' while a lock-delay is in force, else None."""
        if not self.in_delay(now) or self.delay_until is None:
            return None
        moment = datetime.datetime.fromtimestamp(self.delay_until, datetime.UTC)
        return f"in lock-delay until {moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d} UTC"

    @property
    def holder(self) -> Contender | None:
        return self.holders[0] if self.holders else None

    @property
    def held_since(self) -> float | None:
        return min((h.since for h in self.holders), default=None)

    def held_for(self, now: float | None = None) -> float | None:
        since = self.held_since
        return None if since is None else max(0.0, (time.time() if now is None else now) - since)

    @property
    def queue_length(self) -> int:
        return len(self.waiters)

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "name": self.name,
            "path": self.path,
            "kind": self.kind,
            "max_leases": self.max_leases,
            "held_for": self.held_for(now),
            "lock_delay_until": self.delay_until if self.in_delay(now) else None,
            "holders": [h.to_dict() for h in self.holders],
            "waiters": [w.to_dict() for w in self.waiters],
            "queued_tasks": [asdict(q) for q in self.queued_tasks],
        }


REFUSED = "this alias may not read it (NoAuth): not shown"  # ends a skipped line for such a node


@dataclass
class AliasSnapshot:
    alias: str
    namespace: str
    locks: list[LockInfo] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0  # how long the read took
    skipped: list[str] = field(default_factory=list)  # nodes not read (names too long to be zklocks'), as lines

    @property
    def refused(self) -> list[str]:
        """The lines of ``skipped`` for nodes this alias may not read: locks there went unseen."""
        return [line for line in self.skipped if line.endswith(REFUSED)]


@dataclass
class Snapshot:
    taken_at: float
    aliases: list[AliasSnapshot]

    @property
    def locks(self) -> list[LockInfo]:
        return [lock for a in self.aliases for lock in a.locks]

    @property
    def errors(self) -> list[AliasSnapshot]:
        return [a for a in self.aliases if a.error]

    def find(self, alias: str, name: str) -> LockInfo | None:
        for lock in self.locks:
            if lock.alias == alias and lock.name == name:
                return lock
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "taken_at": self.taken_at,
            "aliases": [
                {
                    "alias": a.alias,
                    "namespace": a.namespace,
                    "error": a.error,
                    "seconds": round(a.seconds, 4),
                    "skipped": a.skipped,
                    "locks": [lock.to_dict(self.taken_at) for lock in a.locks],
                }
                for a in self.aliases
            ],
        }

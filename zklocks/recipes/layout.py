"""Every node name and ordering rule zklocks uses below a lock node, for kazoo's layout (:data:`KAZOO`) and Apache
Curator's (:data:`CURATOR`): the node tables are in docs/design.md §12; the ordering rules in §2, §6, §7 and §13;
the per-acquire tag (a fresh guid, or Curator's protected prefix ``_c_<uuid>-``) in §3.

Only this module spells these names; the recipes, the read model, the reaper and the audit ask it, through the
alias's :class:`Layout` (``ZKLOCKS[alias]["LAYOUT"]``).
"""

from __future__ import annotations

import functools
import logging
import re
import shlex
import uuid
from dataclasses import dataclass, field
from enum import StrEnum

log = logging.getLogger("zklocks")


class Kind(StrEnum):
    """What a lock node is used as (shown by the admin, the CLI and the read model)."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    SEMAPHORE = "semaphore"
    ELECTION = "election"


# Contender markers: the part between the guid and the sequence number.
EXCLUSIVE = "__lock__"
SHARED = "__rlock__"
LEASE = "__lease__"
ELECTION = "__elect__"  # an election is an exclusive queue of its own marker: the first candidate leads
# Persistent children zklocks itself creates below a lock node.
MUTEX = "__mutex__"
QUEUED = "__queued__"
LATEST = "__latest__"
THROTTLE = "__throttle__"
RETRY = "__retry__"
TASK_MARKERS = (QUEUED, LATEST, RETRY)  # the markers that name a queued task (the admin's Celery keys)
BEAT = "__beat__"
INTERNAL_CHILDREN = (MUTEX,)

_CONTENDER = re.compile(r"(__lock__|__rlock__|__elect__)(-?\d{10})$")
_LEASE = re.compile(r"__lease__-?\d{10}$")
_SEMAPHORE_CHILD = re.compile(r"^__mutex__$|__lease__-?\d{10}$")

# A sequential child's suffix is its parent's child counter, a signed 32-bit int (docs/design.md §13). ZooKeeper 3.8
# hands out 2147483647 once the counter is there and then keeps it there: every later child gets 2147483647
# again, and a create pipelined behind another create of the same parent gets -2147483648, -2147483647, ...
# Such suffixes no longer say who came first, so no contender that has one is ever granted the lock.
SEQUENCE_LIMIT = 2**31 - 1
SEQUENCE_WARN = SEQUENCE_LIMIT - 2**24  # about 17 million creates before the limit: warn, look twice


def sequence_trusted(seq: int) -> bool:
    """Whether ZooKeeper can have given this suffix in creation order (below the stuck counter, not wrapped)."""
    return 0 <= seq < SEQUENCE_LIMIT


def queued_marker_path(lock_path: str) -> str:
    return f"{lock_path}/{QUEUED}"


def task_marker_path(lock_path: str, marker: str) -> str:
    """A SingleExecutionTask policy's persistent child (QUEUED, LATEST, THROTTLE or RETRY)."""
    return f"{lock_path}/{marker}"


# -- layouts: one object per LAYOUT setting --


@dataclass(frozen=True)
class Layout:
    """The node names and ordering rules of one family of recipes (kazoo's or Curator's).

    Markers are the part of a contender's name between its tag (the per-acquire guid) and its sequence number.
    ``queues`` groups the markers that share one queue: a contender waits only for contenders of its own queue.
    """

    name: str
    exclusive: str  # zk_lock(name)
    shared: str | None  # zk_lock(name, shared=True); None: this layout has no shared mutex
    write: str  # zk_rw_lock(name).write
    read: str  # zk_rw_lock(name).read
    lease: str  # a semaphore lease
    latch: str  # an election candidate
    mutex: str  # the semaphore's internal queue: a child of the lock node
    leases_child: str | None  # the child holding the leases; None: the lock node itself
    protected: bool  # tags are Curator's protected prefix "_c_<uuid>-"
    # Whether a holder may write its own node: every client of this layout watching it then still sees its
    # delete (kazoo's recipes wake on any event). Curator's LeaderLatch ignores a data change, and its one-shot
    # watch would miss the delete that follows.
    holders_write: bool
    queues: tuple[frozenset[str], ...]
    _pattern: re.Pattern = field(repr=False, compare=False)

    def new_tag(self) -> str:
        """A fresh per-acquire tag; every node of the acquire starts with it (docs/design.md §3)."""
        return f"_c_{uuid.uuid4()}-" if self.protected else uuid.uuid4().hex

    def marker(self, kind: Kind | str, *, rw: bool = False, name: str = "name", alias: str = "default") -> str:
        """The contender marker of a lock kind; ``rw``: a zk_rw_lock handle. A semaphore's internal queue is
        exclusive. ValueError naming the lock and the alias if the layout has no such lock (Curator has no
        shared mutex)."""
        if kind == Kind.ELECTION:
            return self.latch
        if kind == Kind.SHARED:
            if rw:
                return self.read
            if self.shared is None:
                raise ValueError(
                    f"zk_lock({name!r}, shared=True): alias {alias!r} has LAYOUT={self.name!r}, and Apache Curator "
                    f"has no shared mutex; use zk_rw_lock({name!r}).read (with zk_rw_lock({name!r}).write as its "
                    "writer)"
                )
            return self.shared
        return self.write if rw else self.exclusive

    def marks_release(self, marker_: str) -> bool:
        """Whether a holder that waited releases by writing, then deleting its node (node.OwnNode._send_delete):
        an exclusive holder, in a layout whose holders may write their node."""
        return self.holders_write and self.is_exclusive(marker_)

    def is_exclusive(self, marker_: str) -> bool:
        return marker_ in (self.exclusive, self.write, self.latch)

    def mode(self, marker_: str) -> str:
        """How the read model names a contender: "exclusive", "shared" or "lease"."""
        if marker_ == self.latch:
            return Kind.ELECTION.value
        if self.is_exclusive(marker_):
            return Kind.EXCLUSIVE.value
        return Kind.SHARED.value if marker_ in (self.shared, self.read) else "lease"

    def queue_of(self, marker_: str) -> frozenset[str]:
        for markers in self.queues:
            if marker_ in markers:
                return markers
        return frozenset((marker_,))

    def parse(self, child: str) -> tuple[str, str] | None:
        """(sequence text, marker) of a queue contender; None for any other child."""
        m = self._pattern.search(child)
        return None if m is None else (m.group(2), m.group(1))

    def sort_contenders(self, children: list[str], marker_: str | None = None) -> list[tuple[str, str, str]]:
        """(sequence, marker, child) for every contender of ``marker_``'s queue (of every queue for None), in
        queue order. Other children are ignored, as the other recipes' own code ignores them."""
        wanted = None if marker_ is None else self.queue_of(marker_)
        out = []
        for child in children:
            parsed = self.parse(child)
            if parsed is not None and (wanted is None or parsed[1] in wanted):
                out.append((parsed[0], parsed[1], child))
        out.sort()
        return out

    def blockers_ahead(self, contenders: list[tuple[str, str, str]], own: str | None, marker_: str) -> list[str]:
        """The children ahead of ``own`` (or of a new contender, for ``None``) that keep it waiting, in queue order:
        every one for an exclusive contender (or an election candidate), the exclusive ones for a shared contender.
        The last one is the single node to watch. Raises KeyError if ``own`` is not queued."""
        ahead = []
        for _, kind, child in contenders:
            if child == own:
                break
            if self.is_exclusive(marker_) or self.is_exclusive(kind):
                ahead.append(child)
        else:
            if own is not None:
                raise KeyError(own)
        return ahead

    def split(self, order: list[tuple[str, str, str]]) -> tuple[list, list]:
        """Holders and waiters of every queue in ``order`` (shared contenders hold until the first exclusive)."""
        holders: list = []
        waiters: list = []
        for markers in self.queues:
            queue_ = [entry for entry in order if entry[1] in markers]
            held = []
            for idx, entry in enumerate(queue_):
                if self.is_exclusive(entry[1]):
                    if idx == 0:
                        held.append(entry)
                    break
                held.append(entry)
            holders.extend(held)
            waiters.extend(queue_[len(held) :])
        return holders, waiters

    def sequence_of(self, child: str) -> int | None:
        """The sequence number of a contender, lease or latch child; None for other children."""
        m = self._sequenced.search(child)
        return None if m is None else int(m.group(1))

    @functools.cached_property
    def _sequenced(self) -> re.Pattern:
        markers = {m for m in (self.exclusive, self.shared, self.write, self.read, self.lease, self.latch) if m}
        return re.compile(f"(?:{'|'.join(map(re.escape, sorted(markers)))})(-?\\d{{10}})$")

    def leases_path(self, lock_path: str) -> str:
        return lock_path if self.leases_child is None else f"{lock_path}/{self.leases_child}"

    def mutex_path(self, lock_path: str) -> str:
        return f"{lock_path}/{self.mutex}"

    def leases(self, children: list[str]) -> list[str]:
        """A semaphore's leases among the children of :meth:`leases_path`, oldest first. Curator counts every
        child of ``leases/`` as a lease, and so does its layout."""
        if self.leases_child is None:
            return sorted((c for c in children if _LEASE.search(c)), key=lambda c: int(c.rsplit("__", 1)[1]))
        return sorted(children, key=lambda c: (self.sequence_of(c) is None, self.sequence_of(c) or 0, c))

    def is_semaphore_child(self, child: str) -> bool:
        """A child only a semaphore puts below a lock node (its mutex, its leases)."""
        if self.leases_child is None:
            return _SEMAPHORE_CHILD.search(child) is not None
        return child in (self.mutex, self.leases_child)

    @property
    def internal_children(self) -> tuple[str, ...]:
        """Persistent children of a lock node that the reaper removes when they are empty."""
        return (self.mutex,) if self.leases_child is None else (self.mutex, self.leases_child)


KAZOO = Layout(
    name="kazoo",
    exclusive=EXCLUSIVE,
    shared=SHARED,
    write=EXCLUSIVE,
    read=SHARED,
    lease=LEASE,
    latch=ELECTION,  # zk_leader's candidates: exclusive contenders of the lock node's one queue
    mutex=MUTEX,
    leases_child=None,
    protected=False,
    holders_write=True,
    queues=(frozenset((EXCLUSIVE, SHARED, ELECTION)),),
    _pattern=_CONTENDER,
)
CURATOR = Layout(
    name="curator",
    exclusive="lock-",  # InterProcessMutex (StandardLockInternalsDriver)
    shared=None,
    write="__WRIT__",  # InterProcessReadWriteLock
    read="__READ__",
    lease="lease-",  # InterProcessSemaphoreV2: leases/_c_<uuid>-lease-<seq>
    latch="latch-",  # LeaderLatch
    mutex="locks",  # InterProcessSemaphoreV2: locks/ is an InterProcessMutex
    leases_child="leases",
    protected=True,
    holders_write=False,
    queues=(frozenset(("lock-",)), frozenset(("__READ__", "__WRIT__")), frozenset(("latch-",))),
    _pattern=re.compile(r"(lock-|__READ__|__WRIT__|latch-)(-?\d{10})$"),
)
LAYOUTS = {layout.name: layout for layout in (KAZOO, CURATOR)}


def get(name: str | None) -> Layout:
    """The layout of a LAYOUT setting (None: kazoo's). KeyError for an unknown one (conf.py refuses those)."""
    return KAZOO if name is None else LAYOUTS[name]


def beat_state_path(lock_path: str) -> str:
    """Where the beat leader of election ``lock_path`` keeps the last send of each schedule entry."""
    return f"{lock_path}/{BEAT}"


def exhausted_message(name: str, alias: str, parent: str) -> str:
    return (
        f"lock {name!r} (alias {alias!r}): ZooKeeper has used up the sequence numbers of lock node {parent} "
        f"(its child counter is stuck at 2**31-1), so its queue order cannot be trusted and zklocks does not "
        f"queue there. The node is recycled (deleted, and re-created with a fresh counter) at its next empty "
        f"moment: by the next contender that finds it empty, by the reaper (REAP_INTERVAL), or at once with "
        f"`manage.py zklocks_reap --alias {shlex.quote(alias)} --recycle {shlex.quote(name)}`, which waits for "
        f"that moment. Keep other clients of this node (e.g. kazoo's Lock) away until then."
    )


_warned: set[tuple[str, str]] = set()


def warn_near_limit(alias: str, parent: str, seq: int) -> None:
    if (alias, parent) in _warned or len(_warned) > 10_000:
        return
    _warned.add((alias, parent))
    log.warning(
        "zklocks: lock node %s of alias %r has used %d of its %d sequence numbers; it must be empty for a "
        "moment to be recycled (manage.py zklocks_reap --recycle)",
        parent,
        alias,
        seq,
        SEQUENCE_LIMIT,
    )

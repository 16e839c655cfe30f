"""Every node name and ordering rule zklocks uses below a lock node: kazoo's lock layout (RECIPES §2-§4, §7c).

    NAMESPACE/<encoded name>                     the lock node (persistent; reaped when empty)
        <32-hex guid>__lock__<10-digit seq>      an exclusive contender (kazoo's Lock / WriteLock)
        <32-hex guid>__rlock__<10-digit seq>     a shared contender (kazoo's ReadLock)
        __mutex__/<guid>__lock__<seq>            a semaphore's internal fair queue
        <32-hex guid>__lease__<10-digit seq>     a semaphore lease
        <32-hex guid>__elect__<10-digit seq>     an election candidate (the first one leads)
        __queued__                               SingleExecutionTask's enqueue-time marker (persistent)
        __beat__/<encoded entry name>            the Celery beat leader's last send of each entry (persistent)

The guid is fresh for every acquire, so a contender finds its own node again after a connection loss. Only this
module spells these names; the recipes, the read model, the reaper and the audit ask it.
"""

from __future__ import annotations

import re
from enum import StrEnum


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
EXCLUSIVE_MARKERS = (EXCLUSIVE, ELECTION)
# Persistent children zklocks itself creates below a lock node.
MUTEX = "__mutex__"
QUEUED = "__queued__"
BEAT = "__beat__"
INTERNAL_CHILDREN = (MUTEX,)

_CONTENDER = re.compile(r"(__lock__|__rlock__|__elect__)(-?\d{10})$")
_LEASE = re.compile(r"__lease__-?\d{10}$")
_SEMAPHORE_CHILD = re.compile(r"^__mutex__$|__lease__-?\d{10}$")
_SEQUENCE = re.compile(r"__(?:lock|rlock|lease|elect)__(-?\d{10})$")

# A sequential child's suffix is its parent's child counter, a signed 32-bit int (RECIPES §7c). ZooKeeper 3.8
# hands out 2147483647 once the counter is there and then keeps it there: every later child gets 2147483647
# again, and a create pipelined behind another create of the same parent gets -2147483648, -2147483647, ...
# Such suffixes no longer say who came first, so no contender that has one is ever granted the lock.
SEQUENCE_LIMIT = 2**31 - 1
SEQUENCE_WARN = SEQUENCE_LIMIT - 2**24  # about 17 million creates before the limit: warn, look twice


def marker(kind: Kind | str) -> str:
    """The contender marker of a lock kind (a semaphore's internal queue is exclusive)."""
    if kind == Kind.ELECTION:
        return ELECTION
    return SHARED if kind == Kind.SHARED else EXCLUSIVE


def mode(marker_: str) -> str:
    """How the read model names a contender: "exclusive", "shared", "election" or "lease"."""
    return {EXCLUSIVE: Kind.EXCLUSIVE.value, SHARED: Kind.SHARED.value, ELECTION: Kind.ELECTION.value}.get(
        marker_, "lease"
    )


def sort_contenders(children: list[str]) -> list[tuple[str, str, str]]:
    """(sequence, marker, child) for every contender child, in queue order. Other children are ignored."""
    out = []
    for child in children:
        m = _CONTENDER.search(child)
        if m is not None:
            out.append((m.group(2), m.group(1), child))
    out.sort()
    return out


def sequence_of(child: str) -> int | None:
    """The sequence number of a contender (or lease) child, None for other children."""
    m = _SEQUENCE.search(child)
    return None if m is None else int(m.group(1))


def sequence_trusted(seq: int) -> bool:
    """Whether ZooKeeper can have given this suffix in creation order (below the stuck counter, not wrapped)."""
    return 0 <= seq < SEQUENCE_LIMIT


def blockers_ahead(contenders: list[tuple[str, str, str]], own: str | None, marker_: str) -> list[str]:
    """The children ahead of ``own`` (or of a new contender, for ``None``) that keep it waiting, in queue order:
    every one for an exclusive contender (or an election candidate), the exclusive ones for a shared contender.
    The last one is the single node to watch. Raises KeyError if ``own`` is not queued."""
    ahead = []
    for _, kind, child in contenders:
        if child == own:
            break
        if marker_ != SHARED or kind != SHARED:
            ahead.append(child)
    else:
        if own is not None:
            raise KeyError(own)
    return ahead


def split_queue(order: list[tuple[str, str, str]]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Holders and waiters of a fair queue: shared contenders hold until the first exclusive one."""
    holders = []
    for idx, entry in enumerate(order):
        if entry[1] in EXCLUSIVE_MARKERS:
            if idx == 0:
                holders.append(entry)
            break
        holders.append(entry)
    return holders, order[len(holders) :]


def leases(children: list[str]) -> list[str]:
    """A semaphore's lease children, oldest first."""
    return sorted((c for c in children if _LEASE.search(c)), key=lambda c: int(c.rsplit("__", 1)[1]))


def is_semaphore_child(child: str) -> bool:
    """A child only a semaphore puts below a lock node (its mutex or a lease)."""
    return _SEMAPHORE_CHILD.search(child) is not None


def child_path(lock_path: str, child: str) -> str:
    return f"{lock_path}/{child}"


def mutex_path(lock_path: str) -> str:
    return f"{lock_path}/{MUTEX}"


def queued_marker_path(lock_path: str) -> str:
    return f"{lock_path}/{QUEUED}"


def beat_state_path(lock_path: str) -> str:
    """Where the beat leader of election ``lock_path`` keeps the last send of each schedule entry."""
    return f"{lock_path}/{BEAT}"

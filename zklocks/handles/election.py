"""Leader election: ``zk_leader(name)``, one leader among every process that runs for ``name``: the fair exclusive
queue (recipes/queue.py) with its own contender marker (``__elect__``, recipes/layout.py), whose leadership is a hold
like a lock's. See docs/design.md §2 and docs/locks.md, "Leader election: `zk_leader`".
"""

from __future__ import annotations

import functools

from ..client.deadline import Deadline
from ..client.pools import connections
from ..exceptions import LockLost
from ..names import join_path
from ..recipes import layout, node_data, queue
from ..recipes.layout import Kind
from ..recipes.step_runner import Steps
from . import hold_registry
from .base import BaseHandle
from .hold_registry import Grant, Hold


class ZkLeader(BaseHandle):
    """A candidacy in the election ``name``. Re-entrant per owner: a nested acquire while leading succeeds."""

    kind: str = Kind.ELECTION

    def __init__(
        self,
        name: str,
        *,
        timeout: float | None = None,
        blocking: bool = True,
        using: str = "default",
        on_lost: str = "notify",
        max_hold: float | None = None,
    ):
        super().__init__(name, timeout=timeout, blocking=blocking, using=using, on_lost=on_lost, max_hold=max_hold)

    def _hold_steps(self, blocking: bool, deadline: Deadline, grant: Grant) -> Steps:
        mine = self._hold(strict=True)
        if mine is not None:
            if not mine.is_held:
                reason = mine.lost_reason or "suspended"
                raise LockLost(
                    f"election {self.name!r} (alias {self.using!r}): this owner led and lost the leadership "
                    f"({reason}); release() before running again",
                    name=self.name,
                    alias=self.using,
                    reason=reason,
                )
            mine.count += 1
            grant.hold = mine
            return mine
        pool = connections[self.using]
        parent = join_path(pool.cfg.namespace, self.name)
        latch = layout.get(pool.cfg.layout).latch  # kazoo layout: __elect__; Curator's LeaderLatch: latch-
        take = functools.partial(
            queue.acquire_steps,
            pool.session,
            parent,
            latch,
            node_data.payload(),
            blocking=blocking,
            deadline=deadline,
            name=self.name,
        )
        # The hold's watch on our node makes a deleted candidate node a lost leadership.
        return (yield from hold_registry.take_hold_steps(self.using, self.name, self.kind, take, deadline, grant))

    # -- what the leader sees --

    @property
    def is_leader(self) -> bool:
        """Same truth as a lock's ``is_held``: False from the moment the server could have expired our session."""
        return self.is_held

    def ensure_leader(self) -> None:
        """Raise LockLost unless we still lead; costs a sync and a read (catches a deleted candidate node)."""
        hold = self._hold(strict=True)
        if hold is None:
            raise LockLost(
                f"election {self.name!r} (alias {self.using!r}): this owner is not the leader",
                name=self.name,
                alias=self.using,
                reason="not leader",
            )
        hold.check_node()
        if not hold.is_held:
            raise LockLost(
                f"election {self.name!r} (alias {self.using!r}): leadership lost ({hold.lost_reason or 'suspended'})",
                name=self.name,
                alias=self.using,
                reason=hold.lost_reason or "suspended",
            )

    def leading_hold(self) -> Hold | None:
        """The caller's hold while it leads (session and candidate node, for fenced writes), else None."""
        hold = self._hold(strict=True)
        return hold if hold is not None and hold.is_held else None

    def describe(self) -> tuple[str, str]:
        return f"election {self.name!r}", self.name

    def __repr__(self) -> str:
        return f"<ZkLeader {self.name!r} using={self.using!r} leader={self.is_leader}>"


def zk_leader(name: str, *, using: str = "default", on_lost: str = "notify", max_hold: float | None = None) -> ZkLeader:
    """A candidacy in the election ``name`` on alias ``using``.

    ``with zk_leader(name) as leader`` blocks until this process leads; ``acquire(blocking=True, timeout=None)``
    returns whether it was elected; ``release()`` steps down (idempotent). ``is_leader``, ``ensure_leader()`` (raises
    LockLost) and ``token`` (a fencing token, strictly increasing over successive leaders while ZooKeeper keeps
    its data) tell the leader where
    it stands; a lost leadership is announced through ``zklocks.signals.lock_lost`` with ``kind="election"``.
    ``on_lost="cancel"`` stops the leader's work when it loses; ``max_hold`` caps one term (as for zk_lock).
    """
    return ZkLeader(name, using=using, on_lost=on_lost, max_hold=max_hold)


__all__ = ["ZkLeader", "zk_leader"]

"""``zk_lock``: the exclusive or shared (read) lock handle, and ``lock_path``.

What every handle shares (per-owner holds, reentrancy, tokens, loss, the context-manager, decorator and async
protocols) is in base.py. ``zk_multi_lock`` lives in multilock.py, async bridging in async_bridge.py, release on
commit in on_commit.py.
"""

from __future__ import annotations

import functools
from typing import Unpack

from .. import conf, lock_delay_option
from ..client.deadline import Deadline
from ..client.pools import connections
from ..exceptions import (
    LockLost,
    LockUpgradeError,
)
from ..names import join_path
from ..owners import current_owner
from ..recipes import layout, node_data, queue
from ..recipes.layout import Kind
from ..recipes.step_runner import Steps
from . import hold_registry
from .base import BaseHandle
from .hold_registry import Grant
from .options import LOCK_OPTIONS, HandleOptions, LockHandleOptions, only


class ZkLock(BaseHandle):
    """An exclusive or shared (read) lock on one name."""

    def __init__(
        self,
        name: str,
        *,
        shared: bool = False,
        reentrant: bool = True,
        rw: bool = False,
        lock_delay: float | None = None,
        **options: Unpack[HandleOptions],
    ) -> None:
        super().__init__(name, **options)
        # None: the alias's LOCK_DELAY, read at each acquire (docs/design.md §15)
        self.lock_delay = None if lock_delay is None else lock_delay_option.checked(lock_delay, self.name)
        self.shared = shared
        self.kind = Kind.SHARED if shared else Kind.EXCLUSIVE
        self.reentrant = reentrant
        self.rw = rw  # a zk_rw_lock handle (rwlock.py): Curator's read/write lock rather than its mutex
        self._check_name()

    def _check_name(self) -> None:
        if self.shared and not self.rw:  # the layout's shared marker must fit the name
            try:
                cfg = conf.alias_config(self.using)
            except Exception:  # noqa: BLE001 a bad alias: the acquire reports it
                return  # an unknown alias is reported by the acquire
            layout.get(cfg.layout).marker(self.kind, rw=self.rw, name=self.name, alias=self.using)

    waits_on_loop = True

    def _hold_steps(self, blocking: bool, deadline: Deadline, grant: Grant) -> Steps:
        pool = connections[self.using]
        lay = layout.get(pool.cfg.layout)
        marker_ = lay.marker(self.kind, rw=self.rw, name=self.name, alias=self.using)
        key: tuple = (current_owner(), self.using, self.name)
        if self.rw and lay.read != lay.shared:
            key += ("rw",)  # Curator's read/write lock and its mutex are separate locks on one path
        if self.reentrant:
            mine = hold_registry.registry.get(key)
            if mine is not None:
                mine.session.is_alive()  # declares an overdue loss, whose observers run outside the registry's lock
            with hold_registry.registry_lock:
                existing = hold_registry.registry.get(key)
                if existing is not None:
                    if existing.lost or existing.session.dead or existing.session.lease_expired():
                        reason = existing.lost_reason or "suspended"
                        raise LockLost(
                            f"lock {self.name!r} (alias {self.using!r}) is already held by this thread or task "
                            f"and was lost ({reason}); release() it before acquiring it again",
                            name=self.name,
                            alias=self.using,
                            reason=reason,
                        )
                    if existing.kind == Kind.SHARED and not self.shared:
                        raise LockUpgradeError(
                            f"this thread holds the shared lock {self.name!r} and asked for the exclusive one; "
                            "an upgrade would deadlock. Release the shared lock first."
                        )
                    existing.count += 1
                    grant.hold = existing
                    return existing
        parent = join_path(pool.cfg.namespace, self.name)
        take = functools.partial(
            queue.acquire_steps,
            pool.session,
            parent,
            marker_,
            node_data.payload(),
            blocking=blocking,
            deadline=deadline,
            name=self.name,
            peek_session=pool.ready_session,
            delay=pool.cfg.lock_delay if self.lock_delay is None else self.lock_delay,
        )
        hold = yield from hold_registry.take_hold_steps(self.using, self.name, self.kind, take, deadline, grant, key)
        with hold_registry.registry_lock:
            # A non-reentrant hold (SingleExecutionTask) is registered too: a plain zk_lock of the same name in
            # the task body nests in it instead of queueing behind itself. It never displaces an existing entry.
            if hold_registry.registry.setdefault(key, hold) is not hold:
                hold.key = None
        return hold


def zk_lock(name: str, *, shared: bool = False, **options: Unpack[LockHandleOptions]) -> ZkLock:
    """A distributed lock on ``name``: context manager (``with``/``async with``), decorator, or handle.

    ``shared=True`` takes the read lock. The options are those of every lock handle: ``timeout``, ``blocking``,
    ``using``, ``release_on_commit``, ``on_lost``, ``max_hold`` and ``lock_delay``
    ([LockHandleOptions][zklocks.handles.options.LockHandleOptions]). As a decorator, ``name`` may be a template
    filled from the call's bound arguments.
    """
    only(options, (*LOCK_OPTIONS, "shared"), "zk_lock")
    return ZkLock(name, shared=shared, **options)


def lock_path(name: str, using: str = "default") -> str:
    """The lock node of ``name`` for alias ``using``, as other ZooKeeper clients see it."""
    from ..conf import alias_config

    return join_path(alias_config(using).namespace, name)

"""``zk_semaphore``: up to N holders of a name at once (docs/design.md §7; the recipe is recipes/semaphore.py)."""

from __future__ import annotations

from typing import Unpack

from ..client.deadline import Deadline
from ..client.pools import connections
from ..names import join_path
from ..recipes import node_data, semaphore
from ..recipes.layout import Kind
from ..recipes.step_runner import Blocking, Steps
from . import hold_registry
from .base import BaseHandle
from .hold_registry import Grant
from .options import HandleOptions


class ZkSemaphore(BaseHandle):
    """Up to ``max_leases`` holders at once (not reentrant: each acquire takes a lease)."""

    kind: str = Kind.SEMAPHORE
    api_name = "zk_semaphore"

    def __init__(self, name: str, max_leases: int, **options: Unpack[HandleOptions]) -> None:
        if not isinstance(max_leases, int) or isinstance(max_leases, bool) or max_leases < 1:
            raise ValueError(f"max_leases must be an integer >= 1, not {max_leases!r}")
        super().__init__(name, **options)
        self.max_leases = max_leases

    def _hold_steps(self, blocking: bool, deadline: Deadline, grant: Grant) -> Steps:
        pool = connections[self.using]
        path = join_path(pool.cfg.namespace, self.name)

        def take() -> Steps:  # the semaphore's recipe waits in a thread (async_bridge.py)
            return (
                yield Blocking(
                    lambda: semaphore.acquire(
                        pool.session,
                        path,
                        self.max_leases,
                        node_data.payload(),
                        blocking=blocking,
                        deadline=deadline,
                        name=self.name,
                        alias=self.using,
                    )
                )
            )

        return (yield from hold_registry.take_hold_steps(self.using, self.name, self.kind, take, deadline, grant))


def zk_semaphore(name: str, max_leases: int, **options: Unpack[HandleOptions]) -> ZkSemaphore:
    """A counting semaphore: at most ``max_leases`` holders of ``name`` at a time, across all processes.

    The options are those of every lock handle but ``lock_delay``
    ([HandleOptions][zklocks.handles.options.HandleOptions]).
    """
    return ZkSemaphore(name, max_leases, **options)

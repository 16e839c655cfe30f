"""``zk_multi_lock``: several locks taken as one, all or none (docs/design.md §8)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Coroutine
from typing import Any, Unpack

from .. import owners
from ..client.deadline import Deadline
from ..exceptions import LockOwnershipError
from ..recipes.layout import Kind
from .acquire_base import Acquirable
from .async_bridge import run_off_loop
from .base import no_settling, settle_releases
from .decorator import F
from .locks import ZkLock
from .on_commit import release_after_commit
from .options import LOCK_OPTIONS, HandleOptions, LockHandleOptions, resolved
from .stopping import lost_after_body

MemberSpec = str | tuple[str, str] | ZkLock


class ZkMultiLock(Acquirable):
    """Several locks taken as one: all or none, in sorted order, under one overall deadline.

    Members are names (exclusive), ``(name, "shared")`` / ``(name, "exclusive")`` pairs, or ZkLock handles.
    """

    def __init__(
        self,
        members: list[MemberSpec] | tuple[MemberSpec, ...],
        *,
        lock_delay: float | None = None,
        **options: Unpack[HandleOptions],
    ) -> None:
        values = resolved(options, "zk_multi_lock", LOCK_OPTIONS)
        on_lost, max_hold, using = values["on_lost"], values["max_hold"], values["using"]
        locks: dict[str, ZkLock] = {}
        for spec in members:
            lock = self._member(spec, using, on_lost, max_hold, lock_delay)
            if lock.name in locks:
                raise ValueError(f"zk_multi_lock: {lock.name!r} appears twice")
            locks[lock.name] = lock
        if not locks:
            raise ValueError("zk_multi_lock needs at least one name")
        # One global order (sorted names) for every multi-lock: no deadlock between overlapping sets.
        self.locks = [locks[n] for n in sorted(locks)]
        self.timeout: float | None = values["timeout"]
        self.blocking: bool = values["blocking"]
        self.using: str = using
        self.release_on_commit: bool | str = values["release_on_commit"]
        self.names = [lock.name for lock in self.locks]

    @staticmethod
    def _member(spec: MemberSpec, using: str, on_lost: str, max_hold: float | None, lock_delay: float | None) -> ZkLock:
        # Each member stops the holder on its own loss, and caps its own hold; a zk_lock keeps its own lock_delay.
        opts = dict(using=using, on_lost=on_lost, max_hold=max_hold, lock_delay=lock_delay)
        if isinstance(spec, ZkLock):
            if on_lost == "notify" and max_hold is None:
                return spec
            member = spec._clone(spec.name)
            member.on_lost, member.max_hold = on_lost, max_hold
            return member
        if isinstance(spec, str):
            return ZkLock(spec, **opts)  # type: ignore[arg-type]
        if isinstance(spec, tuple) and len(spec) == 2 and spec[1] in (Kind.SHARED, Kind.EXCLUSIVE):
            return ZkLock(spec[0], shared=spec[1] == Kind.SHARED, **opts)  # type: ignore[arg-type]
        raise ValueError(f"zk_multi_lock member {spec!r}: give a name, (name, 'shared'|'exclusive') or a zk_lock")

    def _acquire(
        self,
        blocking: bool | None,
        timeout: float | None,
        cancel: threading.Event | None = None,
        call: Deadline | None = None,
    ) -> None:
        blocking, deadline, once = self._start(blocking, timeout, cancel, call)
        # A member whose acquire returned is given back even if an exception (a signal handler's) comes before
        # the loop has noted it.
        before = self._holds_now()
        try:
            for lock in self.locks:
                # A member reached past the deadline still asks the server once: only its answer says "held
                # elsewhere" (LockTimeout); an outage is ZkUnavailable.
                # timeout=0: one attempt per member; otherwise the members share the overall deadline.
                lock._acquire(blocking, 0 if once else None, cancel, deadline)
        except BaseException:
            self._give_back(before)
            raise

    def _holds_now(self) -> list[int]:
        return [lock._holds_now() for lock in self.locks]

    def _give_back(self, before: object) -> None:
        for lock, held in reversed(list(zip(self.locks, before, strict=True))):  # type: ignore[call-overload]
            lock._give_back(held)

    def describe(self) -> tuple[str, str]:
        return f"multi-lock {self.names!r}", self.names[0]

    def release(self, wait: bool = False) -> None:
        # Whatever an exception (a signal handler's) interrupts, the members it left held are released all the
        # same, then it goes on: each member's flag says whether its release was done (base.py, _release).
        done = None
        try:
            done = self._release_flags()
            answers = self._release(wait, done)
        except BaseException:
            self._release(wait, done or self._release_flags())
            raise
        settle_releases(*answers)

    def _release_flags(self) -> list[list[bool]]:
        return [[False] for _ in self.locks]

    def _release(self, wait: bool, done: list[list[bool]]) -> list:
        """Release every member not released yet (``done``); the value: their answers to wait on together, once
        every delete is sent (base.settle_releases)."""
        owner = owners.current_owner()
        for lock in self.locks:  # no member's checkpoint raises in another member's release
            if lock._stops:
                lock._disarm_top(owner)
        error: BaseException | None = None
        answers = []
        for lock, flag in reversed(list(zip(self.locks, done, strict=True))):
            if flag[0]:
                continue
            try:
                answers.append(lock._release(wait, flag))
            except LockOwnershipError as exc:
                flag[0] = True  # not ours to release: asking again changes nothing
                error = error or exc
            except BaseException as exc:  # noqa: BLE001 e.g. a signal handler's: the other members are released all the same
                error = error or exc
        if error is not None:
            raise error
        return answers

    @property
    def tokens(self) -> dict[str, int | None]:
        return {lock.name: lock.token for lock in self.locks}

    @property
    def is_held(self) -> bool:
        return all(lock.is_held for lock in self.locks)

    def ensure_held(self) -> None:
        for lock in self.locks:
            lock.ensure_held()

    def __exit__(self, exc_type, exc, tb) -> None:
        stoppers: list = []
        try:  # the body has ended: no member's checkpoint raises after this
            # Inside the try: a signal handler's exception raised in the call still releases every member.
            owner = owners.current_owner()
            for lock in self.locks:
                if lock._stops:
                    stoppers += lock._disarm_top(owner)
        finally:
            if self.release_on_commit:
                settled = None
                try:
                    settled = self._release_flags()
                    for lock, flag in reversed(list(zip(self.locks, settled, strict=True))):
                        release_after_commit(lock, self.release_on_commit, flag)
                except BaseException:  # e.g. a signal handler's: the members not handed over are released now
                    with no_settling():  # without a wait in which another exception could cut the loop short
                        for lock, flag in zip(self.locks, settled or self._release_flags(), strict=True):
                            if not flag[0]:
                                with contextlib.suppress(Exception):  # the first exception is the one to see
                                    lock.release()
                    raise
            else:
                done = None
                try:  # as in release(): a signal handler's exception leaves nothing held
                    done = self._release_flags()
                    answers = self._release(False, done)
                except BaseException:
                    self._release(False, done or self._release_flags())
                    raise
                settle_releases(*answers)
        lost = lost_after_body(stoppers) if exc_type is None else None
        if lost is not None:
            raise lost  # as a single lock's with statement

    async def __aenter__(self):
        await self._acquire_async(None, None)
        owners.note_async_holder()
        for lock in self.locks:
            lock._arm()  # the thread acquired for this task: the task is what a loss cancels
        return self

    def __aexit__(self, exc_type, exc, tb) -> Coroutine[Any, Any, None]:
        # As BaseHandle.__aexit__: the owner is the task that calls it, taken now.
        owner = owners.current_owner()
        for lock in self.locks:
            lock._unlist_top(owner)
        return self._aexit(owner, exc_type, exc, tb)

    async def _aexit(self, owner: object, exc_type, exc, tb) -> None:
        lost = None
        with owners.acting_as(owner):
            for lock in self.locks:
                if lock._stops:
                    lost = lock._leave_async(exc_type) or lost
            await run_off_loop(self.__exit__, exc_type, exc, tb)
        if lost is not None:
            raise lost from exc

    def __call__(self, func: F) -> F:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args, **kwargs):
                async with ZkMultiLock(
                    [lock._clone(lock.name) for lock in self.locks],
                    timeout=self.timeout,
                    blocking=self.blocking,
                    using=self.using,
                    release_on_commit=self.release_on_commit,
                ):
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with ZkMultiLock(
                [lock._clone(lock.name) for lock in self.locks],
                timeout=self.timeout,
                blocking=self.blocking,
                using=self.using,
                release_on_commit=self.release_on_commit,
            ):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def zk_multi_lock(
    names: list[MemberSpec] | tuple[MemberSpec, ...], **options: Unpack[LockHandleOptions]
) -> ZkMultiLock:
    """Take several locks as one: ``zk_multi_lock(["a", ("b", "shared")], timeout=5)``; ``.tokens`` maps names.

    on_lost and max_hold apply to each member (as for zk_lock): the loss of any one stops the holder.
    ``lock_delay`` applies to the members given by name (docs/design.md §15)."""
    return ZkMultiLock(names, **options)

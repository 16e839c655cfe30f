"""``release_on_commit``: a lock released before the database transaction commits protects nothing, so the
release waits for the commit (``transaction.on_commit``), and runs at once on rollback."""

from __future__ import annotations

import collections
import gc
import threading
import weakref
from typing import Any

from ..owners import acting_as, current_owner

# Whether a garbage collection is under way: the collector calls this C method with ("start" | "stop", info),
# which moves that key last. A C callable, so that no signal handler's exception can land in it and be lost
# (the collector swallows what its callbacks raise). A rolled-back trigger normally dies in Django's own code,
# where this thread holds none of our locks, and the release runs at once. One caught in a reference cycle dies
# when the collector runs, perhaps inside one of our locks on this very thread: its release gets a thread.
_phase: collections.OrderedDict[str, None] = collections.OrderedDict(start=None, stop=None)


def _in_collection() -> bool:
    return next(reversed(_phase)) == "start"


def _watch_collections() -> None:
    if _phase.move_to_end not in gc.callbacks:  # two threads may both add it: a second copy changes nothing
        gc.callbacks.append(_phase.move_to_end)  # type: ignore[arg-type]  # info, a non-empty dict: last=True


def release_after_commit(handle: Any, release_on_commit: bool | str, settled: list[bool]) -> None:
    """Release ``handle`` for the calling owner when the transaction of ``release_on_commit`` commits.

    ``settled[0]`` turns True once the release is handed to the transaction or done: a caller that sees an
    exception (a signal handler's) with it still False releases the handle itself."""
    release: _OwnerRelease | None = None
    try:
        from django.db import DEFAULT_DB_ALIAS, transaction

        db = release_on_commit if isinstance(release_on_commit, str) else DEFAULT_DB_ALIAS
        if transaction.get_connection(db).in_atomic_block:
            _watch_collections()
            release = _OwnerRelease(handle, current_owner())
            trigger = _Trigger(release)
            # Django drops on_commit callbacks on rollback without calling them; when it drops ours, the
            # finalizer releases at once. On commit, the callback runs first and the finalizer does nothing.
            # (The finalizer must not reference the trigger, or the trigger would never die.)
            weakref.finalize(trigger, release.on_rollback)
            transaction.on_commit(trigger, using=db)
            settled[0] = True
            return
    except BaseException:
        # Before the release was handed over: release now, as a rollback would. A release handed over already is
        # marked done, so that the commit does not release twice.
        if release is not None:
            release.done = True
        handle._release(False, settled)  # settled once done: if interrupted before, the caller releases
        raise
    handle._release(False, settled)


class _Trigger:
    """What transaction.on_commit holds; its death (rollback) fires the release too."""

    __slots__ = ("release", "__weakref__")

    def __init__(self, release: _OwnerRelease) -> None:
        self.release = release

    def __call__(self) -> None:
        self.release.fire()


class _OwnerRelease:
    """A release bound to the owner that took the lock (for transaction.on_commit)."""

    def __init__(self, handle: Any, owner: object) -> None:
        self.handle = handle
        self.owner = owner
        self.done = False

    def __call__(self) -> None:
        self.fire()

    def on_rollback(self) -> None:
        if _in_collection():  # not the worker thread's: a release may wait on ZooKeeper, lease deadlines may not
            threading.Thread(target=self.fire, name="zklocks-rollback-release", daemon=True).start()
        else:
            self.fire()

    def fire(self) -> None:
        if self.done:
            return
        with acting_as(self.owner):
            # Set here, not before the with: an exception (a signal handler's) raised in acting_as leaves the
            # release to the rollback's finalizer instead of to nobody. Past this point the release is done here,
            # also if the exception lands as it starts (release()'s own retry, inline).
            self.done = True
            released = [False]
            try:
                self.handle._release(False, released)
            except BaseException:
                if not released[0]:
                    self.handle.release()
                raise

"""``release_on_commit``: a lock released before the database transaction commits protects nothing, so the
release waits for the commit (``transaction.on_commit``), and runs at once on rollback."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

from ..owners import acting_as, current_owner

# Threads inside a garbage collection. A rolled-back trigger normally dies in Django's own code, where this thread
# holds none of our locks, and the release runs at once. One that was caught in a reference cycle dies whenever
# the collector runs, perhaps inside one of our locks on this thread: its release goes to the worker thread.
_collecting: set[int] = set()


def _gc_phase(phase: str, _info: dict) -> None:
    if phase == "start":
        _collecting.add(threading.get_ident())
    else:
        _collecting.discard(threading.get_ident())


def _watch_collections() -> None:
    if _gc_phase not in gc.callbacks:  # two threads may both add it: a second copy changes nothing
        gc.callbacks.append(_gc_phase)


def release_after_commit(handle: Any, release_on_commit: bool | str) -> None:
    """Release ``handle`` for the calling owner when the transaction of ``release_on_commit`` commits."""
    from django.db import DEFAULT_DB_ALIAS, transaction

    db = release_on_commit if isinstance(release_on_commit, str) else DEFAULT_DB_ALIAS
    connection = transaction.get_connection(db)
    if not connection.in_atomic_block:
        handle.release()
        return
    _watch_collections()
    release = _OwnerRelease(handle, current_owner())
    trigger = _Trigger(release)
    # Django drops on_commit callbacks on rollback without calling them; when it drops ours, the
    # finalizer releases at once. On commit, the callback runs first and the finalizer does nothing.
    # (The finalizer must not reference the trigger, or the trigger would never die.)
    weakref.finalize(trigger, release.on_rollback)
    transaction.on_commit(trigger, using=db)


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
        if threading.get_ident() in _collecting:
            from ..client import worker_threads

            worker_threads.get().call_soon(self.fire)
        else:
            self.fire()

    def fire(self) -> None:
        if self.done:
            return
        self.done = True
        with acting_as(self.owner):
            self.handle.release()

"""Owners: who a hold belongs to, the thread or, under ``async with``, the asyncio task (docs/reference.md, "Release
ownership"). Node data records it (recipes/node_data.py), the hold registry (handles/hold_registry.py) keys holds by
it, and the wait-for graph (ops/deadlocks.py) takes it as its actor."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from . import forking
from .client import interrupts

_thread_local = threading.local()
_numbers = itertools.count(1)
_task_owners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Re-entrant: a collection that runs inside these (a dying coroutine's ``async with`` exit asks for its owner)
# must not wait for its own thread.
_task_owners_lock = threading.RLock()
_numbers_lock = threading.RLock()


class Owner:
    """A thread, or an asyncio task: what holds belong to, and the actor of the wait-for graph (deadlocks.py).

    Compared by identity. Not the thread ident alone: idents are reused by later threads (which would "re-enter"
    a dead thread's hold), and every task of one event loop shares its thread. ``number`` is never reused
    within the process; contenders write it into their node data (node_data.payload) with the thread ident, and,
    for a task, the task's name.
    """

    __slots__ = ("number", "ident", "thread_name", "task_name")

    def __init__(self, task_name: str | None = None) -> None:
        with _numbers_lock:
            self.number = next(_numbers)
        self.ident = threading.get_ident()
        self.thread_name = threading.current_thread().name  # for a task: its loop's thread
        self.task_name = task_name

    def __repr__(self) -> str:
        what = f"task {self.task_name!r}" if self.task_name is not None else "thread"
        return f"<Owner #{self.number} {what} of thread {self.thread_name!r} ({self.ident})>"


# The owner of a hold: the thread by default; ``async with`` binds the asyncio task instead.
_owner_var: contextvars.ContextVar[object | None] = contextvars.ContextVar("zklocks_owner", default=None)


def _thread_owner() -> Owner:
    try:
        return _thread_local.owner
    except AttributeError:
        owner = _thread_local.owner = Owner()
        return owner


def _task_owner(task: asyncio.Task) -> Owner:
    """A fresh owner per asyncio task (ids of finished tasks are reused; owners are not)."""
    with _task_owners_lock:
        owner = _task_owners.get(task)
        if owner is None:
            owner = _task_owners[task] = Owner(task.get_name())
        return owner


def current_owner() -> object:
    """Who a hold belongs to: the asyncio task when called from a coroutine, else the thread."""
    owner = _owner_var.get()
    if owner is not None:
        return owner
    if interrupts.running_loop() is not None:
        task = asyncio.current_task()
        if task is not None:
            return _task_owner(task)
    return _thread_owner()


# The owner of the asyncio task that took a hold under ``async with``, in that task's context. Tasks started from
# it copy the context: ``asyncio.wait_for`` (a new task on Python 3.11), ``asyncio.shield`` and
# ``asyncio.to_thread`` run a release on the holder's behalf, and :func:`releasing_for` lets them.
_acquired_by: contextvars.ContextVar[object | None] = contextvars.ContextVar("zklocks_acquired_by", default=None)


def note_async_holder() -> None:
    """In a task that has just acquired: remember it as the holder for work started from this context."""
    _acquired_by.set(current_owner())


# The owner that tried a lock of its own in a context copied from a holder's (note_acquire_attempt).
_attempted_by: contextvars.ContextVar[object | None] = contextvars.ContextVar("zklocks_attempted_by", default=None)


def note_acquire_attempt() -> None:
    """As an acquire begins: an owner that is not the holder this context was copied from (a child task, a thread
    started by the holder or by a child) takes locks of its own, and from then on it releases only its own holds:
    its failed try-lock's ``release()`` in ``finally`` must not release the holder's hold.

    The attempting owner is recorded rather than the holder forgotten: asgiref's ``sync_to_async`` copies a
    thread's context changes back into the calling task, and the task's helpers on other threads must still
    release for it (one on the same pool thread is refused: docs/reference.md, "Release ownership")."""
    holder = _acquired_by.get()
    if holder is not None and _owner_var.get() is None:
        owner = current_owner()
        if owner is not holder:
            _attempted_by.set(owner)


def releasing_for() -> object | None:
    """The owner whose release the caller may run: the holder task this context was copied from, for a thread
    started from it (``asyncio.to_thread``) that took no lock of its own. Never for an asyncio task: a child or
    sibling task copies the holder's context too, and a try-lock of its own that failed must not release the
    holder's hold. Never for a release run as a named owner (``release_async`` of a child task runs its release in
    a thread acting as that child). A task releases for the holder only through a coroutine the holder created
    (``__aexit__``, ``release_async``)."""
    if interrupts.running_loop() is not None or _owner_var.get() is not None:
        return None
    attempted = _attempted_by.get()
    if attempted is not None and (attempted is current_owner() or getattr(attempted, "task_name", None) is not None):
        # This thread took locks of its own, or it was started by a task other than the holder that did (a child
        # task's try-lock): it releases only its own holds. (A helper thread's attempt that asgiref copied back
        # into the holder's context names that thread, not this one: the holder's other helpers go on.)
        return None
    return _acquired_by.get()


def acting_for_another() -> bool:
    """Whether this code runs on behalf of another owner (an executor thread of an asyncio task, a release on
    commit), not as its thread."""
    return _owner_var.get() is not None


def owner_context() -> contextvars.Context:
    """A context for executor threads that carries the calling task as the owner of holds."""
    before = _owner_var.get()
    try:
        _owner_var.set(current_owner())
        return contextvars.copy_context()
    finally:
        _owner_var.set(before)


@contextmanager
def acting_as(owner: object) -> Iterator[None]:
    """Run the block as ``owner`` (e.g. a release on commit, run by whichever thread commits)."""
    with interrupts.set_within(_owner_var, owner):
        yield


def reset_after_fork() -> None:
    """The locks of a forked child start free (the forking thread may have held one)."""
    global _task_owners_lock, _numbers_lock
    _task_owners_lock = threading.RLock()
    _numbers_lock = threading.RLock()


forking.register(reset_after_fork)

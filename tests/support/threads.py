"""Locks held in threads of their own: a hold belongs to its thread, so another thread is another lock owner.

``HeldInThread`` is the one way the tests hold a lock in a thread; ``in_thread`` runs a call in another thread.
``hold``, ``queue_behind`` and ``lease`` name the thread (the read model, the admin and the CLI show it).
"""

from __future__ import annotations

import threading

from zklocks import zk_lock, zk_semaphore
from zklocks.ops import read_model
from zklocks.recipes import node_data

from .helpers import wait_until


class HeldInThread:
    """Acquire ``handle`` in a thread of its own and keep it until ``release()``.

    ``acquired`` is what ``acquire`` returned (None until it has), ``error`` what it raised, ``token`` the token of
    the hold, and ``lost`` what ``ensure_held`` raised when told to release (the lock was taken away meanwhile).
    The constructor waits until ``acquire`` has returned, unless ``wait_for_acquire=False`` (a contender that
    queues); ``wait()`` waits for it then.
    """

    def __init__(
        self,
        handle,
        *,
        name: str | None = None,
        task: tuple[str, str] | None = None,
        wait_for_acquire: bool = True,
        **acquire_kwargs,
    ) -> None:
        self.handle = handle
        self.task = task
        self.token: int | None = None
        self.acquired: bool | None = None
        self.error: BaseException | None = None
        self.lost: BaseException | None = None
        self.returned = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(acquire_kwargs,), name=name, daemon=True)
        self._thread.start()
        if wait_for_acquire:
            self.returned.wait(30)

    def _run(self, kwargs) -> None:
        if self.task is not None:
            node_data.current_task.set(self.task)
        try:
            self.acquired = self.handle.acquire(**kwargs)
            self.token = self.handle.token
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc
        finally:
            self.returned.set()
        if not self.acquired:
            return
        self._stop.wait(120)
        try:
            self.handle.ensure_held()
        except Exception as exc:  # noqa: BLE001 - a force-release while we held it
            self.lost = exc
        try:
            self.handle.release()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for ``acquire`` to return; True if it took the lock."""
        return self.returned.wait(timeout) and bool(self.acquired) and self.error is None

    def release(self) -> None:
        self._stop.set()
        self._thread.join(30)


def in_thread(fn, *args):
    """Run ``fn(*args)`` in a new thread (a different lock owner) and return its result or raise its error."""
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def take_and_give_back(handle, timeout=None):
    """Acquire ``handle`` (at once, or within ``timeout``), check that its node is real, and release; whether it
    was taken."""
    got = handle.acquire(blocking=timeout is not None, timeout=timeout)
    if got:
        handle.ensure_held()  # a real node, not a stale hold whose node is gone
        handle.release()
    return got


def free_for_others(handle_factory):
    """Whether another owner (a thread of its own) takes ``handle_factory()`` at once."""
    return in_thread(lambda: take_and_give_back(handle_factory()))


def hold(name: str, thread: str, *, shared: bool = False, task=None, using: str = "default") -> HeldInThread:
    """``name`` held by a thread called ``thread`` (optionally as a Celery task (id, name))."""
    t = HeldInThread(zk_lock(name, shared=shared, timeout=30, using=using), name=thread, task=task)
    assert t.wait(15), t.error
    return t


def queue_behind(name: str, thread: str, waiting: int, *, shared: bool = False, using: str = "default") -> HeldInThread:
    """Start a contender and wait until the lock shows ``waiting`` waiters."""
    t = HeldInThread(zk_lock(name, shared=shared, timeout=30, using=using), name=thread, wait_for_acquire=False)
    wait_until(lambda: _waiting(using, name) >= waiting, timeout=15)
    return t


def lease(name: str, max_leases: int, thread: str) -> HeldInThread:
    """A contender for one of ``max_leases`` leases (not waited for)."""
    return HeldInThread(zk_semaphore(name, max_leases, timeout=30), name=thread, wait_for_acquire=False)


def _waiting(alias: str, name: str) -> int:
    info, _ = read_model.lock_info(alias, name)
    return 0 if info is None else info.queue_length


def busy_orders_lock():
    """'orders:7' held by thread 'web-1' (as task shop.charge) with two waiters queued behind it."""
    holder = hold("orders:7", "web-1", task=("task-abc", "shop.charge"))
    waiters = [queue_behind("orders:7", "waiter-a", 1), queue_behind("orders:7", "waiter-b", 2)]
    return holder, waiters


def stop_all(holder, waiters) -> None:
    holder.release()
    for w in waiters:
        w.release()

"""Threads that hold or wait for a lock until told to let go (for the read-model, admin and CLI tests)."""

from __future__ import annotations

import threading

from zklocks import holder, inspect, zk_lock, zk_semaphore

from .helpers import wait_until


class LockThread:
    """Acquires a handle in its own thread and keeps it until ``stop()``; records the token."""

    def __init__(self, handle, name: str, task: tuple[str, str] | None = None) -> None:
        self.handle = handle
        self.task = task
        self.acquired = threading.Event()
        self.release = threading.Event()
        self.token: int | None = None
        self.error: BaseException | None = None
        self.lost: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        if self.task is not None:
            holder.current_task.set(self.task)
        try:
            with self.handle as held:
                self.token = held.token
                self.acquired.set()
                self.release.wait(60)
                try:
                    held.ensure_held()
                except Exception as exc:  # a force-release while we held it
                    self.lost = exc
        except BaseException as exc:
            self.error = exc
            self.acquired.set()

    def start(self) -> LockThread:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.thread.join(15)


def hold(name: str, thread: str, *, shared: bool = False, task=None, using: str = "default") -> LockThread:
    t = LockThread(zk_lock(name, shared=shared, timeout=30, using=using), thread, task).start()
    assert t.acquired.wait(15) and t.error is None, t.error
    return t


def queue_behind(name: str, thread: str, waiting: int, *, shared: bool = False, using: str = "default") -> LockThread:
    """Start a contender and wait until the lock shows ``waiting`` waiters."""
    t = LockThread(zk_lock(name, shared=shared, timeout=30, using=using), thread).start()
    wait_until(lambda: _waiting(using, name) >= waiting, timeout=15)
    return t


def lease(name: str, max_leases: int, thread: str) -> LockThread:
    return LockThread(zk_semaphore(name, max_leases, timeout=30), thread).start()


def _waiting(alias: str, name: str) -> int:
    info, _ = inspect.lock_info(alias, name)
    return 0 if info is None else info.queue_length


def busy_orders_lock():
    """'orders:7' held by thread 'web-1' (as task shop.charge) with two waiters queued behind it."""
    holder = hold("orders:7", "web-1", task=("task-abc", "shop.charge"))
    waiters = [queue_behind("orders:7", "waiter-a", 1), queue_behind("orders:7", "waiter-b", 2)]
    return holder, waiters


def stop_all(holder, waiters) -> None:
    holder.stop()
    for w in waiters:
        w.stop()

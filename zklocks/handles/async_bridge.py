"""Async callers: an acquire waits in a thread of one pool, a release runs in a thread of another, and neither
ever runs on the event loop. Releases never queue behind waiting acquires."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import forking
from ..client import interrupts
from ..client.deadline import Deadline
from ..exceptions import LockTimeout, SyncLockInEventLoop
from ..owners import owner_context

_async_executor: ThreadPoolExecutor | None = None
_release_executor: ThreadPoolExecutor | None = None
_async_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """Threads for async acquires: waiting for a lock must never block the event loop."""
    global _async_executor
    with _async_lock:
        if _async_executor is None:
            _async_executor = ThreadPoolExecutor(max_workers=256, thread_name_prefix="zklocks-async")
        return _async_executor


def _releaser() -> ThreadPoolExecutor:
    """Threads for async releases, apart from the acquire threads: a release never queues behind waiters
    (every acquire thread may be waiting for the very lock the release frees)."""
    global _release_executor
    with _async_lock:
        if _release_executor is None:
            _release_executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="zklocks-async-release")
        return _release_executor


def reset_after_fork() -> None:
    """The pools' threads did not survive the fork; the old pools would start no new ones."""
    global _async_executor, _release_executor, _async_lock
    _async_executor = None
    _release_executor = None
    _async_lock = threading.Lock()


forking.register(reset_after_fork)


async def run_off_loop(fn: Callable, *args: Any) -> Any:
    """Run a release in a thread of its own pool, never behind the acquire threads. Shielded: a task cancelled
    while its release waits for a thread stops waiting, and the release still runs (else the pool would drop it,
    and the lock would stay held by a task that is gone)."""
    loop = asyncio.get_running_loop()
    release = loop.run_in_executor(_releaser(), owner_context().run, fn, *args)
    # Read once done: a task cancelled meanwhile left the shield, and an error of the release (LockLost from
    # __exit__, say) would otherwise be logged as never retrieved. The cancelled task has no one to tell.
    release.add_done_callback(lambda f: f.cancelled() or f.exception())
    return await asyncio.shield(release)


def refuse_in_event_loop(handle) -> None:
    """Raise SyncLockInEventLoop if this thread runs an event loop: a blocking acquire would stop the loop, and
    wait forever for a holder that is a coroutine of that loop. (Async acquires call ``_acquire`` in a thread of
    their own pool, where no loop runs.)"""
    if interrupts.running_loop() is not None:
        what, _ = handle.describe()
        raise SyncLockInEventLoop(
            f"{what} (alias {handle.using!r}): a blocking acquire on the thread of a running event loop would stop "
            "the loop until the lock is granted; in a coroutine, use `async with` or `await lock.acquire_async()`"
        )


# How long past its deadline and CONNECT_TIMEOUT an async acquire waits for its thread's own verdict before raising
# LockTimeout itself (a thread never taken up: every acquire thread is busy).
_ASYNC_GRACE = 0.1


async def acquire_off_loop(handle, blocking: bool | None, timeout: float | None) -> None:
    """Acquire in a thread; if the awaiting task is cancelled, stop waiting and give back a late success.

    The deadline counts from this call. Past it, the thread's verdict is waited for until CONNECT_TIMEOUT more: an
    answer of the server backs its LockTimeout, and a server that cannot answer makes it ZkUnavailable (an outage
    is never contention). A thread not taken up by then (every acquire thread busy) ends in LockTimeout.
    """
    resolved = handle.blocking if blocking is None else blocking
    wait = handle.timeout if timeout is None else timeout
    cancel = threading.Event()
    call = Deadline(wait if resolved and wait else None, cancel)  # from now, not from when a thread takes it up
    at = call.at
    ctx = owner_context()
    job = _executor().submit(ctx.run, handle._acquire, blocking, timeout, cancel, call)
    future = asyncio.wrap_future(job)
    try:
        if at is None:
            await asyncio.shield(future)
        else:
            answer = _connect_timeout(handle.using)
            # asyncio.timeout, not wait_for: before Python 3.12, wait_for could swallow a cancellation of the
            # caller that met the acquire's success, and the body would run in a task told to stop.
            async with asyncio.timeout(max(0.0, at - time.monotonic()) + answer + _ASYNC_GRACE):
                await asyncio.shield(future)
    except (TimeoutError, asyncio.CancelledError) as exc:
        cancel.set()
        # The loop's future is read once done, so that a late LockTimeout is not logged as never retrieved.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        # On the job itself, not on the loop's future: the loop may be closed when the thread is granted (asyncio.run
        # cancels the tasks left as it ends), and a closed loop drops what its future would have been told.
        job.add_done_callback(
            lambda f: f.cancelled() or f.exception() is not None or _releaser().submit(ctx.copy().run, handle.release)
        )
        if isinstance(exc, asyncio.TimeoutError):
            what, name = handle.describe()
            raise LockTimeout(f"{what} (alias {handle.using!r}) not acquired within the timeout", name=name) from None
        raise


def _connect_timeout(alias: str) -> float:
    """The alias's CONNECT_TIMEOUT; 0 for an unknown alias (the thread reports it at once)."""
    from .. import conf

    try:
        return conf.alias_config(alias).connect_timeout
    except Exception:  # noqa: BLE001 a bad alias: the acquire reports it
        return 0.0

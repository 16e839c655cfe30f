"""Lock handles: context manager, decorator and explicit acquire/release; reentrancy, tokens, loss.

A handle may be shared by threads: each owner (a thread, or an asyncio task for ``async with``) has its own
hold. Holds of one process are registered by (owner, alias, name) so that a nested acquire by the same owner
re-enters instead of queueing behind itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from kazoo.protocol.states import EventType

from . import conf, dispatch, holder, names, signals
from .connections import connections
from .exceptions import InvalidLockName, LockLost, LockNotAcquired, LockTimeout, LockUpgradeError
from .names import join_path, validate_name
from .recipes import queue
from .recipes.calls import Deadline, SessionGone, call
from .recipes.layout import Kind, marker
from .session import Session

F = TypeVar("F", bound=Callable[..., Any])

# The owner of a hold: the thread by default; ``async with`` binds the asyncio task instead.
_owner_var: contextvars.ContextVar[object | None] = contextvars.ContextVar("zklocks_owner", default=None)


_thread_local = threading.local()


def _thread_owner() -> object:
    # Not the thread ident: idents are reused by later threads, which would "re-enter" a dead thread's hold.
    try:
        return _thread_local.owner
    except AttributeError:
        owner = _thread_local.owner = ("thread", threading.get_ident(), object())
        return owner


_task_owners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_task_owners_lock = threading.Lock()


def _task_owner(task: asyncio.Task) -> object:
    """A fresh object per asyncio task (ids of finished tasks are reused; these objects are not)."""
    with _task_owners_lock:
        owner = _task_owners.get(task)
        if owner is None:
            owner = _task_owners[task] = ("task", object())
        return owner


def current_owner() -> object:
    """Who a hold belongs to: the asyncio task when called from a coroutine, else the thread."""
    owner = _owner_var.get()
    if owner is not None:
        return owner
    if asyncio._get_running_loop() is not None:
        task = asyncio.current_task()
        if task is not None:
            return _task_owner(task)
    return _thread_owner()


class Hold:
    """One node this process holds (or a semaphore lease), shared by nested acquires of one owner."""

    __slots__ = ("alias", "name", "kind", "contender", "session", "count", "lost", "lost_reason", "acquired_at",
                 "key", "task", "task_id", "thread_name", "__weakref__")

    def __init__(self, alias: str, name: str, kind: str, contender: queue.Contender, key: tuple | None) -> None:
        self.alias = alias
        self.name = name
        self.kind = kind
        self.contender = contender
        self.session: Session = contender.session
        self.count = 1
        self.lost = False
        self.lost_reason: str | None = None
        self.acquired_at = time.monotonic()
        self.key = key
        task = self.task = holder.current_task.get()
        self.task_id = task[0] if task else None
        self.thread_name = threading.current_thread().name

    @property
    def token(self) -> int:
        return self.contender.token  # type: ignore[return-value]

    @property
    def is_held(self) -> bool:
        return not self.lost and self.session.is_alive()

    def mark_lost(self, reason: str) -> None:
        if self.lost:
            return
        self.lost = True
        self.lost_reason = reason
        signals.send_async(signals.lock_lost, sender=Hold, name=self.name, alias=self.alias, kind=self.kind,
                           token=self.token, reason=reason, task_id=self.task_id)

    def check_node(self) -> None:
        """Is our node still there? (A force-release or a lost session removes it.)

        A sync goes first, pipelined: the read then reflects everything the leader had committed when it
        answered the sync, not what a server cut off from the leader still believes.
        """
        if not self.is_held:
            return
        client = self.session.client
        node = self.contender.node

        def synced_exists():
            client.sync_async(node)
            return client.exists_async(node)

        try:
            stat = call(self.session, synced_exists, Deadline(self.session.cfg.connect_timeout))
        except SessionGone:
            self.mark_lost(self.session.dead_reason or "expired")
            return
        except Exception:
            return  # cannot tell now; the lease bound still applies
        if stat is None:
            self.mark_lost("deleted")


_registry: dict[tuple, Hold] = {}
_registry_lock = threading.Lock()


def reset_after_fork() -> None:
    """A forked child holds nothing: the forking thread's id survives, so stale entries would 're-enter'."""
    global _registry_lock, _long_holds
    global _async_executor, _release_executor, _async_lock, _task_owners_lock
    _registry.clear()
    _registry_lock = threading.Lock()
    _long_holds = _LongHolds()
    _async_executor = None  # its threads did not survive the fork; it would start no new ones
    _release_executor = None
    _async_lock = threading.Lock()
    _task_owners_lock = threading.Lock()


os.register_at_fork(after_in_child=reset_after_fork)


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


def _deadline(blocking: bool, timeout: float | None, cancel: threading.Event | None,
              at: float | None) -> tuple[Deadline, bool]:
    """The deadline of one acquire, and whether it is a single attempt (``timeout=0``, as with threading.Lock).

    ``at`` is the absolute deadline of an async call, fixed when it was made (not when a thread took it up).
    A single attempt has no deadline of its own: its requests are bounded by CONNECT_TIMEOUT, like
    ``blocking=False``, and it never waits behind a holder.
    """
    once = blocking and timeout == 0
    deadline = Deadline(None if once or not blocking else timeout, cancel)
    if at is not None and not once:
        deadline.at = at
    return deadline, once


class _Grant:
    """What an acquire has taken so far, so that an exception at any point after the grant (an asynchronous
    one too: KeyboardInterrupt, Celery's SoftTimeLimitExceeded) gives it back instead of leaving the node."""

    __slots__ = ("contender", "hold")

    def __init__(self) -> None:
        self.contender: queue.Contender | None = None
        self.hold: Hold | None = None  # its count includes this acquire

    def give_back(self) -> None:
        hold = self.hold
        if hold is None:
            if self.contender is not None:
                self.contender.abandon()
            return
        with _registry_lock:
            hold.count -= 1
            last = hold.count <= 0
            if last and hold.key is not None and _registry.get(hold.key) is hold:
                del _registry[hold.key]
        if last:
            hold.session.remove_hold(hold)
            if not hold.lost:
                hold.contender.abandon()


class _Acquirable:
    """``acquire() -> bool`` on top of a raising ``_acquire``."""

    def _acquire(self, blocking: bool | None, timeout: float | None, cancel: threading.Event | None = None,
                 at: float | None = None) -> None:
        raise NotImplementedError

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire; False if held elsewhere (``blocking=False``) or not acquired within ``timeout``."""
        try:
            self._acquire(blocking, timeout)
        except LockNotAcquired:
            return False
        return True

    async def acquire_async(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        try:
            await _acquire_off_loop(self, blocking, timeout)
        except LockNotAcquired:
            return False
        return True


class _BaseHandle(_Acquirable):
    """Shared machinery: per-owner holds, properties, context-manager, decorator and async protocols."""

    kind: str = Kind.EXCLUSIVE

    def __init__(self, name: str, *, timeout: float | None, blocking: bool, using: str,
                 release_on_commit: bool | str = False) -> None:
        self.name = validate_name(name)
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError(f"timeout must be None or a number >= 0, not {timeout!r}")
        self.timeout = timeout
        self.blocking = blocking
        self.using = using
        self.release_on_commit = release_on_commit
        self._mine: dict[object, list[Hold]] = {}  # owner -> holds, innermost last
        self._mine_lock = threading.Lock()

    # -- to be provided by subclasses --

    def _acquire_hold(self, blocking: bool, deadline: Deadline, grant: _Grant) -> Hold:
        """Take the lock; record in ``grant`` what is taken as soon as it is (see _Grant)."""
        raise NotImplementedError

    def _release_hold(self, hold: Hold, wait: bool) -> None:
        raise NotImplementedError

    def _clone(self, name: str) -> _BaseHandle:
        raise NotImplementedError

    # -- acquire / release --

    def _acquire(self, blocking: bool | None, timeout: float | None, cancel: threading.Event | None = None,
                 at: float | None = None) -> None:
        blocking = self.blocking if blocking is None else blocking
        timeout = self.timeout if timeout is None else timeout
        deadline, once = _deadline(blocking, timeout, cancel, at)
        started = time.monotonic()
        if deadline.expired():  # an async call cancelled, or whose time ran out before a thread took it up
            raise LockTimeout(f"{self.kind} lock {self.name!r} (alias {self.using!r}) not acquired within the "
                              "timeout", name=self.name)
        grant = _Grant()
        owner: object | None = None
        depth: int | None = None
        try:
            try:
                hold = self._acquire_hold(blocking and not once, deadline, grant)
            except LockNotAcquired as exc:
                if once and not isinstance(exc, LockTimeout):
                    raise LockTimeout(f"{self.kind} lock {self.name!r} (alias {self.using!r}) is held elsewhere "
                                      "(timeout=0: one attempt)", name=self.name) from None
                raise
            owner = current_owner()
            with self._mine_lock:
                stack = self._mine.setdefault(owner, [])
                depth = len(stack)
                stack.append(hold)  # nothing can interrupt between the depth and the append
            if hold.count == 1:
                signals.send_async(signals.lock_acquired, sender=type(self), name=self.name, alias=self.using,
                                   kind=hold.kind, token=hold.token, wait_time=time.monotonic() - started)
        except BaseException:
            # Whatever arrived after the grant (even asynchronously) must not leave a node nobody releases.
            if owner is not None:
                with self._mine_lock:
                    stack = self._mine.get(owner)
                    if stack is not None:
                        if depth is not None:
                            del stack[depth:]
                        if not stack:
                            del self._mine[owner]
            grant.give_back()
            raise

    def release(self, wait: bool = False) -> None:
        """Release (the outermost release frees the lock). Idempotent; never raises for a lost lock.

        The delete is sent without waiting for its answer: this session's later requests see it applied, and
        other clients see the node gone one round trip later. ``wait=True`` waits for the server's answer.
        """
        owner = current_owner()
        with self._mine_lock:
            stack = self._mine.get(owner)
            if not stack:
                return  # this owner holds nothing through this handle (another thread's hold stays untouched)
            hold = stack.pop()
            if not stack:
                del self._mine[owner]
        self._drop(hold, wait)

    def _drop(self, hold: Hold, wait: bool = False) -> None:
        if hold.key is not None:
            with _registry_lock:
                hold.count -= 1
                last = hold.count == 0
                if last and _registry.get(hold.key) is hold:
                    del _registry[hold.key]
        else:
            hold.count -= 1
            last = hold.count == 0
        if not last:
            return
        hold.session.remove_hold(hold)
        if not hold.lost:
            self._release_hold(hold, wait)
        signals.send_async(signals.lock_released, sender=type(self), name=self.name, alias=self.using,
                           kind=hold.kind, token=hold.token, held_time=time.monotonic() - hold.acquired_at)

    # -- what the holder sees --

    def _hold(self, strict: bool = False) -> Hold | None:
        """The caller's innermost hold. For the read-only properties, a caller that holds nothing sees the
        only holder of this handle if there is exactly one (e.g. a monitoring thread)."""
        owner = current_owner()
        with self._mine_lock:
            stack = self._mine.get(owner)
            if not stack and not strict and len(self._mine) == 1:
                stack = next(iter(self._mine.values()))
        return stack[-1] if stack else None

    @property
    def token(self) -> int | None:
        """Fencing token: the czxid of our node, strictly increasing over successive holders of the name."""
        hold = self._hold()
        return None if hold is None else hold.token

    @property
    def is_held(self) -> bool:
        """False from the moment the server could have expired our session, or once the lock is known lost."""
        hold = self._hold()
        return hold is not None and hold.is_held

    def ensure_held(self) -> None:
        """Raise LockLost unless we still hold the lock; costs a sync and a read to catch a force-release."""
        hold = self._hold(strict=True)
        if hold is None:
            raise LockLost(f"lock {self.name!r} is not held by this thread", name=self.name, reason="not held")
        hold.check_node()
        if not hold.is_held:
            raise LockLost(name=self.name, reason=hold.lost_reason or "suspended")

    # -- context manager --

    def __enter__(self):
        self._acquire(None, None)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.release_on_commit:
            self._release_after_commit()
        else:
            self.release()

    def _release_after_commit(self) -> None:
        from django.db import DEFAULT_DB_ALIAS, transaction

        db = self.release_on_commit if isinstance(self.release_on_commit, str) else DEFAULT_DB_ALIAS
        connection = transaction.get_connection(db)
        if not connection.in_atomic_block:
            self.release()
            return
        release = _OwnerRelease(self, current_owner())
        trigger = _Trigger(release)
        # Django drops on_commit callbacks on rollback without calling them; when it drops ours, the
        # finalizer releases at once. On commit, the callback runs first and the finalizer does nothing.
        # (The finalizer must not reference the trigger, or the trigger would never die.)
        weakref.finalize(trigger, release.fire)
        transaction.on_commit(trigger, using=db)

    # -- async --

    async def __aenter__(self):
        await _acquire_off_loop(self, None, None)
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await _run_off_loop(self.__exit__, exc_type, exc, tb)

    async def release_async(self, wait: bool = False) -> None:
        await _run_off_loop(self.release, wait)

    # -- decorator --

    def __call__(self, func: F) -> F:
        template = self.name
        where = f"{func.__module__}.{func.__qualname__}"
        owner = f"{func.__qualname__}{names.signature(func)}"
        # Mistakes in the template are caught when decorating (at import time), not at the first call.
        try:
            templated = bool(names.template_fields(template))
        except ValueError as exc:
            raise InvalidLockName(f"{where}: lock name template {template!r} {exc}") from None
        missing = names.missing_fields(template, func)
        if missing:
            raise InvalidLockName(f"{where}: lock name template {template!r} refers to "
                                  f"{', '.join(map(repr, missing))}, which is not an argument of {owner}")
        conf.declare_alias(self.using, where)

        def handle_for(args: tuple, kwargs: dict) -> _BaseHandle:
            if not templated:
                return self._clone(template)
            try:
                arguments = names.bind_arguments(func, args, kwargs)
            except TypeError as exc:
                raise TypeError(f"{where}: {exc}") from None
            return self._clone(names.render_template(template, arguments, what=where, label="lock name template",
                                                     owner=owner))

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args, **kwargs):
                async with handle_for(args, kwargs):
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with handle_for(args, kwargs):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} using={self.using!r} held={self.is_held}>"


class _Trigger:
    """What transaction.on_commit holds; its death (rollback) fires the release too."""

    __slots__ = ("release", "__weakref__")

    def __init__(self, release: _OwnerRelease) -> None:
        self.release = release

    def __call__(self) -> None:
        self.release.fire()


class _OwnerRelease:
    """A release bound to the owner that took the lock (for transaction.on_commit)."""

    def __init__(self, handle: _BaseHandle, owner: object) -> None:
        self.handle = handle
        self.owner = owner
        self.done = False

    def __call__(self) -> None:
        self.fire()

    def fire(self) -> None:
        if self.done:
            return
        self.done = True
        token = _owner_var.set(self.owner)
        try:
            self.handle.release()
        finally:
            _owner_var.reset(token)


def _owner_context() -> contextvars.Context:
    """A context for executor threads that carries the calling task as the owner of holds."""
    token = _owner_var.set(current_owner())
    try:
        return contextvars.copy_context()
    finally:
        _owner_var.reset(token)


async def _run_off_loop(fn: Callable, *args: Any) -> Any:
    """Run a release in a thread of its own pool, never behind the acquire threads."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_releaser(), _owner_context().run, fn, *args)


# How long past its deadline an async acquire waits for its thread's own LockTimeout before raising one itself.
_ASYNC_GRACE = 0.1


async def _acquire_off_loop(handle, blocking: bool | None, timeout: float | None) -> None:
    """Acquire in a thread; if the awaiting task is cancelled, stop waiting and give back a late success.

    The deadline counts from this call: when every acquire thread is busy, the call still times out on time.
    """
    resolved = handle.blocking if blocking is None else blocking
    wait = handle.timeout if timeout is None else timeout
    at = time.monotonic() + wait if resolved and wait else None
    ctx = _owner_context()
    cancel = threading.Event()
    future = asyncio.get_running_loop().run_in_executor(_executor(), ctx.run, handle._acquire, blocking, timeout,
                                                        cancel, at)
    try:
        if at is None:
            await asyncio.shield(future)
        else:
            await asyncio.wait_for(asyncio.shield(future), max(0.0, at - time.monotonic()) + _ASYNC_GRACE)
    except (asyncio.CancelledError, asyncio.TimeoutError) as exc:
        cancel.set()
        future.add_done_callback(
            lambda f: f.cancelled() or f.exception() is not None or _releaser().submit(ctx.copy().run, handle.release))
        if isinstance(exc, asyncio.TimeoutError):
            what = f"lock {handle.name!r}" if isinstance(handle, _BaseHandle) else f"multi-lock {handle.names!r}"
            name = handle.name if isinstance(handle, _BaseHandle) else handle.names[0]
            raise LockTimeout(f"{what} (alias {handle.using!r}) not acquired within the timeout", name=name) from None
        raise


LONG_HOLD = 1.0


class _LongHolds:
    """Holds younger than LONG_HOLD, looked at by one periodic tick on the dispatch thread.

    Once a hold has lasted LONG_HOLD seconds we watch our own node (the watch marks the hold lost as soon as
    someone deletes the node, e.g. a force-release from the admin) and, if we had to wait, record acquired_at
    with one asynchronous set (the successor's data watch re-arms without waking, see
    queue.Contender.wait_for). Short holds pay for neither; registering one is a list append.
    """

    def __init__(self) -> None:
        self._young: list[tuple[float, Hold, bool, float]] = []
        self._lock = threading.Lock()
        self._ticking = False

    def add(self, hold: Hold, waited: bool) -> None:
        entry = (time.monotonic(), hold, waited, time.time())
        with self._lock:
            self._young.append(entry)
            if self._ticking:
                return
            self._ticking = True
        dispatch.get().call_later(LONG_HOLD, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [e for e in self._young if now - e[0] >= LONG_HOLD]
            self._young = [e for e in self._young if now - e[0] < LONG_HOLD and e[1].count > 0]
            self._ticking = bool(self._young)
            next_at = self._young[0][0] + LONG_HOLD if self._young else None
        for _, hold, waited, acquired_at in due:
            if hold.count > 0 and hold.is_held:
                _watch_own_node(hold, waited, acquired_at)
        if next_at is not None:
            dispatch.get().call_at(next_at, self._tick)


def _watch_own_node(hold: Hold, waited: bool, acquired_at: float) -> None:
    contender = hold.contender
    session = contender.session
    client = session.client

    def on_own_node(event) -> None:
        if hold.count <= 0 or hold.lost:
            return
        if event.type == EventType.DELETED:
            hold.mark_lost("deleted")
        elif event.type == EventType.NONE:
            # A connection blip cleared the watch: set it again once the session is back.
            dispatch.get().call_later(0.05, rearm)

    def on_exists(result) -> None:
        if not result.successful():
            if not session.dead:
                dispatch.get().call_later(0.1, rearm)
        elif result.value is None:
            on_own_node(_Deleted)

    def rearm() -> None:
        if hold.count <= 0 or hold.lost or session.dead:
            return
        if not session.connected:
            dispatch.get().call_later(0.05, rearm)
            return
        client.exists_async(contender.node, watch=on_own_node).rawlink(on_exists)

    if waited:
        client.set_async(contender.node, holder.payload(
            thread=hold.thread_name, task=hold.task,
            acquired_at=round(acquired_at, 3), queued_at=round(contender.queued_at, 3)))
    rearm()


_long_holds = _LongHolds()


class _Deleted:
    type = EventType.DELETED


class ZkLock(_BaseHandle):
    """An exclusive or shared (read) lock on one name."""

    def __init__(self, name: str, *, shared: bool = False, timeout: float | None = None, blocking: bool = True,
                 using: str = "default", release_on_commit: bool | str = False, reentrant: bool = True) -> None:
        super().__init__(name, timeout=timeout, blocking=blocking, using=using,
                         release_on_commit=release_on_commit)
        self.shared = shared
        self.kind = Kind.SHARED if shared else Kind.EXCLUSIVE
        self.reentrant = reentrant

    def _clone(self, name: str) -> ZkLock:
        return ZkLock(name, shared=self.shared, timeout=self.timeout, blocking=self.blocking, using=self.using,
                      release_on_commit=self.release_on_commit, reentrant=self.reentrant)

    @property
    def path(self) -> str:
        return join_path(connections[self.using].cfg.namespace, self.name)

    def _acquire_hold(self, blocking: bool, deadline: Deadline, grant: _Grant) -> Hold:
        key = (current_owner(), self.using, self.name)
        if self.reentrant:
            with _registry_lock:
                existing = _registry.get(key)
                if existing is not None:
                    if existing.lost or not existing.is_held:
                        raise LockLost(f"lock {self.name!r} is already held by this thread and was lost",
                                       name=self.name, reason=existing.lost_reason or "suspended")
                    if existing.kind == Kind.SHARED and not self.shared:
                        raise LockUpgradeError(
                            f"this thread holds the shared lock {self.name!r} and asked for the exclusive one; "
                            "an upgrade would deadlock. Release the shared lock first.")
                    existing.count += 1
                    grant.hold = existing
                    return existing
        pool = connections[self.using]
        parent = join_path(pool.cfg.namespace, self.name)
        marker_ = marker(self.kind)
        data = holder.payload()
        while True:
            grant.hold = None
            contender = grant.contender = queue.acquire(pool.session, parent, marker_, data, blocking=blocking,
                                                        deadline=deadline, name=self.name)
            hold = grant.hold = Hold(self.using, self.name, self.kind, contender, key)
            if contender.session.add_hold(hold):
                break
            if deadline.expired():  # the session ended between the grant and now
                raise LockTimeout(f"lock {self.name!r}: session lost while acquiring", name=self.name)
        _long_holds.add(hold, contender.waited)
        with _registry_lock:
            # A non-reentrant hold (SingleExecutionTask) is registered too: a plain zk_lock of the same name in
            # the task body nests in it instead of queueing behind itself. It never displaces an existing entry.
            if _registry.setdefault(key, hold) is not hold:
                hold.key = None
        return hold

    def _release_hold(self, hold: Hold, wait: bool) -> None:
        if wait:
            hold.contender.delete(Deadline(hold.session.cfg.connect_timeout))
        else:
            hold.contender.delete_nowait()


def zk_lock(name: str, *, shared: bool = False, timeout: float | None = None, blocking: bool = True,
            using: str = "default", release_on_commit: bool | str = False) -> ZkLock:
    """A distributed lock on ``name``: context manager (``with``/``async with``), decorator, or handle.

    shared=True takes the read lock. blocking=False makes one attempt. timeout=None waits for ever.
    As a decorator, ``name`` may be a template filled from the call's bound arguments.
    release_on_commit=True (or a database alias) defers the release to transaction.on_commit.
    """
    return ZkLock(name, shared=shared, timeout=timeout, blocking=blocking, using=using,
                  release_on_commit=release_on_commit)


def lock_path(name: str, using: str = "default") -> str:
    """The lock node of ``name`` for alias ``using``, as other ZooKeeper clients see it."""
    from .conf import alias_config

    return join_path(alias_config(using).namespace, name)


class ZkSemaphore(_BaseHandle):
    """Up to ``max_leases`` holders at once (not reentrant: each acquire takes a lease)."""

    kind: str = Kind.SEMAPHORE

    def __init__(self, name: str, max_leases: int, *, timeout: float | None = None, blocking: bool = True,
                 using: str = "default", release_on_commit: bool | str = False) -> None:
        if not isinstance(max_leases, int) or isinstance(max_leases, bool) or max_leases < 1:
            raise ValueError(f"max_leases must be an integer >= 1, not {max_leases!r}")
        super().__init__(name, timeout=timeout, blocking=blocking, using=using,
                         release_on_commit=release_on_commit)
        self.max_leases = max_leases

    def _clone(self, name: str) -> ZkSemaphore:
        return ZkSemaphore(name, self.max_leases, timeout=self.timeout, blocking=self.blocking, using=self.using,
                           release_on_commit=self.release_on_commit)

    @property
    def path(self) -> str:
        return join_path(connections[self.using].cfg.namespace, self.name)

    def _acquire_hold(self, blocking: bool, deadline: Deadline, grant: _Grant) -> Hold:
        from .recipes import semaphore

        pool = connections[self.using]
        path = join_path(pool.cfg.namespace, self.name)
        while True:
            grant.hold = None
            lease = grant.contender = semaphore.acquire(pool.session, path, self.max_leases, holder.payload(),
                                                        blocking=blocking, deadline=deadline, name=self.name,
                                                        alias=self.using)
            hold = grant.hold = Hold(self.using, self.name, self.kind, lease, None)
            if lease.session.add_hold(hold):
                _long_holds.add(hold, lease.waited)
                return hold
            if deadline.expired():
                raise LockTimeout(f"semaphore {self.name!r} (alias {self.using!r}): session lost while acquiring",
                                  name=self.name)

    def _release_hold(self, hold: Hold, wait: bool) -> None:
        if wait:
            hold.contender.delete(Deadline(hold.session.cfg.connect_timeout))
        else:
            hold.contender.delete_nowait()


def zk_semaphore(name: str, max_leases: int, *, timeout: float | None = None, blocking: bool = True,
                 using: str = "default", release_on_commit: bool | str = False) -> ZkSemaphore:
    """A counting semaphore: at most ``max_leases`` holders of ``name`` at a time, across all processes."""
    return ZkSemaphore(name, max_leases, timeout=timeout, blocking=blocking, using=using,
                       release_on_commit=release_on_commit)


MemberSpec = str | tuple[str, str] | ZkLock


class ZkMultiLock(_Acquirable):
    """Several locks taken as one: all or none, in sorted order, under one overall deadline.

    Members are names (exclusive), ``(name, "shared")`` / ``(name, "exclusive")`` pairs, or ZkLock handles.
    """

    def __init__(self, members: list[MemberSpec] | tuple[MemberSpec, ...], *, timeout: float | None = None,
                 blocking: bool = True, using: str = "default", release_on_commit: bool | str = False) -> None:
        locks: dict[str, ZkLock] = {}
        for spec in members:
            lock = self._member(spec, using)
            if lock.name in locks:
                raise ValueError(f"zk_multi_lock: {lock.name!r} appears twice")
            locks[lock.name] = lock
        if not locks:
            raise ValueError("zk_multi_lock needs at least one name")
        # One global order (sorted names) for every multi-lock: no deadlock between overlapping sets.
        self.locks = [locks[n] for n in sorted(locks)]
        self.timeout = timeout
        self.blocking = blocking
        self.using = using
        self.release_on_commit = release_on_commit
        self.names = [lock.name for lock in self.locks]

    @staticmethod
    def _member(spec: MemberSpec, using: str) -> ZkLock:
        if isinstance(spec, ZkLock):
            return spec
        if isinstance(spec, str):
            return ZkLock(spec, using=using)
        if isinstance(spec, tuple) and len(spec) == 2 and spec[1] in (Kind.SHARED, Kind.EXCLUSIVE):
            return ZkLock(spec[0], shared=spec[1] == Kind.SHARED, using=using)
        raise ValueError(f"zk_multi_lock member {spec!r}: give a name, (name, 'shared'|'exclusive') or a zk_lock")

    def _acquire(self, blocking: bool | None, timeout: float | None, cancel: threading.Event | None = None,
                 at: float | None = None) -> None:
        blocking = self.blocking if blocking is None else blocking
        timeout = self.timeout if timeout is None else timeout
        deadline, once = _deadline(blocking, timeout, cancel, at)
        taken: list[ZkLock] = []
        try:
            for lock in self.locks:
                if deadline.expired():
                    raise LockTimeout(f"multi-lock {self.names!r} (alias {self.using!r}): {lock.name!r} not "
                                      "acquired within the timeout", name=lock.name)
                # timeout=0: one attempt per member; otherwise the members share the overall deadline.
                lock._acquire(blocking, 0 if once else None, cancel, deadline.at)
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise

    def release(self, wait: bool = False) -> None:
        for lock in reversed(self.locks):
            lock.release(wait)

    @property
    def tokens(self) -> dict[str, int | None]:
        return {lock.name: lock.token for lock in self.locks}

    @property
    def is_held(self) -> bool:
        return all(lock.is_held for lock in self.locks)

    def ensure_held(self) -> None:
        for lock in self.locks:
            lock.ensure_held()

    def __enter__(self):
        self._acquire(None, None)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.release_on_commit:
            for lock in reversed(self.locks):
                lock.release_on_commit = self.release_on_commit
                lock._release_after_commit()
        else:
            self.release()

    async def __aenter__(self):
        await _acquire_off_loop(self, None, None)
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await _run_off_loop(self.__exit__, exc_type, exc, tb)

    def __call__(self, func: F) -> F:
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args, **kwargs):
                async with ZkMultiLock([lock._clone(lock.name) for lock in self.locks], timeout=self.timeout, blocking=self.blocking, using=self.using,
                                       release_on_commit=self.release_on_commit):
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with ZkMultiLock([lock._clone(lock.name) for lock in self.locks], timeout=self.timeout,
                             blocking=self.blocking, using=self.using, release_on_commit=self.release_on_commit):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def zk_multi_lock(names: list[MemberSpec] | tuple[MemberSpec, ...], *, timeout: float | None = None,
                  blocking: bool = True, using: str = "default",
                  release_on_commit: bool | str = False) -> ZkMultiLock:
    """Take several locks as one: ``zk_multi_lock(["a", ("b", "shared")], timeout=5)``; ``.tokens`` maps names."""
    return ZkMultiLock(names, timeout=timeout, blocking=blocking, using=using, release_on_commit=release_on_commit)

"""``SingleExecutionTask``: at most one execution per lock key at a time, across every worker and host.

Thin hooks around Celery's ``Task``: ``__call__`` takes the lock just before the body and releases it after,
whatever the outcome; ``apply_async`` validates the key at once and, with ``unique_queued``, de-duplicates
at enqueue time. Options left at None on the class come from ``settings.ZKLOCKS_CELERY`` (see
``zklocks.celery.conf``), read at call time so ``override_settings`` applies.
"""

from __future__ import annotations

import logging
import random
import threading
import types
from dataclasses import dataclass
from typing import Any

from celery import Task
from celery.exceptions import Retry
from celery.utils import uuid

from .. import conf, names, signals
from ..client.pools import connections
from ..exceptions import LockNotAcquired, ZkConfigError, ZkLocksError, ZkUnavailable
from ..handles.locks import ZkLock
from ..handles.stopping import LockLostInterrupt
from ..owners import current_owner
from ..recipes import node_data
from . import conf as celery_conf
from . import keys, unique
from .holder_task import holder_task_id
from .terminate import terminator

log = logging.getLogger("zklocks")

# (alias, lock name) pairs held by executions running on this thread: a nested call of the same key
# (a task calling itself) is contention at once, never a wait for itself.
_running = threading.local()


def _held_here() -> set[tuple[str, str]]:
    try:
        return _running.held
    except AttributeError:
        _running.held = set()
        return _running.held


@dataclass(frozen=True)
class LockOptions:
    lock_timeout: float
    on_locked: str
    on_unavailable: str
    lock_retry_countdown: float
    lock_max_retries: int
    lock_using: str
    unique_queued: bool
    unique_timeout: float
    on_lost: str
    max_hold: float | None


def redelivery_wait(using: str) -> float:
    """How long a dead holder's node may outlive it: the session timeout plus at most one server tick
    (a tick is at most half the minimum session timeout), plus a margin."""
    return 1.5 * connections[using].session().timeout + 1.0


class SingleExecutionTask(Task):
    """A Celery task that runs at most one execution per ``lock_key`` at a time.

    Options (None means: the value from ``settings.ZKLOCKS_CELERY``):

    - ``lock_key``: template over the task's arguments, e.g. ``"sync:{account_id}"``; default: the task name
      plus a digest of the canonical JSON of the bound arguments.
    - ``lock_timeout``: seconds to wait for the lock (0: one attempt).
    - ``on_locked``: "skip" (return None, log, send ``task_skipped``), "retry" (``self.retry``), "raise"
      (``LockNotAcquired``).
    - ``on_unavailable``: "fail" or "retry" when ZooKeeper is unreachable; never treated as contention.
    - ``lock_retry_countdown``, ``lock_max_retries``: for both kinds of retry.
    - ``lock_using``: connection alias.
    - ``unique_queued``, ``unique_timeout``: enqueue-time de-duplication and its stale-marker bound.

    The running execution's lock is ``self.request.zk_lock`` (``token``, ``is_held``, ``ensure_held()``).
    """

    lock_key: str | None = None
    lock_timeout: float | None = None
    on_locked: str | None = None
    on_unavailable: str | None = None
    lock_retry_countdown: float | None = None
    lock_max_retries: int | None = None
    lock_using: str | None = None
    unique_queued: bool | None = None
    unique_timeout: float | None = None
    on_lost: str | None = None
    max_hold: float | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        record_option_problems(cls)

    # -- options and key --

    def lock_options(self) -> LockOptions:
        defaults = celery_conf.task_defaults()
        values = {}
        for attr, key in celery_conf.OPTION_KEYS:
            value = getattr(self, attr)
            if value is None:
                value = defaults[key]
            else:
                why = celery_conf.value_problem(key, value)
                if why is not None:
                    raise ZkConfigError(f"task {self.name!r}: {attr}: {why.split(' ', 1)[1]}")
            values[attr] = value
        return LockOptions(**values)

    def lock_name(self, args: tuple | list | None = None, kwargs: dict | None = None) -> str:
        """The lock name of an execution with these arguments (InvalidLockName naming the task if bad)."""
        return keys.lock_name(self.name, self.run, self.lock_key, args, kwargs)

    # -- enqueue --

    def apply_async(
        self, args=None, kwargs=None, task_id=None, producer=None, link=None, link_error=None, shadow=None, **options
    ):
        name = self.lock_name(args, kwargs)  # a bad key fails here, before anything is queued
        opts = self.lock_options()
        if not opts.unique_queued or self._get_app().conf.task_always_eager:
            return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        task_id = task_id or uuid()
        try:
            owner = unique.claim(opts.lock_using, name, task_id, self.name, opts.unique_timeout)
        except ZkLocksError:
            if task_id != self.request.id:
                raise
            # A retry sent by the running task itself: sending it matters more than the marker.
            log.warning(
                "zklocks: %s[%s]: cannot refresh the queued marker of %r; retrying without it",
                self.name,
                task_id,
                name,
                exc_info=True,
            )
            owner = task_id
        if owner != task_id:
            log.debug("zklocks: %s: %r is already queued or running as %s", self.name, name, owner)
            return self.AsyncResult(owner)
        try:
            return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        except BaseException:
            self._forget_marker(opts, name, task_id)
            raise

    # -- run --

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        opts = self.lock_options()
        request = self.request
        name = self.lock_name(args, kwargs)
        marker = opts.unique_queued and request.id is not None and not request.is_eager
        lock: ZkLock | None = None
        retried = False
        try:
            lock = self._acquire(name, opts, request)
            if lock is None:
                return self._on_contention(name, opts, request)
            if marker:
                self._marker_running(opts, name, request.id)
            return self._run_holding(lock, opts, name, args, kwargs)
        except Retry:
            retried = True  # the retry message is queued: its marker stays
            raise
        finally:
            if marker and not retried:
                self._forget_marker(opts, name, request.id)
            if lock is not None:
                # Wait for the server's answer (bounded by CONNECT_TIMEOUT) before Celery publishes our result
                # or the next task of a chain: a follower that runs on another session must find the lock free.
                lock.release(wait=True)

    def _run_holding(self, lock: ZkLock, opts: LockOptions, name: str, args: tuple, kwargs: dict) -> Any:
        request = self.request
        previous = getattr(request, "zk_lock", None)
        request.zk_lock = lock
        held = _held_here()
        key = (opts.lock_using, name)
        held.add(key)
        # Locks the body takes itself also record this task as their holder (shown by the admin).
        token = node_data.current_task.set((request.id, self.name))
        owner = current_owner()
        try:
            return super().__call__(*args, **kwargs)
        finally:
            # Before anything else: no stop of on_lost="cancel" may land in this clean-up (handles/base.py).
            while lock._stops:
                try:
                    lock._disarm_top(owner)
                    break
                except LockLostInterrupt:
                    continue
            node_data.current_task.reset(token)
            held.discard(key)
            request.zk_lock = previous

    def _acquire(self, name: str, opts: LockOptions, request) -> ZkLock | None:
        lock = ZkLock(name, using=opts.lock_using, reentrant=False, max_hold=opts.max_hold)
        lock.on_lost = opts.on_lost
        if opts.on_lost == "terminate":
            lock.terminate = terminator(self, request, lock, name)
        wait = opts.lock_timeout
        token = node_data.current_task.set((request.id, self.name))
        got = False
        try:
            try:
                try:
                    got = lock.acquire(blocking=wait > 0, timeout=wait if wait > 0 else None)
                    if not got and self._own_previous_attempt_holds(name, opts, request):
                        # A redelivery (acks_late) or a retry of this very task: the holder is its earlier
                        # attempt, which is ending, or dead with a session that lives on. Wait for that
                        # session's bound.
                        log.info(
                            "zklocks: %s[%s]: lock %r is held by an earlier attempt of this task; waiting",
                            self.name,
                            request.id,
                            name,
                        )
                        got = lock.acquire(blocking=True, timeout=redelivery_wait(opts.lock_using))
                except ZkUnavailable as exc:
                    # An outage is never contention: the task is retried or fails with ZkUnavailable, never skipped.
                    if opts.on_unavailable == "retry":
                        log.warning("zklocks: %s[%s]: ZooKeeper unavailable (%s); retrying", self.name, request.id, exc)
                        raise self._retry(exc, opts) from exc
                    log.warning(
                        "zklocks: %s[%s]: ZooKeeper unavailable (%s); the task fails (on_unavailable='fail')",
                        self.name,
                        request.id,
                        exc,
                    )
                    raise
            finally:
                node_data.current_task.reset(token)
        except BaseException:
            # e.g. the soft time limit (SoftTimeLimitExceeded) arriving right after the grant: give the lock back.
            if got:
                lock.release()
            raise
        return lock if got else None

    def _own_previous_attempt_holds(self, name: str, opts: LockOptions, request) -> bool:
        if request.id is None or (opts.lock_using, name) in _held_here():
            return False  # a call from inside the holding execution is plain contention
        return holder_task_id(opts.lock_using, name) == request.id

    def _on_contention(self, name: str, opts: LockOptions, request) -> None:
        if opts.on_locked == "skip":
            log.info("zklocks: task %s[%s] skipped: lock %r is held by another execution", self.name, request.id, name)
            signals.send_async(
                signals.task_skipped, sender=self, task=self, name=name, alias=opts.lock_using, task_id=request.id
            )
            return
        exc = LockNotAcquired(f"task {self.name}[{request.id}]: lock {name!r} is held by another execution", name=name)
        if opts.on_locked == "retry":
            raise self._retry(exc, opts)
        raise exc

    def _retry(self, exc: Exception, opts: LockOptions) -> Retry:
        # Jitter spreads retries that met the same holder, so they do not all come back at once.
        countdown = opts.lock_retry_countdown * random.uniform(0.75, 1.25)  # noqa: S311 jitter, no secret
        return self.retry(exc=exc, countdown=countdown, max_retries=opts.lock_max_retries)

    # -- queued markers (unique_queued) --

    def _marker_running(self, opts: LockOptions, name: str, task_id: str) -> None:
        try:
            unique.mark_running(opts.lock_using, name, task_id, self.name, opts.unique_timeout)
        except ZkLocksError:
            log.warning(
                "zklocks: %s[%s]: cannot mark the queued marker of %r running", self.name, task_id, name, exc_info=True
            )

    def _forget_marker(self, opts: LockOptions, name: str, task_id: str) -> None:
        try:
            unique.release(opts.lock_using, name, task_id)
        except ZkLocksError:
            log.warning(
                "zklocks: %s[%s]: cannot remove the queued marker of %r; it goes stale within unique_timeout=%gs",
                self.name,
                task_id,
                name,
                opts.unique_timeout,
                exc_info=True,
            )


def record_option_problems(cls: type) -> None:
    """Record option problems of a task class for ``manage.py check`` (zklocks.E021); never raise here."""
    where = getattr(cls, "name", None) or f"{cls.__module__}.{cls.__qualname__}"
    for attr, key in celery_conf.OPTION_KEYS:
        value = cls.__dict__.get(attr)
        if value is not None:
            why = celery_conf.value_problem(key, value)
            if why is not None:
                celery_conf.declared_task_problems.append((str(where), f"{attr}: {why.split(' ', 1)[1]}"))
    if cls.__dict__.get("_decorated"):
        _declare_unknown_options(cls, str(where))
    using = cls.__dict__.get("lock_using")
    if isinstance(using, str) and using:
        conf.declare_alias(using, f"task {where}")
    template = cls.__dict__.get("lock_key")
    if template is None:
        return
    if not isinstance(template, str) or not template:
        celery_conf.declared_task_problems.append((str(where), f"lock_key must be a non-empty str, not {template!r}"))
        return
    try:
        names.template_fields(template)
    except ValueError as exc:
        celery_conf.declared_task_problems.append((str(where), f"lock_key {template!r} {exc}"))
        return
    run = cls.__dict__.get("run")
    if run is None:
        return
    # The arguments as the run-time error lists them: a bound task's ``self`` is not one of them.
    func = run.__func__ if isinstance(run, (staticmethod, classmethod)) else types.MethodType(run, cls)
    missing = names.missing_fields(template, func)
    if missing:
        arguments = ", ".join(names.signature(func).parameters) or "none"
        celery_conf.declared_task_problems.append(
            (
                str(where),
                f"lock_key {template!r} refers to {', '.join(missing)}, which is not an argument of the task "
                f"(arguments: {arguments})",
            )
        )


def _declare_unknown_options(cls: type, where: str) -> None:
    """W021: an @app.task option that no base class defines and Celery does not read (``lock_timout=5``)."""
    bases = cls.__mro__[1:]
    known = sorted({a for b in bases for a in vars(b) if not a.startswith("_")} | celery_conf.CELERY_DECORATOR_OPTIONS)
    celery_set = {"app", "name", "run", *celery_conf.CELERY_DECORATOR_OPTIONS}
    celery_set.update(attr for attr, _ in getattr(cls, "from_config", ()))  # Task.bind() sets these from the app
    for attr, value in cls.__dict__.items():
        if attr.startswith("_") or attr in celery_set:
            continue
        if not any(hasattr(b, attr) for b in bases):
            celery_conf.declared_task_warnings.append(celery_conf.unknown_option(where, attr, value, known))

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Task
from celery.exceptions import Retry
from celery.utils import uuid

from .. import signals
from ..client.pools import connections
from ..exceptions import LockNotAcquired, ZkConfigError, ZkLocksError, ZkUnavailable
from ..execution import keys, unique
from ..execution.holder_task import holder_task_id
from ..handles.base import no_settling
from ..handles.locks import ZkLock
from ..handles.semaphores import ZkSemaphore
from ..handles.stopping import lost_after_body
from ..owners import current_owner
from ..recipes import layout, node_data
from . import conf as celery_conf
from . import markers, policies
from .options import record_option_problems
from .policies import retry_delay
from .terminate import terminator

__all__ = ["SingleExecutionTask", "LockOptions", "record_option_problems", "redelivery_wait", "retry_delay"]

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
    share_running: bool
    debounce: float | None
    throttle: float | None
    lock_concurrency: int
    keep_lock_on_retry: bool
    retry_lock_grace: float


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
    - ``share_running``: a call while an execution of the key runs returns that execution's ``AsyncResult``.
    - ``debounce``: seconds; each call replaces the queued one of its key (sent with this countdown), and only
      the latest runs: an earlier one that reaches a worker is a no-op reported "debounced".
    - ``throttle``: seconds; at most one start per window per key (ZooKeeper's clock); later ones are no-ops.
    - ``lock_concurrency``: up to N executions per key at once, on a ``zk_semaphore``.
    - ``keep_lock_on_retry``, ``retry_lock_grace``: after ``self.retry()`` no other execution of the key starts
      before the retry, for at most its countdown plus the grace.

    Every outcome other than a plain run is reported through ``signals.task_outcome``.

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
    share_running: bool | None = None
    debounce: float | None = None
    throttle: float | None = None
    lock_concurrency: int | None = None
    keep_lock_on_retry: bool | None = None
    retry_lock_grace: float | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        record_option_problems(cls)

    # -- options and key --

    def lock_options(self) -> LockOptions:
        defaults = celery_conf.task_defaults()
        values, by_key = {}, {}
        for attr, key in celery_conf.OPTION_KEYS:
            value = getattr(self, attr)
            if value is None:
                value = defaults[key]
            else:
                why = celery_conf.value_problem(key, value)
                if why is not None:
                    raise ZkConfigError(f"task {self.name!r}: {attr}: {why.split(' ', 1)[1]}")
            values[attr] = by_key[key] = value
        for check_id, message, _ in celery_conf.policy_problems(by_key):
            if check_id.startswith("zklocks.E"):
                raise ZkConfigError(f"task {self.name!r}: {message}")
        return LockOptions(**values)

    def report(self, outcome: str, name: str, opts: LockOptions, task_id: str | None) -> None:
        """The task_deduplicated signal and zklocks_task_dedup_total for one outcome."""
        signals.task_outcome(self, self.name, outcome, name, opts.lock_using, task_id)

    def lock_name(self, args: tuple | list | None = None, kwargs: dict | None = None) -> str:
        """The lock name of an execution with these arguments (InvalidLockName naming the task if bad)."""
        return keys.lock_name(self.name, self.run, self.lock_key, args, kwargs)

    # -- enqueue --

    def apply_async(
        self, args=None, kwargs=None, task_id=None, producer=None, link=None, link_error=None, shadow=None, **options
    ):
        name = self.lock_name(args, kwargs)  # a bad key fails here, before anything is queued
        opts = self.lock_options()
        if self._get_app().conf.task_always_eager:
            return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        resend = task_id is not None and task_id == self.request.id  # a retry sent by the running task itself
        call = keys.call_digest(self.name, self.run, args, kwargs)
        if opts.share_running and not resend:
            running = holder_task_id(opts.lock_using, name, same_call=call)  # only an execution of this very call
            if running is not None:
                log.debug("zklocks: %s: %r is running as %s; sharing it", self.name, name, running)
                self.report("shared", name, opts, running)
                return self.AsyncResult(running)
        if opts.debounce is not None and not resend:
            task_id = task_id or uuid()
            previous = policies.make_latest(opts.lock_using, name, task_id, self.name)
            if opts.debounce > 0 and "countdown" not in options and "eta" not in options:
                options["countdown"] = opts.debounce
            try:
                return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
            except BaseException:
                policies.undo_latest(opts.lock_using, name, task_id, previous)
                raise
        if not opts.unique_queued:
            return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        task_id = task_id or uuid()
        try:
            owner = unique.claim(opts.lock_using, name, task_id, self.name, opts.unique_timeout, call)
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
        if owner is None:
            # Another call (another task, or other arguments) has the key's marker: nothing to share with it.
            return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        if owner != task_id:
            log.debug("zklocks: %s: %r is already queued or running as %s", self.name, name, owner)
            self.report("shared", name, opts, owner)
            return self.AsyncResult(owner)
        try:
            return super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow, **options)
        except BaseException:
            markers.forget_marker(self.name, opts, name, task_id)
            raise

    # -- run --

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        opts = self.lock_options()
        request = self.request
        name = self.lock_name(args, kwargs)
        queued = request.id is not None and not request.is_eager  # sent through the broker: policies apply
        marker = opts.unique_queued and queued
        debounced = opts.debounce is not None and queued
        if debounced and self._policy_read(opts, request, policies.latest_task, opts.lock_using, name) != request.id:
            log.info("zklocks: task %s[%s] is a no-op: a later call of %r replaced it", self.name, request.id, name)
            self.report("debounced", name, opts, request.id)
            return None
        lock: ZkLock | ZkSemaphore | None = None
        retried = in_body = False
        try:
            lock = self._acquire(name, opts, request, keys.call_digest(self.name, self.run, args, kwargs))
            if lock is None:
                return self._on_contention(name, opts, request)
            if queued and opts.keep_lock_on_retry:
                waited_for = self._policy_read(
                    opts, request, policies.reserved_for_other, opts.lock_using, name, request.id
                )
                if waited_for is not None:
                    lock.release(wait=True)
                    lock = None
                    log.info(
                        "zklocks: %s[%s]: lock %r is kept for the retry of %s", self.name, request.id, name, waited_for
                    )
                    return self._on_contention(name, opts, request)
            if queued and opts.throttle is not None:
                if not self._policy_read(
                    opts, request, policies.start_in_window, opts.lock_using, name, opts.throttle, request.id, self.name
                ):
                    log.info(
                        "zklocks: task %s[%s] throttled: %r started less than %gs ago",
                        self.name,
                        request.id,
                        name,
                        opts.throttle,
                    )
                    self.report("throttled", name, opts, request.id)
                    return None
            if marker:
                markers.mark_running(self.name, opts, name, request.id)
            in_body = True
            return self._run_holding(lock, opts, name, args, kwargs)
        except Retry as exc:
            retried = True  # the retry message is queued: its marker stays
            if in_body and lock is not None and queued and opts.keep_lock_on_retry:
                # Reserved before the release below: no other execution starts between the tries.
                ttl = retry_delay(exc) + opts.retry_lock_grace
                try:
                    policies.reserve_for_retry(opts.lock_using, name, request.id, self.name, ttl)
                except ZkLocksError:
                    log.warning(
                        "zklocks: %s[%s]: cannot keep %r for the retry; another execution may start first",
                        self.name,
                        request.id,
                        name,
                        exc_info=True,
                    )
            raise
        finally:
            try:  # a soft time limit that lands while the markers go (round trips) still releases the lock
                if marker and not retried:
                    markers.forget_marker(self.name, opts, name, request.id)
                if debounced and not retried:
                    markers.forget_latest(self.name, opts, name, request.id)
            finally:
                if lock is not None:
                    # Wait for the server's answer (bounded by CONNECT_TIMEOUT) before Celery publishes our result
                    # or the next task of a chain: a follower that runs on another session must find the lock free.
                    lock.release(wait=True)

    def _run_holding(self, lock: ZkLock | ZkSemaphore, opts: LockOptions, name: str, args: tuple, kwargs: dict) -> Any:
        request = self.request
        previous = getattr(request, "zk_lock", None)
        previous_task = node_data.current_task.get()
        held = _held_here()
        key = (opts.lock_using, name)
        owner = current_owner()
        stoppers: list = []
        try:
            # Inside the try: a soft time limit's exception can land right after any of these calls returns, and
            # the thread's records must not outlive the task (a stale key would make its retry count as contention).
            request.zk_lock = lock
            held.add(key)
            # Locks the body takes itself also record this task as their holder (shown by the admin).
            node_data.current_task.set((request.id, self.name))
            result = super().__call__(*args, **kwargs)
        finally:
            # Before anything else: no checkpoint of on_lost="cancel" raises in this clean-up (handles/stopping.py).
            if lock._stops:
                stoppers = lock._disarm_top(owner)
            node_data.current_task.set(previous_task)
            held.discard(key)
            request.zk_lock = previous
        lost = lost_after_body(stoppers)
        if lost is not None:
            raise lost  # the body ran on after the loss: the task fails, as a with statement would
        return result

    def _acquire(self, name: str, opts: LockOptions, request, call: str) -> ZkLock | ZkSemaphore | None:
        lock: ZkLock | ZkSemaphore
        if opts.lock_concurrency > 1:
            lock = ZkSemaphore(name, opts.lock_concurrency, using=opts.lock_using, max_hold=opts.max_hold)
        else:
            lock = ZkLock(name, using=opts.lock_using, reentrant=False, max_hold=opts.max_hold)
        lock.on_lost = opts.on_lost
        if opts.on_lost == "terminate":
            lock.terminate = terminator(self, request, lock, name)
        wait = opts.lock_timeout
        previous_task, previous_call = node_data.current_task.get(), node_data.current_call.get()
        got = False
        try:
            try:
                try:
                    # Set inside the try, restored by value (a soft time limit can land right after a set()).
                    node_data.current_task.set((request.id, self.name))
                    node_data.current_call.set(call)  # in our node's data: who may share this execution
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
                node_data.current_call.set(previous_call)
                node_data.current_task.set(previous_task)
        except BaseException:
            # e.g. the soft time limit (SoftTimeLimitExceeded) arriving right after the grant: give the lock back,
            # without waiting for the answer: the task is being stopped.
            if got:
                with no_settling():
                    lock.release()
            raise
        return lock if got else None

    def _policy_read(self, opts: LockOptions, request, read: Callable[..., Any], *args: Any) -> Any:
        """A policy's ZooKeeper call: an outage fails or retries the task (on_unavailable), as the acquire does."""
        try:
            return read(*args)
        except ZkUnavailable as exc:
            if opts.on_unavailable == "retry":
                log.warning("zklocks: %s[%s]: ZooKeeper unavailable (%s); retrying", self.name, request.id, exc)
                raise self._retry(exc, opts) from exc
            raise

    def _own_previous_attempt_holds(self, name: str, opts: LockOptions, request) -> bool:
        if request.id is None or (opts.lock_using, name) in _held_here():
            return False  # a call from inside the holding execution is plain contention
        if holder_task_id(opts.lock_using, name) == request.id:
            return True
        # keep_lock_on_retry: the lock waits for this retry; another execution holds it only to give it back.
        if not opts.keep_lock_on_retry:
            return False
        reserved = policies.read(opts.lock_using, name, layout.RETRY)
        return reserved is not None and reserved.get("task_id") == request.id

    def _on_contention(self, name: str, opts: LockOptions, request) -> None:
        if opts.on_locked == "skip":
            log.info("zklocks: task %s[%s] skipped: lock %r is held by another execution", self.name, request.id, name)
            signals.send_async(
                signals.task_skipped, sender=self, task=self, name=name, alias=opts.lock_using, task_id=request.id
            )
            self.report("skipped", name, opts, request.id)
            return
        exc = LockNotAcquired(f"task {self.name}[{request.id}]: lock {name!r} is held by another execution", name=name)
        if opts.on_locked == "retry":
            try:
                raise self._retry(exc, opts)
            except Retry:
                self.report("retried", name, opts, request.id)
                raise
            except LockNotAcquired:  # the retries ran out
                self.report("raised", name, opts, request.id)
                raise
        self.report("raised", name, opts, request.id)
        raise exc

    def _retry(self, exc: Exception, opts: LockOptions) -> Retry:
        # Jitter spreads retries that met the same holder, so they do not all come back at once.
        countdown = opts.lock_retry_countdown * random.uniform(0.75, 1.25)  # noqa: S311 jitter, no secret
        return self.retry(exc=exc, countdown=countdown, max_retries=opts.lock_max_retries)

"""Run time: the task function runs under its key's lock, with the lock in its context.

The worker (ImmediateBackend, ``db_worker``) sends ``task_started`` with the TaskResult just before it calls the
task; the receiver keeps that result for the ``call()`` that follows on the same thread, so the lock's holder data
and the queued record name the result id even for tasks that take no context.
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import random
from typing import Any

from django.utils import timezone

from .. import signals
from ..exceptions import LockNotAcquired, ZkLocksError
from ..handles.locks import ZkLock
from ..recipes import node_data
from . import markers
from .compat import Task, TaskResult, task_started
from .keys import call_digest, lock_name
from .task import LockedTaskContext, SingleExecutionTask, _current_lock

log = logging.getLogger("zklocks")

_starting: contextvars.ContextVar[Any] = contextvars.ContextVar("zklocks_task_starting", default=None)
# (lock name, enqueue lock) while a producer on this thread runs the wrapped backend's enqueue: an ImmediateBackend
# runs the task inside it, and the run hands the enqueue lock back as soon as its record says "running".
enqueuing: contextvars.ContextVar[tuple[str, ZkLock] | None] = contextvars.ContextVar(
    "zklocks_task_enqueuing", default=None
)


def _on_started(sender: Any, task_result: Any = None, **kwargs: Any) -> None:
    if task_result is not None and isinstance(task_result.task, SingleExecutionTask):
        _starting.set(task_result)


task_started.connect(_on_started, dispatch_uid="zklocks.tasks.runner")


def _result_of(task: SingleExecutionTask, args: tuple) -> TaskResult | None:
    """The TaskResult this call runs for (None when the function is called directly)."""
    if task.takes_context and args and hasattr(args[0], "task_result"):
        return args[0].task_result
    result = _starting.get()
    _starting.set(None)
    if result is not None and result.task.module_path == task.module_path:
        return result
    return None


def run_single(task: SingleExecutionTask, using: str, args: tuple, kwargs: dict) -> Any:
    result = _result_of(task, args)
    result_id = str(result.id) if result is not None else None
    call_args = args[1:] if task.takes_context else args
    name = lock_name(task, call_args, kwargs)
    unique = bool(task.option("unique_queued")) and result_id is not None
    lock = ZkLock(name, using=using, reentrant=False)
    wait = float(task.option("lock_timeout"))
    got = False
    try:  # one try from the acquire on: an exception (a signal handler's) after it still releases
        previous_task = node_data.current_task.get()
        try:
            # Set inside the try, restored by value: a signal handler's exception can land right after a set().
            if result_id:
                node_data.current_task.set((result_id, task.module_path))
            got = lock.acquire(blocking=wait > 0, timeout=wait if wait > 0 else None)
        finally:
            node_data.current_task.set(previous_task)
        call = call_digest(task, call_args, kwargs) if unique else None
        _hand_over_record(task, using, name, result_id, running=got and unique, call=call)
        if not got:
            return _on_locked(task, using, name, result_id, unique, call_args, kwargs)
        if task.takes_context:
            args = (LockedTaskContext(task_result=args[0].task_result, lock=lock), *call_args)
        previous_lock = _current_lock.get()
        try:
            _current_lock.set(lock)
            return Task.call(task, *args, **kwargs)
        finally:
            _current_lock.set(previous_lock)
    finally:
        try:  # an exception while the record goes (a round trip) still releases the lock
            if unique and got:
                _forget(task, using, name, result_id)
        finally:
            if got:
                # Wait for the server's answer before the worker records the result: a follower enqueued on that
                # news must find the lock free.
                lock.release(wait=True)


def _hand_over_record(
    task: SingleExecutionTask, using: str, name: str, result_id: str | None, running: bool, call: str | None = None
) -> None:
    claim = enqueuing.get()
    if claim is not None and claim[0] == name:
        # Our own producer (ImmediateBackend) still holds the enqueue lock: write the record, then let it go.
        try:
            enqueuing.set(None)
            if running and result_id is not None:
                ttl = float(task.option("unique_timeout"))
                markers.write(using, name, result_id, task.module_path, "running", ttl, call)
        finally:
            claim[1].release()
    elif running and result_id is not None:
        try:
            markers.mark_running(using, name, result_id, task.module_path, float(task.option("unique_timeout")))
        except ZkLocksError:
            log.warning("zklocks: %s[%s]: cannot mark %r running", task.module_path, result_id, name, exc_info=True)


def _forget(task: SingleExecutionTask, using: str, name: str, result_id: str | None) -> None:
    if result_id is None:
        return
    try:
        markers.release(using, name, result_id)
    except ZkLocksError:
        log.warning(
            "zklocks: %s[%s]: cannot remove the queued record of %r; it is checked against the result's status",
            task.module_path,
            result_id,
            name,
            exc_info=True,
        )


def _on_locked(
    task: SingleExecutionTask, using: str, name: str, result_id: str | None, unique: bool, args: tuple, kwargs: dict
) -> None:
    if unique:
        _forget(task, using, name, result_id)  # this result will not run: a new enqueue may queue again
    on_locked = task.option("on_locked")
    if on_locked == "retry":
        countdown = float(task.option("lock_retry_countdown")) * random.uniform(0.75, 1.25)  # noqa: S311 jitter, not a secret
        later = task.using(run_after=timezone.now() + datetime.timedelta(seconds=countdown))
        again = later.enqueue(*args, **kwargs)
        log.info(
            "zklocks: task %s[%s]: lock %r is held; enqueued again as %s", task.module_path, result_id, name, again.id
        )
        signals.task_outcome(task, task.module_path, "retried", name, using, result_id)
        return
    if on_locked == "raise":
        signals.task_outcome(task, task.module_path, "raised", name, using, result_id)
        raise LockNotAcquired(
            f"task {task.module_path}[{result_id}]: lock {name!r} is held by another execution", name=name
        )
    log.info("zklocks: task %s[%s] skipped: lock %r is held by another execution", task.module_path, result_id, name)
    signals.task_outcome(task, task.module_path, "skipped", name, using, result_id)

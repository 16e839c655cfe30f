"""``SingleExecutionBackend``: wraps any task backend of Django's tasks framework with single execution.

The instance is of a class made per wrapped backend, a subclass of both, so the wrapped backend's own code (its
``enqueue``, ``get_result``, its ``db_worker``'s ``isinstance`` check) sees its own kind and works under the same
alias. See docs/tasks.md, "Configuration".
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from django.utils.module_loading import import_string

from .. import conf, signals
from ..client.pools import connections
from ..exceptions import ZkConfigError
from ..execution.holder_task import holder_task_id
from ..execution.unique import within_ttl
from ..handles.locks import ZkLock
from . import markers, options, runner
from .compat import BaseTaskBackend, InvalidTask, TaskResult, TaskResultDoesNotExist, TaskResultStatus
from .keys import call_digest, lock_name
from .task import SingleExecutionTask

log = logging.getLogger("zklocks")

ENQUEUE_WAIT = 30.0  # seconds a producer waits for another producer of the same key to finish its enqueue
# What _live_result says of a live record that another call made (another task, other arguments).
_ANOTHER_CALL = object()


@functools.cache
def _wrapping(cls: type, inner: type) -> type:
    return type(cls)(f"SingleExecution{inner.__name__}", (cls, inner), {"__module__": cls.__module__})


class SingleExecutionBackend(BaseTaskBackend):
    """A task backend that runs each task key once at a time and de-duplicates queued tasks (``unique_queued``)."""

    zklocks_single_execution = True
    task_class = SingleExecutionTask

    def __new__(cls, alias: str, params: dict) -> Any:
        if cls is not SingleExecutionBackend:
            return super().__new__(cls)
        raw = params.get("OPTIONS", {})
        path = raw.get("BACKEND") if isinstance(raw, dict) else None
        if not isinstance(path, str) or options.inner_backend_problem(path) is not None:
            return super().__new__(cls)  # misconfigured: manage.py check says why (zklocks.E110)
        return super().__new__(_wrapping(cls, import_string(path)))

    def __init__(self, alias: str, params: dict) -> None:
        raw = params.get("OPTIONS", {})
        self.config_problem = None
        if type(self) is SingleExecutionBackend:
            path = raw.get("BACKEND") if isinstance(raw, dict) else None
            self.config_problem = f"TASKS[{alias!r}]: {options.inner_backend_problem(path)} (see manage.py check)"
            super().__init__(alias, params)
            self.using = "default"
            return
        inner = {**params, "BACKEND": raw["BACKEND"], "OPTIONS": raw.get("OPTIONS", {})}
        if "QUEUES" in raw:
            inner["QUEUES"] = raw["QUEUES"]
        super().__init__(alias, inner)
        self.using = raw.get("USING", "default")

    # -- definition --

    def validate_task(self, task: Any) -> None:
        if self.config_problem:
            raise InvalidTask(self.config_problem)
        super().validate_task(task)
        if not isinstance(task, SingleExecutionTask):
            return
        where = task.module_path
        values = {attr: getattr(task, attr) for attr, _ in options.TASK_OPTIONS}
        problems = options.task_problems(
            values, task.lock_key, task.func, task.takes_context, bool(self.supports_defer)
        )
        if problems:
            options.declared_task_problems.extend((where, p) for p in problems)
            raise InvalidTask(f"task {where}: {'; '.join(problems)}")
        if task.lock_using:
            conf.declare_alias(task.lock_using, f"task {where}")

    def using_for(self, task: SingleExecutionTask) -> str:
        return task.lock_using or self.using

    # -- run --

    def run_single(self, task: SingleExecutionTask, args: tuple, kwargs: dict) -> Any:
        return runner.run_single(task, self.using_for(task), args, kwargs)

    # -- enqueue --

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        if self.config_problem:
            raise ZkConfigError(self.config_problem)
        if not isinstance(task, SingleExecutionTask) or not task.option("unique_queued"):
            return super().enqueue(task, args, kwargs)
        using = self.using_for(task)
        name = lock_name(task, args, kwargs)  # a bad key fails here, before anything is queued
        gate = ZkLock(markers.enqueue_lock_name(name), using=using, reentrant=False)
        # The claim and the gate inside the try: an exception (a signal handler's) at any point lets both go.
        claim = None
        try:
            claim = runner.enqueuing.set((name, gate))
            gate.acquire(timeout=ENQUEUE_WAIT)
            call = call_digest(task, args, kwargs)
            existing = self._live_result(task, using, name, args, kwargs, call)
            if existing is _ANOTHER_CALL:
                # The key's live record is another call's (another task, other arguments): nothing to share, and
                # its record stays; ours is queued without one, and a run inside the enqueue (ImmediateBackend)
                # must not take that record over: the enqueue lock goes now.
                runner.enqueuing.set(None)
                gate.release()
                return super().enqueue(task, args, kwargs)
            if existing is not None:
                log.debug("zklocks: %s: %r is already queued or running as %r", task.module_path, name, existing.id)
                signals.task_outcome(task, task.module_path, "shared", name, using, str(existing.id))
                return existing
            result: Any = super().enqueue(task, args, kwargs)
            if runner.enqueuing.get() is not None and not result.is_finished:
                ttl = float(task.option("unique_timeout"))
                markers.write(using, name, str(result.id), task.module_path, "queued", ttl, call)
            return result
        finally:
            try:
                if claim is not None:
                    runner.enqueuing.reset(claim)
                elif (current := runner.enqueuing.get()) is not None and current[1] is gate:
                    runner.enqueuing.set(None)  # set, but interrupted before ``claim`` had it
            finally:
                # Unless let go already (the other call's branch, or a run inside the enqueue: ImmediateBackend).
                # The handle is this call's own and not re-entrant: what it holds, it holds for this enqueue.
                if gate._holds_now():
                    gate.release()

    def _live_result(self, task: SingleExecutionTask, using: str, name: str, args: Any, kwargs: Any, call: str) -> Any:
        """The result of the live task recorded for ``name``; None (and the stale record removed) if none is;
        ``_ANOTHER_CALL`` if the live one is not this call (``call``, keys.call_digest)."""
        found = markers.read(using, name)
        if found is None:
            return None
        record, stat = found
        task_id = record.get("task_id")
        live = False
        result: Any = None
        if isinstance(task_id, str):
            known, result = self._get(task_id)
            if record.get("state") == "running":
                live = holder_task_id(using, name) == task_id  # the worker's session proves it runs
            elif result is not None and result.status == TaskResultStatus.READY:
                live = True  # really waiting in the queue
            elif not known or (result is not None and result.status == TaskResultStatus.RUNNING):
                # Unverifiable, or taken by a worker that has not marked the record yet: the record's age bounds it.
                ttl = record.get("ttl")
                live = within_ttl(connections[using], ttl, stat)
        if not live:
            log.info("zklocks: removing the stale queued record of %r (task %r)", name, task_id)
            markers.remove(using, name, stat.version)
            return None
        if record.get("call") != call:  # the digest covers the task's name (which the record clips) too
            return _ANOTHER_CALL
        return result if result is not None else self._placeholder(task, str(task_id), record, args, kwargs)

    def _get(self, result_id: str) -> tuple[bool, TaskResult | None]:
        """(whether the backend can tell, the result if it has one)."""
        try:
            return True, self.get_result(result_id)
        except TaskResultDoesNotExist:
            return True, None  # gone from the store: nothing is queued under it
        except NotImplementedError:
            return False, None

    def _placeholder(self, task: SingleExecutionTask, task_id: str, record: dict, args: Any, kwargs: Any) -> Any:
        """A backend that cannot look results up: a result with the live task's id and its recorded state."""
        status = TaskResultStatus.RUNNING if record.get("state") == "running" else TaskResultStatus.READY
        return TaskResult(
            task=task,
            id=task_id,
            status=status,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

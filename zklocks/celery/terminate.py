"""``on_lost="terminate"`` for SingleExecutionTask: the worker process that runs the task ends before the lease
ends, and the task is recorded as failed with LockLost. The steps, prefork and solo: docs/lost.md#celery-terminate
and docs/celery.md, "When the lock is lost".

Before ``os._exit``, the processes the task started (found by parent pid in ``/proc``) are stopped, then killed: a
child of a process that has ended would go on working. The process stores its own failure first (a solo worker has
no parent to record anything); :func:`restore_lock_lost` turns a prefork parent's WorkerLostError back into LockLost.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from celery import signals as celery_signals
from celery.backends.base import BaseKeyValueStoreBackend
from celery.exceptions import WorkerLostError

from ..client import clock
from ..exceptions import LockLost

# The exit status of a worker process ended by on_lost="terminate" (billiard reports "exitcode 86").
TERMINATE_EXIT = 86
# Bounds of the store when no lease deadline presses (max_hold, a force-release).
STORE_LIMIT = 2.0


def lost_message(name: str, reason: str | None, pid: int) -> str:
    return f"lock {name!r} was lost ({reason}); on_lost='terminate' ended worker process {pid}"


def _note_path(task_id: str) -> str:
    """Where a child leaves its message for its parent (same host, same user): named by a digest of the id."""
    digest = hashlib.sha256(task_id.encode()).hexdigest()[:32]
    return os.path.join(tempfile.gettempdir(), f"zklocks-terminated-{digest}")


def _leave_note(task_id: str, message: str) -> None:
    try:
        fd = os.open(_note_path(task_id), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, message.encode(errors="replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def _take_note(task_id: str) -> str | None:
    path = _note_path(task_id)
    try:
        with open(path, encoding="utf-8", errors="replace") as note:
            text = note.read(2000)
        os.unlink(path)
        return text
    except OSError:
        return None


def terminator(task: Any, request: Any, lock: Any, name: str) -> Callable[[Any], None]:
    """What the stopper of one execution calls to end its process (runs on the worker thread)."""
    task_id = getattr(request, "id", None)
    if task_id is not None and not getattr(request, "is_eager", False):
        _warm(task.backend, task_id)

    def terminate(stopper: Any) -> None:
        # The task's own thread still runs and takes the GIL for 5 ms at a time: each answer the store waits for
        # would wait that long again. The process is ending; let the store have the GIL at once.
        sys.setswitchinterval(0.0001)
        exc = LockLost(lost_message(name, stopper.reason, os.getpid()), name=name, reason=stopper.reason)
        # Leave 50 ms before the lease's end for the exit itself.
        left = STORE_LIMIT if stopper.lease_end is None else stopper.lease_end - clock.now() - 0.05
        if stopper.reason == "max_hold":
            left = STORE_LIMIT  # the lease is fine: the cap is what ends the hold
        if task_id is not None and not getattr(request, "is_eager", False):
            if os.getpid() != _main_pid:  # a prefork child: its parent records the loss again (restore_lock_lost)
                _leave_note(task_id, str(exc))
            store = threading.Thread(target=_store, args=(task, task_id, exc, request), daemon=True)
            began = clock.now()
            store.start()
            store.join(max(0.0, left))
            outcome = "NOT stored" if store.is_alive() else "stored"
            stored = f"; failure {outcome} in {1000 * (clock.now() - began):.0f} ms"
        else:
            stored = ""
        if stopper.reason == "max_hold" and stopper.hold.session.connected:
            try:
                lock._release_hold(stopper.hold, wait=True)
            except BaseException:  # noqa: BLE001, S110 - the process ends either way; the session takes the node
                pass
        ahead = (
            ""
            if stopper.lease_end is None
            else f", {1000 * (stopper.lease_end - clock.now()):.0f} ms before the lease's end"
        )
        killed = end_descendants()
        ended = f"; {killed} process(es) it started killed" if killed else ""
        os.write(2, f"zklocks: {exc}{ahead}{stored}{ended}\n".encode(errors="replace"))
        os._exit(TERMINATE_EXIT)

    return terminate


def _children_by_parent() -> dict[int, list[int]]:
    """Every process of the host by parent pid, from /proc (Linux); empty where there is no /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ')'
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def end_descendants() -> int:
    """Stop, then kill, every process below this one. Stopped first, round by round: a process killed before its
    own children were found would leave them to init, still at work. How many were killed."""
    me = os.getpid()
    found: set[int] = set()
    for _ in range(3):
        children = _children_by_parent()
        below, todo = set(), [me]
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in below:
                    below.add(child)
                    todo.append(child)
        new = below - found
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        found |= new
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(found)


def _warm(backend: Any, task_id: str) -> None:
    """One read of a key-value result backend (Redis, memcached...) as the task starts: the store at a loss then
    finds its connection open, and needs no connect within the little time the lease leaves. Other backends are
    left alone (a read of the rpc backend would consume replies)."""
    if not isinstance(backend, BaseKeyValueStoreBackend):
        return
    try:
        backend.get(backend.get_key_for_task(task_id))
    except Exception:  # noqa: BLE001, S110 - a backend down now is the store's problem later, not the task's
        pass


def _store(task: Any, task_id: str, exc: LockLost, request: Any) -> None:
    try:
        task.backend.mark_as_failure(task_id, exc, request=request, call_errbacks=False)
    except BaseException:  # noqa: BLE001, S110 - a backend that cannot store must not keep the process alive
        pass


def restore_lock_lost(sender=None, task_id=None, exception=None, args=None, kwargs=None, **_: object) -> None:
    """In a prefork worker's main process: the child it lost ended itself for a lost lock, so the task's result
    says LockLost, not the WorkerLostError that the pool has just stored over the child's own record."""
    # Any task with a lock name is a SingleExecutionTask (task.py imports this module, not the other way round).
    if not isinstance(exception, WorkerLostError) or not hasattr(sender, "lock_name") or not task_id:
        return
    if f"exitcode {TERMINATE_EXIT}" not in str(exception):
        return
    try:
        name = sender.lock_name(args, kwargs)
    except Exception:  # noqa: BLE001 - the record matters more than the name
        name = sender.name
    message = _take_note(task_id) or f"lock {name!r} was lost; on_lost='terminate' ended the worker process"
    exc = LockLost(message, name=name)
    try:
        sender.backend.mark_as_failure(task_id, exc, call_errbacks=False)
    except Exception:  # noqa: BLE001, S110 - the stored failure stays; the worker logs it
        pass


def requeue_conflicts() -> list[tuple[str, str]]:
    """zklocks.W080: tasks with on_lost="terminate" that Celery would requeue when their process ends
    (``acks_late`` with ``reject_on_worker_lost``): they would run again instead of being recorded as failed."""
    from celery import _state

    found = []
    for app in list(_state._get_active_apps()):
        for name, task in sorted(app.tasks.items()):
            if not hasattr(task, "lock_options"):
                continue  # not a SingleExecutionTask
            try:
                on_lost = task.lock_options().on_lost
            except Exception:  # noqa: BLE001, S112 - an invalid option is E020/E021's to report
                continue
            if on_lost == "terminate" and task.acks_late and task.reject_on_worker_lost:
                found.append(
                    (
                        name,
                        "on_lost='terminate' with acks_late and reject_on_worker_lost: the task is requeued when its "
                        "worker process ends for a lost lock, and runs again instead of failing with LockLost",
                    )
                )
    return found


# The worker's main process (prefork: the parent); a child's pid differs. Set when the worker starts.
_main_pid = os.getpid()


def _note_main_process(**_: object) -> None:
    global _main_pid
    _main_pid = os.getpid()


celery_signals.worker_init.connect(_note_main_process, weak=False, dispatch_uid="zklocks.note_main_process")
celery_signals.task_failure.connect(restore_lock_lost, weak=False, dispatch_uid="zklocks.restore_lock_lost")

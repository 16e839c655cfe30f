"""Worker hooks: sessions per pool process, closed on the way out; markers of revoked tasks removed. Why each:
docs/celery.md, "Workers".

``worker_process_init`` opens the child's sessions at once, so the first task does not pay for the connect and an
unreachable ZooKeeper shows in the log at start-up. ``task_revoked``: a revoked or expired task never runs, so its
queued marker, its debounce node and the lock reservation for it (keep_lock_on_retry) are removed here.
"""

from __future__ import annotations

import logging
import threading

from celery import signals as celery_signals

from ..client.pools import connections
from ..exceptions import ZkLocksError
from ..recipes import layout
from . import conf as celery_conf
from . import markers, policies

log = logging.getLogger("zklocks")

CLOSE_WAIT = 3.0  # seconds a shutting-down process waits for its sessions to close


def aliases_in_use() -> set[str]:
    from .task import SingleExecutionTask

    found = {celery_conf.task_defaults()["USING"]}
    stack = list(SingleExecutionTask.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        using = cls.__dict__.get("lock_using")
        if isinstance(using, str) and using:
            found.add(using)
    return found


def open_sessions(**_: object) -> None:
    for alias in sorted(aliases_in_use()):
        try:
            connections[alias].session()
        except ZkLocksError as exc:
            log.warning("zklocks: cannot open a ZooKeeper session for alias %r in this worker process: %s", alias, exc)


def close_sessions(**_: object) -> None:
    """Close every session, waiting at most CLOSE_WAIT seconds (an unreachable server must not stall exit)."""
    done = threading.Thread(target=connections.close_all, kwargs={"wait": True}, name="zklocks-close-all", daemon=True)
    done.start()
    done.join(CLOSE_WAIT)


def forget_revoked(sender=None, request=None, **_: object) -> None:
    from .task import SingleExecutionTask

    if not isinstance(sender, SingleExecutionTask) or request is None or not getattr(request, "id", None):
        return
    try:
        opts = sender.lock_options()
        if not (opts.unique_queued or opts.debounce is not None or opts.keep_lock_on_retry):
            return
        name = sender.lock_name(getattr(request, "args", None), getattr(request, "kwargs", None))
    except (ZkLocksError, ValueError, TypeError):
        return
    if opts.unique_queued:
        markers.forget_marker(sender.name, opts, name, request.id)
    if opts.debounce is not None:
        markers.forget_latest(sender.name, opts, name, request.id)
    if opts.keep_lock_on_retry:
        try:
            policies.delete_if_owned(opts.lock_using, name, layout.RETRY, request.id)
        except ZkLocksError:
            log.warning("zklocks: cannot remove the lock reservation of revoked task %s; it ends by itself", request.id)


celery_signals.worker_process_init.connect(open_sessions, weak=False, dispatch_uid="zklocks.open_sessions")
celery_signals.worker_process_shutdown.connect(close_sessions, weak=False, dispatch_uid="zklocks.close_child")
celery_signals.worker_shutdown.connect(close_sessions, weak=False, dispatch_uid="zklocks.close_main")
celery_signals.task_revoked.connect(forget_revoked, weak=False, dispatch_uid="zklocks.forget_revoked")

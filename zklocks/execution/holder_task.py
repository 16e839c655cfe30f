"""Who holds a lock: the task id in the holder's node data (read on the contention path only)."""

from __future__ import annotations

from kazoo.exceptions import NoNodeError

from ..client.deadline import Deadline
from ..client.interrupts import raised_by_signal_handler
from ..client.pools import connections
from ..names import join_path
from ..recipes import layout, node_data
from ..recipes.kazoo_calls import call


def holder_task_id(using: str, name: str, same_call: str | None = None) -> str | None:
    """The task id recorded by the exclusive holder of ``name`` (None if free, shared, or unknown); with
    ``same_call`` (keys.call_digest), only if the holder runs that very call."""
    pool = connections[using]
    parent = join_path(pool.cfg.namespace, name)
    deadline = Deadline(pool.cfg.connect_timeout)
    try:
        session = pool.session()
        children = call(session, lambda: session.client.get_children_async(parent), deadline)
        lay = layout.get(pool.cfg.layout)
        contenders = lay.sort_contenders(children, lay.exclusive)
        if not contenders or contenders[0][1] != lay.exclusive:
            return None
        first = f"{parent}/{contenders[0][2]}"
        data, _ = call(session, lambda: session.client.get_async(first), deadline)
    except NoNodeError:
        return None
    except Exception as exc:  # advisory only: on any trouble, treat it as plain contention
        if raised_by_signal_handler(exc):
            raise  # SoftTimeLimitExceeded and the like reach the task
        return None
    record = node_data.parse(data)
    if same_call is not None and record.get("call") != same_call:
        return None
    return record.get("task_id")

"""Recycling a lock node whose sequence numbers are used up (docs/design.md §13).

This module knows kazoo and paths, nothing of Django.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import NoNodeError, NotEmptyError

from ..client.deadline import Deadline
from ..client.session import Session
from ..exceptions import ZkAuthError
from .step_runner import Request, Steps

log = logging.getLogger("zklocks")


def recycle_steps(session: Session, parent: str, deadline: Deadline) -> Steps:
    """Delete an exhausted lock node if it is empty: the next create re-creates it with a fresh counter. The
    value is whether it is gone.

    ZooKeeper refuses (NotEmpty) while any child is left, so nobody's node is ever removed with it.
    """
    try:
        yield Request(lambda: session.client.delete_async(parent), session, deadline)
    except NoNodeError:
        pass  # recycled by another contender (or the reaper) already
    except (NotEmptyError, ZkAuthError):
        return False
    log.warning("zklocks: recycled lock node %s of alias %r: its sequence numbers were used up", parent, session.alias)
    return True

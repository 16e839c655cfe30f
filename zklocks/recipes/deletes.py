"""Deleting a contender's node with a guarantee: through connection loss, until its session ends (RECIPES §2:
an abandoned node would block everyone behind it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)

from .. import dispatch
from .calls import SessionGone

if TYPE_CHECKING:
    from .queue import Contender

log = logging.getLogger("zklocks")


def delete_failed(contender: Contender, exc: Exception) -> None:
    """A delete that cannot succeed (e.g. NoAuth) must not leave our node in the queue: end the session."""
    if isinstance(exc, (NoNodeError, SessionExpiredError, ConnectionClosedError, SessionGone)):
        return  # the node is gone either way
    log.warning(
        "zklocks: could not delete %s (%s); closing its session so the node goes with it",
        contender.node,
        type(exc).__name__,
    )
    dispatch.get().call_soon(lambda: contender.session.declare_lost("delete-failed"))


class GuaranteedDelete:
    """Deletes a contender's node in the background, through connection loss, until its session ends.

    Runs entirely from kazoo completion callbacks and the dispatch thread; it never blocks either.
    """

    def __init__(self, contender: Contender) -> None:
        self.c = contender
        self.delay = 0.05

    def start(self) -> None:
        c = self.c
        if c.session.dead:
            return  # an ended session takes its ephemeral nodes with it
        if c.node is not None:
            self._delete()
        elif c._pending_create is not None:
            c._pending_create.rawlink(self._on_create)
        # else: no create was ever sent

    def start_later(self) -> None:
        """Retry the delete once the connection is back (called from a kazoo completion callback)."""
        self._later(self._delete)

    def _on_create(self, result) -> None:
        try:
            path, stat = result.get_nowait()
        except (ConnectionLoss, OperationTimeoutError):
            self._later(self._search)
            return
        except Exception:
            return  # NoNode parent, session gone, NoAuth: nothing was created
        self.c._set_node(path, stat.czxid)
        self._delete()

    def _search(self) -> None:
        c = self.c
        if c.session.dead:
            return
        # sync first: the server we reconnected to may not have applied our create yet.
        c.session.client.sync_async(c.parent).rawlink(
            lambda _r: c.session.client.get_children_async(c.parent).rawlink(self._on_children)
        )

    def _on_children(self, result) -> None:
        try:
            children = result.get_nowait()
        except (ConnectionLoss, OperationTimeoutError):
            self._later(self._search)
            return
        except Exception:
            return
        mine = self.c._find_own(children)
        if mine is not None:
            self.c.node = f"{self.c.parent}/{mine}"
            self._delete()

    def _delete(self) -> None:
        c = self.c
        if c.session.dead or c.node is None:
            return
        c.session.client.delete_async(c.node).rawlink(self._on_delete)

    def _on_delete(self, result) -> None:
        try:
            result.get_nowait()
        except (ConnectionLoss, OperationTimeoutError):
            self._later(self._delete)
        except Exception as exc:
            delete_failed(self.c, exc)

    def _later(self, step: Callable[[], None]) -> None:
        if self.c.session.dead:
            return
        self.delay = min(self.delay * 2, 1.0)

        def retry() -> None:
            if self.c.session.dead:
                return
            if not self.c.session.connected:
                self._later(step)
            else:
                step()

        dispatch.get().call_later(self.delay, retry)

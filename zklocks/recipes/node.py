"""One ephemeral-sequential node of one acquire: its per-acquire guid, its name and token once known, finding it
again after a connection loss (docs/design.md §3), and deleting it with a guarantee: through connection loss, until its
session ends (docs/design.md §2: an abandoned node would block everyone behind it)."""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)

from ..client import worker_threads
from ..client.deadline import Deadline, DeadlinePassed
from ..client.interrupts import new_event
from ..client.kazoo_adapter.calls import (
    Outcome,
    delete_request,
    reads_answers_here,
    send,
    set_data_request,
    transaction_request,
)
from ..client.session import Session
from ..exceptions import ZkAuthError, ZkLocksError
from . import layout, step_runner
from .kazoo_calls import CheckedResult, SessionGone, send_request, wait_result
from .step_runner import Request, Steps

log = logging.getLogger("zklocks")

# What the acquire under way does with each node it makes (handles/hold_registry.Grant.note): a node is noted the
# moment it exists, before its create is sent. A signal handler's exception can land at any instruction of the
# frames a granted node is returned through, where no recipe's ``except`` sees it: the acquire's give-back then
# still finds the node.
noting: contextvars.ContextVar[Callable[[OwnNode], None] | None] = contextvars.ContextVar(
    "zklocks_noting", default=None
)


class OwnNode:
    """A node we create as ``<parent>/<guid><marker><seq>``; the guid is fresh for every acquire. It is the alias
    layout's tag: a hex uuid (kazoo), or Curator's protected prefix ``_c_<uuid>-``, by which we find our node."""

    __slots__ = (
        "session",
        "parent",
        "guid",
        "prefix",
        "node",
        "name",
        "token",
        "stamp",
        "guards",
        "_pending_create",
        "_abandoned",
        "_left",
    )

    def __init__(self, session: Session, parent: str, marker: str) -> None:
        self.session = session
        self.parent = parent
        self.guid = layout_of(session).new_tag()
        self.prefix = f"{parent}/{self.guid}{marker}"
        self.node: str | None = None  # full path once known
        self.name: str | None = None  # child name once known
        self.token: int | None = None
        # (the server's ctime of our node, our monotonic moment after learning it): a lower bound of the server's
        # clock at any later moment of ours (lock_delay.py)
        self.stamp: tuple[int, float] | None = None
        # Our hold's guard is in the lock node's data (lock_delay.py): the release clears it in its transaction
        self.guards = False
        self._pending_create: Any = None  # an IAsyncResult, SENDING or None
        self._abandoned = False
        self._left = False  # its delete was sent in full (delete, delete_nowait): abandon() has nothing to do
        note = noting.get()
        if note is not None:
            note(self)

    def _find_own(self, children: list[str]) -> str | None:
        for child in children:
            if child.startswith(self.guid):
                return child
        return None

    def _adopt(self, child: str, deadline: Deadline) -> None:
        step_runner.run(self._adopt_steps(child, deadline))

    def _adopt_steps(self, child: str, deadline: Deadline) -> Steps:
        path = f"{self.parent}/{child}"
        stat = yield Request(lambda: self.session.client.exists_async(path), self.session, deadline)
        if stat is None:
            raise SessionGone()  # it was there a moment ago: only our session's end removes it
        self._set_node(path, stat.czxid)
        self.stamp = (stat.ctime, time.monotonic())
        self._pending_create = None

    def _set_node(self, path: str, czxid: int) -> None:
        self.node = path
        self.name = path.rsplit("/", 1)[1]
        self.token = czxid

    # -- leaving --

    def delete(self, deadline: Deadline, *, held: bool = False, sent: Callable[[str], object] | None = None) -> None:
        """Delete our node and wait for the answer; hand it to the background on any trouble.

        ``held``: we held an exclusive lock through this node, and say so in the delete (see _send_delete).
        ``sent(node)`` is called once the delete is answered (Session.hand_over).
        """
        node = self.node
        if node is None or self.session.dead:
            self.abandon()
            return
        try:
            wait_result(self._send_delete(node, held), self.session, deadline)
            if sent is not None:
                sent(node)
            self._left = True
        except (NoNodeError, SessionGone):
            self._left = True
        except ZkAuthError as exc:
            delete_failed(self, exc)
        except (KazooException, ZkLocksError, DeadlinePassed):
            self.abandon()
        except BaseException:
            # Raised while we waited (a signal handler's: KeyboardInterrupt, SoftTimeLimitExceeded): it reaches
            # the caller, and the node goes in the background.
            self.abandon()
            raise

    def delete_nowait(
        self, *, held: bool = False, sent: Callable[[str], object] | None = None, settle: bool = False
    ) -> Any:
        """Send the delete and return: later requests of this session see it applied (FIFO per session).

        A connection loss before the answer hands the node to GuaranteedDelete; an ended session took the
        node with it. ``sent(node)`` is called once the delete is sent (Session.hand_over): a delete refused after
        that (NoAuth: someone narrowed the lock node's ACL) ends the session, and the hold handed over with it.

        With ``settle``, the value is what to ``wait(timeout)`` on for the answer, whatever it is (what the answer
        means is settled without it): unless ``sent`` says it handed the lock over within our session, since the
        only watcher of our node, the contender right behind it, then holds already; or unless we run where the
        answers are read. None otherwise.
        """
        node = self.node
        if node is None or self.session.dead:
            self.abandon()
            return None
        client = self.session.client
        settling = settle and not reads_answers_here(client)
        answer: Any = None  # the result, or an event set once the answer is settled
        if client.chroot:  # kazoo's requests strip it from their answers
            result = self._send_delete(node, held)
            result.rawlink(self._on_deleted)
            self._left = True
            if settling:
                answer = result
        else:
            # _send_delete's request, answered to an outcome that the connection thread settles itself.
            answer = new_event() if settling else None
            outcome = Outcome(
                functools.partial(_release_answered, self, answer), functools.partial(_release_failed, self, answer)
            )
            send(client, _delete_request(node, held, self.parent if self.guards else None), outcome)
            self._left = True  # after the send: an exception inside it leaves abandon() to make sure
        if sent is not None and sent(node):
            return None
        return answer

    def _send_delete(self, node: str, held: bool):
        """A plain delete; for a holder, one transaction that first writes the node's data, then deletes it: the release
        mark that lets the contender behind us hold at that one notification, on a guarded alias (docs/design.md §5). A
        contender that leaves without holding never writes its node.
        """
        client = self.session.client
        if client.chroot:  # kazoo's methods add it to the paths and strip it from the answers
            if not held:
                return client.delete_async(node)
            transaction = client.transaction()
            transaction.set_data(node, RELEASED)
            transaction.delete(node)
            if self.guards:
                transaction.set_data(self.parent, b"")
            return _TransactionResult(transaction.commit_async())
        result = send_request(client, _delete_request(node, held, self.parent if self.guards else None))
        return _TransactionResult(result) if held else result

    def _on_deleted(self, result) -> None:
        try:
            result.get_nowait()
        except (ConnectionLoss, OperationTimeoutError):
            GuaranteedDelete(self).start_later()
        except Exception as exc:  # noqa: BLE001 delete_failed reports any other failure
            delete_failed(self, exc)

    def abandon(self) -> None:
        """Remove our node with a guarantee, without blocking the caller. Once is enough."""
        if self._abandoned or self._left:
            return
        try:
            GuaranteedDelete(self).start()
        except BaseException:
            # A signal handler's exception landed in the hand-over (it runs on the caller's thread): hand the node
            # over all the same, then let the exception go on. A second delete of a deleted node is NoNode, a
            # success (delete_failed).
            GuaranteedDelete(self).start()
            raise
        finally:
            self._abandoned = True


RELEASED = b"released"

# ``_pending_create`` while the create is being sent: an exception raised by a signal handler inside kazoo's
# create_async leaves a request that may be queued and no result to follow.
SENDING = object()


def _delete_request(node: str, held: bool, guarded: str | None = None):
    """The release's request (see OwnNode._send_delete), as kazoo's record; ``guarded``: the lock node whose
    data holds our hold's lock-delay guard, cleared in the same transaction (a clean release)."""
    if not held:
        return delete_request(node)
    ops = [set_data_request(node, RELEASED), delete_request(node)]
    if guarded is not None:
        ops.append(set_data_request(guarded, b""))
    return transaction_request(ops)


# Where the answer of a delete that nobody waits for goes (``delete_nowait``), run by kazoo's connection thread
# (calls.Outcome): a success ends there, with no hop to kazoo's callback thread (which a result's rawlink costs at
# every release); a failure goes to the worker thread, as ``_on_deleted`` would take it (a connection loss:
# GuaranteedDelete retries; anything else: delete_failed).


def _release_answered(contender: OwnNode, answered: threading.Event | None, value: Any = None) -> None:
    """``answered``: set once the answer is settled, for a release that waits for it (``delete_nowait(settle=)``)."""
    try:
        refused = _refused(value) if isinstance(value, list) else None  # a release transaction's answers
        if refused is not None:
            _release_failed(contender, None, refused)
    finally:
        if answered is not None:
            answered.set()


def _release_failed(contender: OwnNode, answered: threading.Event | None, exc: BaseException) -> None:
    try:
        if isinstance(exc, (ConnectionLoss, OperationTimeoutError)):
            worker_threads.get().call_soon(GuaranteedDelete(contender).start_later)
        elif isinstance(exc, Exception):
            worker_threads.get().call_soon(lambda: delete_failed(contender, exc))
    finally:
        if answered is not None:
            answered.set()


def _refused(answers: list) -> Exception | None:
    """The refusal in a transaction's answers (kazoo lists it, and RolledBackError for the operations it undid)."""
    for answer in answers:
        if isinstance(answer, Exception) and not isinstance(answer, RolledBackError):
            return answer
    return None


class _TransactionResult(CheckedResult):
    """The answer of a release transaction, as a delete's: kazoo reports a refused operation in the result
    list (NoNode when our node was deleted already), not as an exception."""

    __slots__ = ()

    def _unwrap(self):
        refused = _refused(self._result.get_nowait())
        if refused is not None:
            raise refused
        return True


def layout_of(session: Session) -> layout.Layout:
    """The node layout of the session's alias (LAYOUT)."""
    return layout.get(session.cfg.layout)


def delete_failed(contender: OwnNode, exc: Exception) -> None:
    """A delete that cannot succeed (e.g. NoAuth) must not leave our node in the queue: end the session."""
    if isinstance(exc, (NoNodeError, SessionExpiredError, ConnectionClosedError, SessionGone)):
        return  # the node is gone either way
    log.warning(
        "zklocks: could not delete %s (%s); closing its session so the node goes with it",
        contender.node,
        type(exc).__name__,
    )
    worker_threads.get().call_soon(lambda: contender.session.declare_lost("delete-failed"))


class GuaranteedDelete:
    """Deletes a contender's node in the background, through connection loss, until its session ends.

    Runs entirely from kazoo completion callbacks and the worker thread; it never blocks either.
    """

    def __init__(self, contender: OwnNode) -> None:
        self.c = contender
        self.delay = 0.05

    def start(self) -> None:
        c = self.c
        if c.session.dead:
            return  # an ended session takes its ephemeral nodes with it
        if c.node is not None:
            self._delete()
        elif c._pending_create is SENDING:
            self._search()  # interrupted while sending its create: the node, if any, is found by its guid
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
        except Exception:  # noqa: BLE001 NoNode parent, session gone, NoAuth: nothing was created
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
        except Exception:  # noqa: BLE001 session gone or refused: nothing to find
            return
        mine = self.c._find_own(children)
        if mine is not None:
            self.c.node = f"{self.c.parent}/{mine}"
            self._delete()

    def _delete(self) -> None:
        c = self.c
        if c.session.dead or c.node is None:
            return
        if c.guards:
            # A release under a lock-delay, retried: its mark and its guard's clearing go with it, as in the first
            # try (NoNode, the whole transaction refused, if that one was applied after all).
            c._send_delete(c.node, True).rawlink(self._on_delete)
            return
        c.session.client.delete_async(c.node).rawlink(self._on_delete)

    def _on_delete(self, result) -> None:
        try:
            result.get_nowait()
        except (ConnectionLoss, OperationTimeoutError):
            self._later(self._delete)
        except NoAuthError as exc:
            if self.c.guards:
                # The guard's clearing was refused: a lock node we may not write, whose guard write was cut short
                # (lock_delay._guard_steps notes it before the answer), so it holds no guard of ours. The whole
                # transaction was refused: delete the node without it.
                self.c.guards = False
                self._delete()
            else:
                delete_failed(self.c, exc)
        except Exception as exc:  # noqa: BLE001 delete_failed reports any other failure
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

        worker_threads.get().call_later(self.delay, retry)

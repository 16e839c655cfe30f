"""The fair lock queue of docs/design.md §2 and §6, in the alias's node layout (layout.py): each waiter watches one
node, its blocker, and the per-acquire guid finds our own node again after a connection loss (docs/design.md §3).

This module knows kazoo and paths, nothing of Django.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

from kazoo.exceptions import (
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
)
from kazoo.protocol.states import Callback, EventType

from ..client.iohandler import on_connection_thread
from ..client.kazoo_options import outside_writers
from ..client.session import Session
from ..exceptions import (
    LockNotAcquired,
    LockTimeout,
    SemaphoreMismatch,
    SequenceExhausted,
    ZkAuthError,
    ZkUnavailable,
)
from . import lock_delay, node_data, step_runner
from .kazoo_calls import (
    Deadline,
    DeadlinePassed,
    SessionGone,
    children_of,
    create_contender,
    synced_children,
    synced_exists,
)
from .layout import SEQUENCE_WARN, Layout, exhausted_message, sequence_trusted, warn_near_limit
from .node import SENDING, OwnNode, layout_of
from .queueview import QueueView, view_of
from .recycle import recycle_steps
from .step_runner import Answer, Blocking, Listing, NewWaker, Pace, Request, Sleep, Steps, reconnected

# How many nodes ahead a waiter finds gone, one after the other, before it reads the queue again instead of
# walking back one round trip per node (a waiter whose predecessor gave up usually finds the next one there).
WALK_BACK = 3
log = logging.getLogger("zklocks")


class Contender(OwnNode):
    """One enqueued node of one acquire attempt on one session.

    Its steps (enqueue, read the queue, wait for the blocker) are generators of step_runner.py, driven by a thread or
    by an event loop (see :func:`acquire` and :func:`acquire_steps`).
    """

    __slots__ = ("marker", "queued_at", "waited", "wakeups", "lock_delay", "vanished", "guarded")

    def __init__(self, session: Session, parent: str, marker: str, delay: float = 0.0) -> None:
        super().__init__(session, parent, marker)
        self.marker = marker
        self.queued_at = time.time()
        self.waited = False
        self.wakeups = 0  # wake-ups by a watch while queued
        self.lock_delay = delay  # seconds of lock-delay after an unclean loss (lock_delay.py)
        # The last blocker seen deleted without its release mark; "" once a marked release came after it
        self.vanished: str | None = None
        # Whether only the alias may delete our node: its own ACL (the alias's) and the lock node's say so
        # (enqueue_steps reads the latter). Otherwise the hold is watched as on an open alias.
        self.guarded = session.writes_guarded

    # -- enqueue --

    def enqueue_steps(self, data: bytes, deadline: Deadline) -> Steps:
        """Create our node and read the queue in one round trip; the value is the children."""
        session = self.session
        client = session.client
        while True:
            if session.dead:
                raise SessionGone()
            yield Pace(session, deadline)
            known = known_parent_guard(session, self.parent)
            # Pipelined before the create, once per lock node and session: no round trip of its own.
            parent_acl = client.get_acls_async(self.parent) if known is None else None
            self._pending_create = SENDING  # found by its guid if a signal handler's exception cuts the send short
            created = create_contender(client, self.prefix, data, session.acl)
            self._pending_create = created
            listed: list[str] | None = None
            try:
                listed = yield Listing(self.parent, session, deadline)  # sent after the create
            except (NoNodeError, ConnectionLoss, OperationTimeoutError):
                pass  # the create's answer says what happened
            try:
                path, stat = yield Answer(created, session, deadline)
            except NoNodeError:
                self._pending_create = None
                session.guarded_parents.pop(self.parent, None)  # reaped: whoever makes it again chooses its ACL
                yield from self._ensure_parent_steps(deadline)
                continue
            except (ConnectionLoss, OperationTimeoutError):
                yield reconnected(session, deadline)
                try:
                    # sync first: we may have reconnected to a server that has not applied our create yet.
                    yield Request(lambda: client.sync_async(self.parent), session, deadline)
                    children = yield Request(lambda: client.get_children_async(self.parent), session, deadline)
                except NoNodeError:
                    children = []
                mine = self._find_own(children)
                if mine is None:
                    continue  # the create never reached the server: send it again
                yield from self._adopt_steps(mine, deadline)
                self.guarded = yield from _parent_guarded(known, parent_acl, self.parent, session, deadline)
                return children
            self._set_node(path, stat.czxid)  # first: an exception in between must still find the node
            self.stamp = (stat.ctime, time.monotonic())  # the server's clock, read by our create (lock_delay.py)
            self._pending_create = None
            self.guarded = yield from _parent_guarded(known, parent_acl, self.parent, session, deadline)
            if listed is None:
                listed = yield from self.children_steps(deadline)
            return listed

    def _ensure_parent_steps(self, deadline: Deadline) -> Steps:
        client = self.session.client
        try:
            yield Request(
                lambda: client.create_async(self.parent, b"", acl=self.session.acl, makepath=True),
                self.session,
                deadline,
            )
        except NodeExistsError:
            return  # someone else's: its ACL is read with the next create
        self.session.guarded_parents[self.parent] = self.session.writes_guarded  # made with the alias's ACL

    # -- queue position --

    def children_steps(self, deadline: Deadline) -> Steps:
        client = self.session.client
        return (yield Request(lambda: children_of(client, self.parent), self.session, deadline))

    def blocker(self, children: list[str]) -> tuple[str | None, bool]:
        """(the child we wait for or None, whether it is the only contender ahead that keeps us waiting)."""
        view, index = self.place(children)
        ahead = view.previous(index)
        if ahead < 0:
            return None, False
        return view.child(ahead), view.previous(ahead) < 0

    def place(self, children: list[str]) -> tuple[QueueView, int]:
        """The queue as ``children`` shows it, and our index in it."""
        layout = layout_of(self.session)
        view = view_of(layout, children, self.marker)
        orphans = [c for c in view.tagged(self.guid) if c != self.name]
        if orphans:
            # Creates of ours that we could not see when we recovered from a connection loss: never wait
            # behind our own orphan.
            for child in orphans:
                self.session.client.delete_async(f"{self.parent}/{child}")
            view = QueueView(layout, [c for c in children if c not in orphans], self.marker)
        try:
            return view, view.position[self.name or ""]
        except KeyError:
            raise SessionGone() from None  # our ephemeral node is gone: the session was expired

    def wait_steps(self, blocker: str, deadline: Deadline) -> Steps:
        """Wait until ``blocker`` is deleted or the session state changes; DeadlinePassed at the deadline.

        The value is (deleted, held, at_once): whether the blocker is known to be deleted (a watch said so, or
        it was gone already: ``at_once``), and whether it is known to have held the lock: a contender writes its
        node only once it holds.

        One watch, on the blocker's data. Where only our identities may write it (``own``), the first change of an
        exclusive blocker with the release-only promise (node_data.py) means "held, and gone", and any other write
        only says it held; where anyone may write it, a write proves nothing. Other than "held, and gone", a change
        sets the watch again without waking, and the delete wakes us (docs/design.md §5).
        """
        waker = yield NewWaker()
        deleted: list[bool] = []
        held: list[bool] = []
        session = self.session
        client = session.client
        path = f"{self.parent}/{blocker}"
        layout = layout_of(session)
        exclusive = _exclusive(layout, blocker)
        # Only the alias's identities may write the blocker: then a write is its holder's own word. Our alias's
        # ACL says so of our contenders' nodes; the blocker's own ACL says so of it (an interop contender with the
        # credential may have made its node open to anyone).
        guarded = session.writes_guarded
        own = [False]
        armed: list = []  # the read that set the current watch: ZooKeeper answers it before the watch can fire
        handed: list[bool] = []  # our own session released its hold through the blocker (successors.py)

        def arm():
            armed.append(client.get_async(path, watch=on_data))
            return armed[-1]

        @on_connection_thread  # sends nothing and never blocks: the next holder wakes without a thread hop
        def on_data(watched) -> None:
            if handed:
                return  # told already, by the release itself
            if watched.type == EventType.CHANGED:
                self.vanished = ""  # written before it went: a release (lock_delay.py)
                if not own[0]:
                    # Anyone may write this node: a write proves nothing. Look, and hold only once it is gone.
                    rearm_on_callback_thread()
                    return
                held.append(True)
                # ``armed`` is empty if the event overtook the append in arm(), and may hold the read before the
                # last (a re-arm's append not done yet): an older read of the node can only fail to show a promise
                # that the current one shows, never the other way round; then we look.
                if not (exclusive and armed and _promised(armed[-1])):
                    rearm_on_callback_thread()  # it may still be there: watch again, without waking up
                    return
                deleted.append(True)  # written and deleted in one transaction
            elif watched.type == EventType.DELETED:
                deleted.append(True)
                self.vanished = blocker  # gone without its release mark: expired, force-released, or gave up
            self._woken(waker)

        def on_handed() -> None:
            # Only an exclusive holder's clean release calls this: it held, so nothing is ahead of it, and it is
            # gone for every later request of our session. ``handed`` comes last: a signal handler's exception
            # raised before it leaves ZooKeeper's event to wake us, and none can leave us asleep.
            self.vanished = ""
            held.append(True)
            deleted.append(True)
            self._woken(waker)
            handed.append(True)

        def rearm_on_callback_thread() -> None:
            # A request's send may wait until kazoo's connection thread drains its wake-up pipe, so it is never sent
            # from that thread, where on_data runs: kazoo's callback thread sends it.
            client.handler.dispatch_callback(Callback("watch", rearm, ()))

        def rearm() -> None:
            try:
                arm().rawlink(on_rearmed)
            except Exception:  # noqa: BLE001 the client is closing: wake up and look again
                self._woken(waker)

        def on_rearmed(result) -> None:
            if result.exception is not None:
                if isinstance(result.exception, NoNodeError):
                    deleted.append(True)
                self._woken(waker)  # gone (or the connection is): look again

        yield Pace(session, deadline)
        with session.waking(waker):
            try:
                try:
                    _, stat = yield Answer(arm(), session, deadline)
                except (ConnectionLoss, OperationTimeoutError):
                    yield reconnected(session, deadline)
                    _, stat = yield Request(arm, session, deadline)
                # A node of our own session was made with the alias's ACL (its client's default ACL too): no read.
                # Nor can a read then race the release of a thread beside us, find the node gone and prove nothing.
                ours = stat.ephemeralOwner != 0 and stat.ephemeralOwner == session.session_id
                if guarded:
                    own[0] = ours or (yield from _written_only_by_us(path, stat, session, deadline))
            except NoNodeError:
                return True, False, True  # gone already
            if stat.version > 0 and own[0]:
                held.append(True)
            stop_watching = None
            try:
                if exclusive and ours:  # its holder's release may hand us the lock before ZooKeeper tells us
                    sole = layout.is_exclusive(self.marker)  # right behind it: its only watcher
                    stop_watching = session.successors.watch(path, on_handed, sole=sole)
                # A thread wakes at least every third of the lease, so that a silent loss of the session is
                # noticed even if nothing wakes it; the session's keeper wakes every waiter at a loss.
                check = session.timeout / 3 if deadline.cancel is None else 0.05
                while not waker.is_set():
                    if deadline.expired():
                        yield from self._confirm_busy_steps(path, deadline)
                        raise DeadlinePassed()
                    yield Sleep(waker, deadline.remaining(), check)
                    if not session.is_alive():
                        raise SessionGone()
                    if session.unresponsive:
                        raise session.unavailable("no answer from the server while waiting for the lock")
            finally:
                if stop_watching is not None:
                    stop_watching()
            if not session.is_alive():
                raise SessionGone()
            if session.unresponsive:
                raise session.unavailable("no answer from the server while waiting for the lock")
            return bool(deleted), bool(held), False

    def _confirm_busy_steps(self, blocker_path: str, deadline: Deadline) -> Steps:
        """At the deadline: ask the server once more before calling it a timeout.

        A timeout says the lock is held elsewhere, which only an answer can back: a server that cannot answer
        (down, paused, cut off) turns the wait into ZkUnavailable instead. The read is synced with the leader: a
        server cut off from the quorum still answers reads, but not a sync. A cancelled async caller is not asked.
        """
        if deadline.cancelled():
            return
        client = self.session.client
        yield Request(lambda: synced_exists(client, blocker_path), self.session, deadline)

    def _woken(self, waker) -> None:
        if not waker.is_set():  # a session event may come on top of the watch's: one wake-up
            self.wakeups += 1
            waker.set()


def acquire(
    get_session: Callable[..., Session],
    parent: str,
    marker: str,
    data: bytes,
    *,
    blocking: bool,
    deadline: Deadline,
    name: str,
) -> Contender:
    """Enqueue and wait until held, in the calling thread. See :func:`acquire_steps`."""
    return step_runner.run(
        acquire_steps(get_session, parent, marker, data, blocking=blocking, deadline=deadline, name=name)
    )


def acquire_steps(
    get_session: Callable[..., Session],
    parent: str,
    marker: str,
    data: bytes,
    *,
    blocking: bool,
    deadline: Deadline,
    name: str,
    peek_session: Callable[[], Session | None] | None = None,
    delay: float = 0.0,
) -> Steps:
    """Enqueue and wait until held; the value is the Contender. LockNotAcquired / LockTimeout / ZkUnavailable
    otherwise. If the session ends while we wait, re-enqueue on a fresh session within our own deadline
    (``get_session(within=s)`` bounds the wait for it after an outage or past the deadline, see
    fresh_session_bound).
    ``peek_session`` returns a ready session without blocking, or None. ``delay``: the lock-delay in seconds
    (lock_delay.py), which this contender honours and, after an unclean loss, starts.
    """
    late_gone = 0  # sessions ended after the deadline (see gone_again)
    last_session: Session | None = None  # the session of the last attempt
    while True:
        until = fresh_session_bound(last_session, late_gone, deadline)
        if until is not None:
            session = yield Blocking(functools.partial(late_session, get_session, until), fast=peek_session)
        else:
            session = yield Blocking(get_session, fast=peek_session)
        last_session = session
        layout = layout_of(session)
        if not blocking and parent in session.busy_hint:
            # This lock was busy at our last try: one read may settle it without a create and a delete.
            try:
                # Synced: the False it may give is a verdict of contention, which a server cut off from the
                # quorum must not give from its stale copy.
                children = yield Request(functools.partial(synced_children, session.client, parent), session, deadline)
            except NoNodeError:
                children = []
            except SessionGone:
                late_gone = gone_again(late_gone, session, deadline)
                continue
            if layout.blockers_ahead(layout.sort_contenders(children, marker), None, marker):
                raise LockNotAcquired(name=name)
            session.busy_hint.discard(parent)
        if session.lease_refresh_due():
            # A session idle for long must prove its lease again (lease.py): the create completes the proof.
            # Where it is sent, its answer also tells an outage from contention before we queue; where it is not
            # (it would prove nothing new), the create's own connection loss does.
            try:
                yield Request(functools.partial(session.client.sync_async, "/"), session, deadline)
            except SessionGone:
                late_gone = gone_again(late_gone, session, deadline)
                continue
        contender = Contender(session, parent, marker, delay)
        try:
            children = yield from contender.enqueue_steps(data, deadline)
            # The uncontended case, most acquires: our node is the only child, so there is no queue to read.
            alone = len(children) == 1 and children[0] == contender.name
            if not alone and view_of(layout, children, marker).has_semaphore_child():
                # Lease holders are no contenders of this queue: granting it would ignore them.
                raise SemaphoreMismatch(f"{name!r} is in use as a semaphore, not a plain lock")
            seq = layout.sequence_of(contender.name or "")
            if seq is not None and not sequence_trusted(seq):
                # Our place in the queue is unknown: leave it, and start over on a fresh node if this one is
                # empty now.
                contender.delete_nowait()  # FIFO: the parent's delete below sees ours applied
                if (yield from recycle_steps(session, parent, deadline)):
                    continue
                raise SequenceExhausted(
                    exhausted_message(name, session.alias, parent), name=name, alias=session.alias, path=parent
                )
            far = seq is not None and seq < SEQUENCE_WARN
            if seq is not None and not far:
                warn_near_limit(session.alias, parent, seq)
            if alone:
                return (yield from _granted(contender, blocking, deadline, name))
            view, index = contender.place(children)
            ahead = view.previous(index)
            if ahead < 0:
                return (yield from _granted(contender, blocking, deadline, name))
            if not blocking:
                if len(session.busy_hint) > 10_000:
                    session.busy_hint.clear()
                session.busy_hint.add(parent)
                contender.delete_nowait()
                raise LockNotAcquired(name=name)
            contender.waited = True
            if not far:
                yield from _wait_reading(contender, children, deadline)
                return (yield from _granted(contender, blocking, deadline, name))
            # Our listing was answered after our create, so it names every contender that can ever be ahead of
            # us: one created later has a greater sequence number, and a deleted one never comes back. So we walk
            # back through it, watching one node at a time, and never read the queue again.
            gone_at_once = 0
            while ahead >= 0:
                blocker = view.child(ahead)
                deleted, held, at_once = yield from contender.wait_steps(blocker, deadline)
                if not deleted:
                    continue  # woken by the session's state: look at the same node again
                if held and _exclusive(layout, blocker):
                    break  # an exclusive holder held only once nothing was ahead of it: nothing is now
                if not contender.guarded:
                    # An open alias or lock node: anyone may have written and deleted that node, so only the queue
                    # itself shows who is ahead now: one listing (the classic recipe's), not a walk node by node.
                    children = yield Listing(parent, session, deadline)
                    view, index = contender.place(children)
                    ahead, gone_at_once = view.previous(index), 0
                    continue
                ahead = view.previous(ahead)  # it left (released, timed out, or its session ended)
                gone_at_once = gone_at_once + 1 if at_once else 0
                if gone_at_once >= WALK_BACK and ahead >= 0:
                    # Node after node was gone before we could watch it: the queue has moved on since our
                    # listing, and one read shows where it is now.
                    children = yield Listing(parent, session, deadline)
                    view, index = contender.place(children)
                    ahead, gone_at_once = view.previous(index), 0
            return (yield from _granted(contender, blocking, deadline, name))
        except SessionGone:
            late_gone = gone_again(late_gone, session, deadline)
            continue
        except DeadlinePassed:
            contender.abandon()
            raise LockTimeout(
                f"lock {name!r} (alias {session.alias!r}) not acquired within the timeout", name=name
            ) from None
        except SequenceExhausted:
            raise  # our node is deleted already
        except BaseException:
            contender.abandon()
            raise


def gone_again(late_gone: int, session: Session, deadline: Deadline) -> int:
    """The session ended under an acquire: it enqueues again on a fresh one, even past its deadline, since only
    an answer of the server can say the lock is held elsewhere. A second loss past the deadline is an outage."""
    if not deadline.expired():
        return late_gone
    if deadline.cancelled():
        raise DeadlinePassed()
    if late_gone >= 1:
        raise ZkUnavailable(
            f"zklocks alias {session.alias!r}: the ZooKeeper session ended twice during the acquire "
            f"({session.dead_reason or 'lost'})"
        )
    return late_gone + 1


# The losses that mean ZooKeeper did not answer (the lease ran out, no reconnect for a whole session timeout), as
# opposed to an answer that ended the session (expired) or our own close.
OUTAGES = frozenset({"suspended", "unreachable"})


def fresh_session_bound(ended: Session | None, late_gone: int, deadline: Deadline) -> float | None:
    """When (time.monotonic) the session that replaces ``ended`` must be there, or None for a whole
    CONNECT_TIMEOUT: after an outage, or a loss past the call's deadline (gone_again), CONNECT_TIMEOUT counts from
    the later of the call's start and the fault (Session.outage_bound), so that an outage ends the call within
    CONNECT_TIMEOUT of it (docs/reliability.md), however it was noticed. late_session gives the fresh session
    LATE_FLOOR at the least: a process that was itself paused past its lease finds a healthy server again."""
    if ended is None or not ended.dead or not (late_gone or ended.dead_reason in OUTAGES):
        return None
    return ended.outage_bound(deadline.started)


# What a fresh session asked for after an outage or past the call's deadline gets at the least, however late
# (capped at CONNECT_TIMEOUT): a server that answers gets its attempt though the call's own bound has run out (this
# process was paused past its lease, a slow expiry).
LATE_FLOOR = 1.0


def late_session(get_session: Callable[..., Session], until: float) -> Session:
    """``get_session`` bounded by ``until`` (fresh_session_bound), counted when it runs: a thread or the event
    loop's executor may take it up later than it was asked for."""
    return get_session(within=max(LATE_FLOOR, until - time.monotonic()))


def _granted(contender: Contender, blocking: bool, deadline: Deadline, name: str) -> Steps:
    """The contender is first: it holds, once a lock-delay in force (or one it starts) has passed."""
    if contender.lock_delay > 0:
        yield from lock_delay.hold_steps(contender, blocking, deadline, name)
    return contender


def _wait_reading(contender: Contender, children: list[str], deadline: Deadline) -> Steps:
    """Near the end of the sequence numbers, where their order may not be creation order: read the queue again
    after every wake-up."""
    while True:
        blocker, _ = contender.blocker(children)
        if blocker is None:
            return
        yield from contender.wait_steps(blocker, deadline)
        children = yield Listing(contender.parent, contender.session, deadline)


GUARDED_CREATORS_KEPT = 4096


def known_parent_guard(session: Session, parent: str) -> bool | None:
    """Whether only the alias may delete in ``parent``, as far as this session knows: False on an alias that is
    not guarded, None if its ACL was not read yet (judge_parent keeps what it reads)."""
    return session.guarded_parents.get(parent) if session.writes_guarded else False


def _parent_guarded(known: bool | None, acl_read, parent: str, session: Session, deadline: Deadline) -> Steps:
    """Whether the lock node lets only the alias's identities delete in it (ZooKeeper checks a delete against the
    parent's ACL): a lock node made before an upgrade from an open alias, or by a peer without an ACL, lets anyone
    delete our node, and a hold there is watched as on an open alias. ``known``, or else the answer of
    ``acl_read``; unknown (no answer) is False, not kept."""
    if known is not None:
        return known
    try:
        acl, _ = yield Answer(acl_read, session, deadline)
    except (ConnectionLoss, OperationTimeoutError, ZkAuthError, NoNodeError):
        return False
    return judge_parent(session, parent, acl)


def judge_parent(session: Session, parent: str, acl: list) -> bool:
    """Whether ``acl``, a lock node's, lets only the alias delete in it; kept for the session, warned if not."""
    others = outside_writers(acl, session.cfg)
    if len(session.guarded_parents) >= GUARDED_CREATORS_KEPT:
        session.guarded_parents.clear()
    session.guarded_parents[parent] = not others
    if others:
        log.warning(
            "zklocks: lock node %s lets others delete in it (%s): its holds are watched as on an open alias "
            "(manage.py zklocks_check --fix-acls gives it the alias's ACL)",
            parent,
            ", ".join(others),
        )
    return not others


def _written_only_by_us(path: str, stat, session: Session, deadline: Deadline) -> Steps:
    """Whether the node's ACL lets only the alias's identities write it. Unknown (no answer, no right to read it)
    is False: the waiter then looks, as on an open alias.

    A node's ACL is its creator's choice, made at the create. A client creates the contenders of one lock with
    one ACL (a zklocks session is one alias's; a per-path ACL provider, as Curator's, answers by the lock's path),
    so once one node of a session in a lock node is proven, that session's later nodes there are taken as proven
    too: a handoff between two processes reads the ACL once, not at every wait. (A node of our own session is not
    read at all: wait_steps.)"""
    creator = (stat.ephemeralOwner, path.rsplit("/", 1)[0])
    if creator[0] and creator in session.guarded_creators:
        return True
    try:
        acl, _ = yield Request(lambda: session.client.get_acls_async(path), session, deadline)
    except (ConnectionLoss, OperationTimeoutError, ZkAuthError):
        return False
    guarded = not outside_writers(acl, session.cfg)
    if guarded and creator[0]:
        if len(session.guarded_creators) >= GUARDED_CREATORS_KEPT:
            session.guarded_creators.clear()  # sessions of processes long gone: read again, once each
        session.guarded_creators.add(creator)
    return guarded


def _promised(read) -> bool:
    """Whether the node a successful read answered for carries the release-only promise."""
    return read.successful() and node_data.marks_release_only(read.value[0])


def _exclusive(layout: Layout, child: str) -> bool:
    parsed = layout.parse(child)
    return parsed is not None and layout.is_exclusive(parsed[1])

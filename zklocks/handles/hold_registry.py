"""Who holds what in this process: holds, their registry, and the watch on holds that last.

A hold belongs to an owner (owners.py): the thread, or the asyncio task under ``async with``. Holds are registered by
(owner, alias, name), so that a nested acquire by the same owner re-enters instead of queueing behind itself.
A :class:`Grant` records what an acquire has taken so far, so that an exception at any point gives it back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.protocol.states import EventType

from .. import conf, forking, signals
from ..client import observe, worker_threads
from ..client.deadline import Deadline, DeadlinePassed
from ..client.interrupts import raised_by_signal_handler
from ..client.session import Session
from ..exceptions import ZkUnavailable
from ..owners import current_owner
from ..recipes import layout, lock_delay, node_data
from ..recipes.kazoo_calls import SessionGone, call, synced_exists
from ..recipes.node import OwnNode, noting
from ..recipes.queue import Contender, gone_again
from ..recipes.step_runner import Steps

log = logging.getLogger("zklocks")


class Hold:
    """One node this process holds (or a semaphore lease), shared by nested acquires of one owner."""

    __slots__ = (
        "alias",
        "name",
        "kind",
        "contender",
        "session",
        "count",
        "lost",
        "lost_reason",
        "acquired_at",
        "key",
        "task",
        "task_id",
        "thread_name",
        "owner",
        "own_writes",
        "stoppers",
        "released",
        "__weakref__",
    )

    def __init__(self, alias: str, name: str, kind: str, contender: Contender, key: tuple | None) -> None:
        self.alias = alias
        self.name = name
        self.kind = kind
        self.contender = contender
        self.session: Session = contender.session
        self.count = 1
        self.lost = False
        self.lost_reason: str | None = None
        self.own_writes = 0  # writes of ours to our node: its version past this means someone else wrote it
        self.stoppers: list = []  # on_lost="cancel"/"terminate" (stopping.py): fired first when the hold is lost
        self.released = False  # the node was deleted with its release mark at the loss (max_hold)
        self.acquired_at = time.monotonic()
        self.key = key
        task = self.task = node_data.current_task.get()
        self.task_id = task[0] if task else None
        owner = self.owner = current_owner()
        self.thread_name = node_data.thread_name(owner)

    @property
    def token(self) -> int:
        return self.contender.token  # type: ignore[return-value]

    @property
    def is_held(self) -> bool:
        return not self.lost and self.session.is_alive()

    @property
    def stop_ahead(self) -> float:
        """How long before the lease deadline the session must declare its loss for this hold's stoppers."""
        return max((s.ahead for s in self.stoppers if s.armed), default=0.0)

    def mark_lost(self, reason: str) -> None:
        if self.lost:
            return
        self.lost = True
        self.lost_reason = reason
        contender = self.contender
        if getattr(contender, "lock_delay", 0) and contender.name and reason != "max_hold":  # max_hold releases cleanly
            # Our node may vanish with nobody watching it (the waiters of this process share the session).
            lock_delay.note_lost(self.alias, contender.parent, contender.name, contender.lock_delay)
        interrupted: BaseException | None = None
        for stopper in list(self.stoppers):  # the work first: the signal's receivers may take their time
            try:
                stopper.fire(reason)
            except Exception as exc:  # one stopper that fails must not keep the others, or the loss, from happening
                if raised_by_signal_handler(exc):
                    interrupted = interrupted or exc  # the caller's: raised once the loss is complete
                else:
                    log.exception("zklocks: stopping the work of lock %r failed", self.name)
        if observe.observers:
            observe.lost(self, reason)
        signals.send_async(
            signals.lock_lost,
            sender=Hold,
            name=self.name,
            alias=self.alias,
            kind=self.kind,
            token=self.token,
            reason=reason,
            task_id=self.task_id,
        )
        if interrupted is not None:
            raise interrupted

    def verdict(self, stat) -> str | None:
        """What a read of our node (its stat, or None) says of this hold: "deleted", "changed" (written by someone
        else: the node no longer says what we wrote), or None (ours, as we left it)."""
        if stat is None:
            return "deleted"
        if stat.version > self.own_writes:
            return "changed"
        return None

    def check_node(self) -> None:
        """Is our node still there? (A force-release or a lost session removes it.)

        A sync goes first, pipelined: the read then reflects everything the leader had committed when it
        answered the sync, not what a server cut off from the leader still believes.
        """
        if not self.is_held:
            return
        client = self.session.client
        node = self.contender.node
        if node is None:
            return  # never granted: a hold always has its node
        try:
            # A server that cannot reach its leader never answers the sync: wait no longer than the lease lasts,
            # so that ensure_held() raises LockLost on time instead of after CONNECT_TIMEOUT.
            wait = min(self.session.cfg.connect_timeout, max(0.0, self.session.lease_remaining()))
            stat = call(self.session, lambda: synced_exists(client, node), Deadline(wait, hard=True))
        except SessionGone:
            self.mark_lost(self.session.dead_reason or "expired")
            return
        except (DeadlinePassed, ZkUnavailable) as exc:
            if not self.is_held:
                return  # the lease ran out while we asked: the caller reports the loss
            if isinstance(exc, ZkUnavailable):
                raise
            raise self.session.unavailable(
                f"no answer to the check within CONNECT_TIMEOUT={self.session.cfg.connect_timeout:g}s"
            ) from None
        reason = self.verdict(stat)
        if reason is not None:
            self.mark_lost(reason)


registry: dict[tuple, Hold] = {}
registry_lock = threading.Lock()


class Grant:
    """What an acquire has taken so far, so that an exception at any point after the grant (an asynchronous
    one too: KeyboardInterrupt, Celery's SoftTimeLimitExceeded) gives it back instead of leaving the node."""

    __slots__ = ("contender", "hold")

    def __init__(self) -> None:
        self.contender: OwnNode | None = None
        self.hold: Hold | None = None  # its count includes this acquire

    def note(self, contender: OwnNode) -> None:
        """Each node the acquire makes, as it is made (node.noting): the latest is the one to give back."""
        self.contender = contender

    def give_back(self) -> None:
        hold = self.hold
        if hold is None:
            if self.contender is not None:
                self.contender.abandon()
            return
        with registry_lock:
            hold.count -= 1
            last = hold.count <= 0
            if last and hold.key is not None and registry.get(hold.key) is hold:
                del registry[hold.key]
        if last:
            hold.session.remove_hold(hold)
            hold.contender.abandon()  # lost or not: a node that is still there must go


def take_hold_steps(
    alias: str,
    name: str,
    kind: str,
    take: Callable[[], Steps],
    deadline: Deadline,
    grant: Grant,
    key: tuple | None = None,
) -> Steps:
    """Every lock, semaphore and election takes its hold here: what ``take`` grants becomes a Hold on its session
    and is watched (LongHolds). If that session ended between the grant and now, ``take`` runs again on a fresh
    one, by the recipes' one rule for a session lost under an acquire (queue.gone_again: past the deadline once,
    a second time is an outage, never contention)."""
    conf.refuse_read_only(conf.alias_config(alias), f"take the {kind} {name!r}")
    late_gone = 0
    while True:
        grant.hold = None
        noting.set(grant.note)
        try:
            contender = grant.contender = yield from take()
        finally:
            noting.set(None)
        hold = grant.hold = Hold(alias, name, kind, contender, key)
        if contender.session.add_hold(hold):
            long_holds.add(hold, contender.waited)
            return hold
        late_gone = gone_again(late_gone, contender.session, deadline)


LONG_HOLD = 1.0


class LongHolds:
    """Every hold's watch on its own node, and the hold record of holds that last (docs/design.md §5, §9).

    A delete or a foreign write of our node marks the hold lost. The watch is set at the grant on an open alias,
    from LONG_HOLD on under a guarded ACL. Holds younger than LONG_HOLD are looked at by one periodic tick on the
    worker thread; a hold that waited and lasts that long records acquired_at with one asynchronous set: an
    exclusive holder's in the lock node, a reader's or a lease's in its own node (our own watch knows the write is
    ours by the node's version).
    """

    def __init__(self) -> None:
        self._young: list[tuple[float, Hold, bool, float, bool]] = []
        self._lock = threading.Lock()
        self._ticking = False

    def add(self, hold: Hold, waited: bool) -> None:
        guarded = hold.contender.guarded
        if not guarded:
            watch_own_node(hold)  # anyone may write or delete our node: hear of it at once
        entry = (time.monotonic(), hold, waited, time.time(), guarded)
        with self._lock:
            self._young.append(entry)
            if self._ticking:
                return
            self._ticking = True
        try:
            worker_threads.get().call_later(LONG_HOLD, self._tick)
        except BaseException:
            # A signal handler's exception before the tick was scheduled: the next add schedules it, or no hold
            # of this process would ever get its watch and its hold record.
            with self._lock:
                self._ticking = False
            raise

    def _tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [e for e in self._young if now - e[0] >= LONG_HOLD]
            self._young = [e for e in self._young if now - e[0] < LONG_HOLD and e[1].count > 0]
            self._ticking = bool(self._young)
            next_at = self._young[0][0] + LONG_HOLD if self._young else None
        try:
            for _, hold, waited, acquired_at, guarded in due:
                try:
                    if hold.count > 0 and hold.is_held:
                        if guarded:
                            watch_own_node(hold)  # only our identity may touch it: a force-release, heard from now
                        record_acquired_at(hold, waited, acquired_at)
                except Exception:  # one hold that fails must not cost the others their watch and their record
                    log.exception("zklocks: watching the long hold of %r failed", hold.name)
        finally:
            # Always: while _ticking is set nobody else schedules a tick, so a tick lost here would stop every
            # later hold of this process from ever getting its watch and its record.
            if next_at is not None:  # on time.monotonic(): a delay, not a time on the worker thread's clock
                worker_threads.get().call_later(max(0.0, next_at - time.monotonic()), self._tick)


def watch_own_node(hold: Hold) -> None:
    """Mark ``hold`` lost as soon as anyone else deletes or writes its node (see LongHolds)."""
    contender = hold.contender
    session = contender.session
    client = session.client

    def judge(stat) -> None:
        if hold.count <= 0 or hold.lost:
            return
        reason = hold.verdict(stat)
        if reason is not None:
            hold.mark_lost(reason)

    def on_own_node(event) -> None:
        if hold.count <= 0 or hold.lost:
            return
        if event.type == EventType.DELETED:
            hold.mark_lost("deleted")
        elif event.type == EventType.CHANGED:
            rearm()  # ours (a hold record) or someone else's: the version tells
        elif event.type == EventType.NONE:
            # A connection blip cleared the watch: set it again once the session is back.
            worker_threads.get().call_later(0.05, rearm)

    def on_failed() -> None:
        if not session.dead:
            worker_threads.get().call_later(0.1, rearm)

    def on_exists(result) -> None:  # on kazoo's callback thread: a verdict is judged on the worker thread
        if not result.successful():
            on_failed()
        elif hold.verdict(stat := result.value) is not None:
            worker_threads.get().call_soon(lambda: judge(stat))

    def rearm() -> None:
        if hold.count <= 0 or hold.lost or session.dead:
            return
        if not session.connected:
            worker_threads.get().call_later(0.05, rearm)
            return
        client.exists_async(contender.node, watch=on_own_node).rawlink(on_exists)

    rearm()


def record_acquired_at(hold: Hold, waited: bool, acquired_at: float) -> None:
    """A hold that waited and lasts: record since when it holds, for the admin and the CLI."""
    contender = hold.contender
    session = contender.session
    client = session.client
    node_layout = layout.get(session.cfg.layout)
    if waited and node_layout.holders_write and not getattr(contender, "guards", False):  # a guard says it already
        if node_layout.is_exclusive(getattr(contender, "marker", "")):
            # Our own node must change only at the release (node_data.marks_release_only): the lock node says it.
            _record_in_lock_node(client, contender.parent, node_data.hold_record(contender.name or "", acquired_at))
        else:
            hold.own_writes += 1  # before the write: our own watch may see it before its answer
            client.set_async(
                contender.node,
                node_data.payload(
                    thread=hold.thread_name,
                    task=hold.task,
                    owner=hold.owner,
                    acquired_at=round(acquired_at, 3),
                    queued_at=round(contender.queued_at, 3),
                ),
            )


def _record_in_lock_node(client, parent: str, record: bytes) -> None:
    """Write a hold record into the lock node unless its data means something else (a semaphore's marker, a
    foreign client's data): read it, then write only over nothing or an earlier record, at that version."""

    def on_read(result) -> None:
        try:
            data, stat = result.get_nowait()
        except Exception:  # noqa: BLE001 the record is for display only
            return  # gone, refused or disconnected: the record is for display only
        if data and node_data.parse_hold_record(data) is None and lock_delay.until_ms(data, 0) is None:
            return  # a past lock-delay's record may go: it was over before anyone held
        client.set_async(parent, record, version=stat.version)

    client.get_async(parent).rawlink(on_read)


long_holds = LongHolds()


def reset_after_fork() -> None:
    """A forked child holds nothing: the forking thread's id survives, so stale entries would 're-enter'."""
    global registry_lock, long_holds
    registry.clear()
    registry_lock = threading.Lock()
    long_holds = LongHolds()


forking.register(reset_after_fork)

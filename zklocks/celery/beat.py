"""Exactly one Celery beat across hosts: ``celery -A proj beat -S zklocks.celery.beat:LeaderScheduler``.

Only the elected leader builds and runs the configured scheduler; each send is claimed first (beat_state.py) and
stamped for worker fencing (beat_fence.py), and a claim of unknown outcome is resolved, or noted as an orphan that
the next leader sends only if it inherited that very claim (adopt_orphans). See docs/celery.md, "Celery beat", and
docs/design.md §11.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from celery.beat import Scheduler
from celery.signals import after_task_publish
from celery.utils.log import get_logger

from ..client.deadline import Deadline
from ..client.pools import connections
from ..handles.election import ZkLeader
from . import beat_fence, beat_state, beat_status, catchup, schedule_share
from . import conf as celery_conf

logger = get_logger(__name__)
HEADER = "zklocks_beat"
ORPHAN_POLL = 1.0  # seconds between two looks for orphaned claims while leading
SLOW_CLOSE = 1.0  # seconds: a longer close of the schedule (its final sync) is logged, as it delays the next leader
_HOST = socket.gethostname()[:64]


def _timestamp(value: datetime) -> float:
    # Celery takes a naive datetime as UTC (celery.utils.time.maybe_make_aware).
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()


if TYPE_CHECKING:
    from celery.beat import Scheduler as _MixinBase  # the mixin's super() is the configured scheduler class
else:
    _MixinBase = object


class _Fenced(_MixinBase):
    """Mixed in before the configured scheduler class: catch up from ZooKeeper, and fence every send."""

    zklocks_guard: LeaderScheduler
    _zklocks_stamp: dict[str, Any] | None = None

    def is_due(self, entry):
        self.zklocks_guard.catch_up(entry)
        return super().is_due(entry)

    def apply_entry(self, entry, producer=None):
        due = catchup.due_of(entry, time.time())
        stamp = self.zklocks_guard.claim(entry, due)
        if stamp is None:
            return  # not the leader (any more): nothing is sent
        with self._stamped(entry, stamp, claimed=True):
            super().apply_entry(entry, producer=producer)  # logs "Sending due task"
        if getattr(getattr(entry, "model", None), "one_off", False):
            # django-celery-beat's one-off task is done once its row's run count says so, and its time stays due:
            # written now, not at the next sync minutes later, or a leader lost meanwhile makes the next one send
            # it again.
            self.sync()

    def zklocks_send(self, entry, stamp: dict[str, Any], *, claimed: bool) -> None:
        """Send ``entry``'s task once more with ``stamp``, leaving its schedule alone: a missed tick claimed for
        catch-up (``claimed``), or an orphaned tick."""
        with self._stamped(entry, stamp, claimed=claimed):
            try:
                self.apply_async(entry, producer=self.producer, advance=False)
            except Exception as exc:  # noqa: BLE001 - a failed send is logged; the beat goes on
                logger.error("beat: sending the tick of %s failed: %s", entry.name, exc)

    @contextmanager
    def _stamped(self, entry, stamp: dict[str, Any], *, claimed: bool) -> Iterator[None]:
        """Send with ``stamp``. A stop (a signal handler's SystemExit) after our claim and before Celery reported
        the message published (after_task_publish) leaves the claim to the next leader, as an orphan noted before
        this beat leaves (close()): the claim is in doubt from before it went out (claim()) until the publish
        (_note_published). A stop inside the publish itself may so send the tick twice, never lose it."""
        self._zklocks_stamp = stamp
        guard = self.zklocks_guard
        if claimed:
            _sending[id(stamp)] = _Sending(stamp, lambda: guard.sent(entry.name, stamp))
        try:
            yield
            if claimed:
                guard.sent(entry.name, stamp)  # not published, and Celery logged why (a broker error): as before
        finally:
            _sending.pop(id(stamp), None)
            self._zklocks_stamp = None

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        stamp = self._zklocks_stamp
        if stamp is None:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        original = entry.options
        options = catchup.without_option(original)
        entry.options = {**options, "headers": {**(options.get("headers") or {}), HEADER: stamp}}
        try:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        finally:
            entry.options = original


class _Sending:
    """A claimed send under way: ``on_published`` ends its claim's doubt as soon as Celery reports the message
    published (after_task_publish), before the scheduler's own work after the send (Celery's apply_async syncs its
    storage in its finally), where a stop would otherwise leave a sent tick noted as unsent."""

    __slots__ = ("stamp", "on_published")

    def __init__(self, stamp: dict[str, Any], on_published: Callable[[], None]) -> None:
        self.stamp, self.on_published = stamp, on_published


_sending: dict[int, _Sending] = {}  # by id() of the stamp in the message's headers


@after_task_publish.connect(weak=False)
def _note_published(sender=None, headers=None, **kwargs: Any) -> None:
    stamp = (headers or {}).get(HEADER)
    sending = _sending.get(id(stamp))
    if sending is not None and sending.stamp is stamp:
        sending.on_published()


_fenced_classes: dict[type, type] = {}


def fenced_class(cls: type) -> type:
    fenced = _fenced_classes.get(cls)
    if fenced is None:
        fenced = _fenced_classes[cls] = type(f"Fenced{cls.__name__}", (_Fenced, cls), {"__module__": __name__})
    return fenced


class LeaderScheduler(Scheduler):
    """A Celery scheduler that sends only while this beat is the elected leader (see the module's doc)."""

    zklocks_leader = True  # import_scheduler refuses to wrap this class in itself

    def __init__(self, app, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        values = celery_conf.beat_settings()
        self.election: str = values["ELECTION"]
        self.using: str = values["USING"]
        self.scheduler_path: str = values["SCHEDULER"]
        self._inner_args = args
        self._inner_kwargs = kwargs
        self._inner: Scheduler | None = None
        self._sent: dict[str, float] = {}  # entry name -> epoch seconds of its last send, as ZooKeeper has it
        self._claims: dict[str, beat_state.Claim] = {}  # entry name -> its last claim (for the versioned write)
        self._inherited: dict[str, beat_state.Claim] = {}  # claims of earlier leaders, read when elected
        self._world = 0  # the election node's ctime, read when elected (beat_state.world_of)
        # Our claims that may have committed unsent, (entry, sent_at, token): from before the claim goes out until
        # Celery reports its message published (or the claim is known not to have committed).
        self._doubt: set[tuple[str, float, int | None]] = set()
        # Doubts of the leadership under way that were noted as orphans and not adopted yet (adopt_orphans).
        self._noted_own: set[tuple[str, float, int | None]] = set()
        self._parent: str | None = None  # the election's node, known once elected
        self._orphans_at = 0.0  # monotonic time of the next look for orphans
        self.catch_up_default = catchup.parse(values["CATCH_UP"])
        self.policies: dict[str, catchup.Policy] = {}  # entry name -> its catch-up policy, as last read
        self._backlog: list[tuple[str, float]] = []  # (entry name, due time) of missed ticks still to send
        self.elected_at = 0.0  # epoch seconds of this beat's last election
        self._published = False  # this beat's beat_schedule was offered to the leader (schedule_share.py)
        self._schedule_seen: int | None = None  # the shared schedule's version last merged
        self._status_written: bytes | None = None  # the status node as last written (beat_status.py)
        self._sends = 0  # claims granted so far: a tick that sends rewrites the status
        self._closed = False
        self._looping: set[int] = set()  # the threads inside tick() or a sync, while they are there
        self._close_asked = False  # close() came from inside that thread's own tick or sync (see close)
        self.leader = ZkLeader(self.election, using=self.using)
        # Our own schedule stays empty: the elected leader runs the configured scheduler's.
        super().__init__(app, *args, lazy=True, **kwargs)

    def setup_schedule(self) -> None:
        pass

    @property
    def info(self) -> str:
        return f"zklocks election {self.election!r} (alias {self.using!r}) running {self.scheduler_path}"

    # -- the loop --

    def tick(self, *args: Any, **kwargs: Any) -> float:
        return self._in_loop(self._tick, *args, **kwargs)

    def _in_loop(self, step, *args: Any, **kwargs: Any) -> Any:
        """Run one step of the beat loop; a close() asked for from inside it runs once the step has unwound."""
        me = threading.get_ident()
        if me in self._looping:  # nested in our own step
            return step(*args, **kwargs)
        try:
            # Inside the try: a signal handler runs right after a call returns, and its close() is deferred on the
            # strength of this add, so the finally must run whenever the add did.
            self._looping.add(me)
            return step(*args, **kwargs)
        finally:
            self._looping.discard(me)
            if self._close_asked:
                self.close()

    def _tick(self, *args: Any, **kwargs: Any) -> float:
        if self._close_asked or self._closed:
            # A stop was asked for and the loop still ticks: the signal handler's SystemExit was swallowed (raised
            # inside a finalizer or a weakref callback, where Python only prints it). Celery's handler does not
            # end its loop itself, so the beat would run on for ever, closed: finish the stop it asked for.
            raise SystemExit("zklocks: the beat was closed; its stop completes")
        if self._inner is not None and not self.leader.is_leader:
            self._step_down("leadership lost: the ZooKeeper session expired, was cut off or is no longer certain")
        if self._inner is None and not self._become_leader():
            return min(self.max_interval, 1.0)
        assert self._inner is not None  # noqa: S101 - for mypy: _become_leader set it
        if time.monotonic() >= self._orphans_at:
            self._orphans_at = time.monotonic() + ORPHAN_POLL
            self._look_around(self._inner)
        if self._backlog:
            self._send_backlog(self._inner)
            return 0.0
        sends = self._sends
        wait = self._inner.tick()
        if self._sends != sends:
            # A tick went out: the status's next due time was the one just sent (the page would show it as both
            # the last send and the next due until the next look around); say the new one now.
            hold = self.leader.leading_hold()
            if hold is not None:
                self._write_status(self._inner, hold)
        return min(wait, ORPHAN_POLL)

    def _become_leader(self) -> bool:
        if self._closed:
            return False
        logger.info("beat: candidate in election %r (alias %r); waiting to lead", self.election, self.using)
        if not self._published:  # until ZooKeeper could be asked: an outage at the start must not lose it
            self._published = schedule_share.publish_own(
                self.using, self.election, self.app.conf.beat_schedule, _HOST, logger
            )
        self._settle_doubts()
        if self._doubt:  # ZooKeeper is away: note them before standing (a standby could not until it leads)
            return False
        try:
            self.leader.acquire()  # blocks until elected
            hold = self.leader.leading_hold()
            if hold is None or self._close_asked:  # a lease that ran out at once: stand again; a stop: leave
                self.leader.release()
                return False
            self._parent = hold.contender.parent
            self._world = beat_state.world_of(hold.session, self._parent, Deadline(hold.session.cfg.connect_timeout))
            self._refresh(hold, Deadline(hold.session.cfg.connect_timeout))
            self._inherited = {name: c for name, c in self._claims.items() if c.token != hold.token}
            self._noted_own = set()
            self._orphans_at = 0.0
            self._backlog = []
            self._schedule_seen = None
            self.elected_at = time.time()  # ticks due before it were missed: their sends are catch-up sends
            cls: Any = fenced_class(celery_conf.import_scheduler(self.scheduler_path))
            inner = cls.__new__(cls)
            inner.zklocks_guard = self
            inner.__init__(self.app, *self._inner_args, **self._inner_kwargs)
        except Exception as exc:  # noqa: BLE001 the user's scheduler may raise anything: logged, the lead given back
            logger.error("beat: could not take the lead of election %r (alias %r): %s", self.election, self.using, exc)
            self.leader.release()
            time.sleep(1.0)
            return False
        self._inner = inner
        for entry in list(inner.schedule.values()):
            # ZooKeeper knows every send (each is recorded before it happens); a local last run that is later
            # is no send (e.g. a fresh entry stamped "now" by its constructor), so it must not delay the next.
            self.catch_up(entry, exact=True)
            self._plan_catch_up(entry)
        inner._heap = None  # rebuilt from the caught-up entries at the next tick
        logger.info(
            "beat: elected leader of %r (alias %r, token %s); last sends of %d %s read from ZooKeeper",
            self.election,
            self.using,
            hold.token,
            len(self._sent),
            "entry" if len(self._sent) == 1 else "entries",
        )
        return True

    def _look_around(self, inner) -> None:
        """About once a second while leading: orphaned claims to send, and a newly published beat_schedule."""
        self._settle_doubts()  # a note that could not be written before this election (ZooKeeper was away)
        try:
            self.adopt_orphans(inner)
        except Exception as exc:  # noqa: BLE001 - a side task: the beat goes on leading
            logger.warning("beat: could not look for orphaned claims: %s", exc)
        hold = self.leader.leading_hold()
        if hold is None:
            return
        try:
            self._schedule_seen, applied = schedule_share.follow(hold, inner, self._schedule_seen, self.app, logger)
        except Exception as exc:  # noqa: BLE001 - a side task: the beat goes on leading
            logger.warning("beat: could not follow the shared beat_schedule: %s", exc)
            return
        if applied:
            for entry in list(inner.schedule.values()):
                self.catch_up(entry)
            inner._heap = None
        self._write_status(inner, hold)

    def _write_status(self, inner, hold) -> None:
        """The status node (each entry's next due time), when it changed; best effort."""
        data = beat_status.status_bytes(inner, self.policies, self.catch_up_default, hold.token, _HOST)
        if data != self._status_written:
            try:
                beat_state.write_status(hold.session, hold.contender.parent, data, Deadline(1.0))
                self._status_written = data
            except Exception as exc:  # noqa: BLE001 - the status page is best effort
                logger.debug("beat: could not write its status: %s", exc)

    def _plan_catch_up(self, entry) -> None:
        """Apply the entry's catch-up policy to the ticks missed since its last send (catchup.py)."""
        since = self._sent.get(entry.name)
        if since is not None:
            # Missed means due before the election, as the stamp says (stamp()): a tick that falls due while this
            # is planned is a regular send.
            tz = self.app.timezone
            policy, backlog = catchup.plan(entry, since, self.elected_at, self.catch_up_default, tz, logger)
            self.policies[entry.name] = policy
            self._backlog.extend((entry.name, due) for due in backlog)

    def _send_backlog(self, inner) -> None:
        """Send the next missed tick that an "each:N" policy keeps (one per loop, each claimed like any)."""
        name, due = self._backlog.pop(0)
        entry = inner.schedule.get(name)
        if entry is None:
            return
        stamp = self.claim(entry, due)
        if stamp is not None:
            logger.info("beat: sending %s's missed tick due at %.3f (catch-up)", name, due)
            inner.zklocks_send(entry, stamp, claimed=True)

    def _step_down(self, why: str, *, clean: bool = False) -> None:
        """Stop running the schedule (if we lead) and leave the election. ``clean``: a requested stop (shutdown),
        logged at INFO; a lost leadership is a WARNING."""
        inner, self._inner = self._inner, None
        # The storage is synced before the election is left, slow as it may be: the next leader reads it when
        # elected, and some of its state is not in ZooKeeper (django-celery-beat disables a one-off task on the
        # run count it reads: left unsynced, the next leader sends that task again).
        try:
            if inner is not None:
                log = logger.info if clean else logger.warning
                log("beat: stepping down as leader of %r (alias %r): %s", self.election, self.using, why)
                began = time.monotonic()
                try:
                    inner.close()
                except Exception as exc:  # noqa: BLE001 the schedule's own storage may be gone with the leadership
                    logger.warning("beat: closing %s failed: %s", self.scheduler_path, exc)
                took = time.monotonic() - began
                if took > SLOW_CLOSE:  # the next leader waited for it: say why the failover took longer
                    logger.warning("beat: syncing and closing %s took %.1f s", self.scheduler_path, took)
        finally:  # a second signal's SystemExit in the inner close must not keep us in the election
            self.leader.release(wait=True)

    # -- called by the fenced scheduler --

    def catch_up(self, entry, exact: bool = False) -> None:
        """Move ``entry``'s last run forward to its last send recorded in ZooKeeper (by any leader); with
        ``exact``, set it to that send whatever the entry says."""
        sent = self._sent.get(entry.name)
        if sent is None:
            return
        last = entry.last_run_at
        if last is None or _timestamp(last) < sent - 0.001 or (exact and abs(_timestamp(last) - sent) > 0.001):
            entry.last_run_at = datetime.fromtimestamp(sent, tz=self.app.timezone)

    def claim(self, entry, due: float | None = None) -> dict[str, Any] | None:
        """Record ``entry``'s send in ZooKeeper, fenced by our candidate node; the header stamp, or None if this
        beat must not send."""
        name = entry.name
        for attempt in (1, 2):
            hold = self.leader.leading_hold()
            if hold is None:
                break
            if any(d[0] == name and d[2] == hold.token for d in self._doubt | self._noted_own):
                # An earlier claim of this entry by this leadership is still unresolved: a new one would replace
                # it in the entry's node, and whether it committed (to be sent late) could never be told. The
                # next loop turn notes and adopts it first (_look_around, before the schedule's tick).
                logger.warning("beat: not sending %s yet: an earlier claim of it is unresolved", name)
                self._orphans_at = 0.0
                return None
            previous = self._claims.get(name)
            version = previous.version if previous is not None else None
            sent_at = time.time()
            deadline = Deadline(hold.session.cfg.connect_timeout)
            # In doubt before it goes out: a stop (a signal handler's SystemExit) can land anywhere from here to the
            # publish, before the send's own guard (_Fenced._stamped) is in place too. A doubt that never
            # committed costs nothing: the leader that reads its note finds no such claim and sends nothing.
            doubt = (name, sent_at, hold.token)
            self._doubt.add(doubt)
            try:
                outcome = beat_state.record_sent(
                    hold.session, self._own_node(hold), hold.contender.parent, name, sent_at, hold.token,
                    version=version, deadline=deadline,
                )  # fmt: skip
                if outcome == beat_state.UNKNOWN:
                    outcome = self._resolve(hold, name, sent_at, version)
            except Exception:
                self._doubt.discard(doubt)  # an error, not a stop: record_sent says UNKNOWN for a lost answer
                raise
            if outcome == beat_state.COMMITTED:
                self._sent[name] = sent_at
                self._claims[name] = beat_state.Claim(name, sent_at, hold.token, 0 if version is None else version + 1)
                if not self.leader.is_leader:  # the lease ran out while we wrote: the next leader sends it
                    break
                self._sends += 1
                return self.stamp(name, hold.token, sent_at, due)  # in doubt until published (_Fenced._stamped)
            if outcome == beat_state.UNKNOWN:
                logger.warning("beat: the claim of %s has an unknown outcome; it is resolved before any send", name)
                return None
            self._doubt.discard(doubt)  # refused: it did not commit
            if attempt == 1 and self.leader.is_leader:
                # Our node may still be there and only our idea of the entry's node was stale: read again.
                try:
                    self._refresh(hold, deadline)
                except Exception:  # noqa: BLE001 - any failure ends the retry loop; the claim stays unknown
                    break
                continue
            break
        logger.warning(
            "beat: not sending %s: this beat does not lead election %r (alias %r) any more",
            name,
            self.election,
            self.using,
        )
        return None

    def stamp(self, name: str, token: int | None, sent_at: float, due: float | None = None) -> dict[str, Any]:
        stamp = {"election": self.election, "entry": name, "token": token, "sent_at": sent_at, "host": _HOST}
        if self._world:
            stamp["world"] = self._world  # the data's lifetime the token belongs to (beat_state.world_of)
        if due is not None:
            stamp["due"] = round(due, 6)
            if due < self.elected_at:
                stamp["catch_up"] = True
        return beat_fence.sign(stamp)

    @staticmethod
    def _own_node(hold) -> str:
        return hold.contender.node

    def _refresh(self, hold, deadline: Deadline) -> None:
        self._claims = beat_state.read_sent(hold.session, hold.contender.parent, deadline)
        self._sent = {name: claim.sent_at for name, claim in self._claims.items()}

    def _resolve(self, hold, name: str, sent_at: float, version: int | None) -> str:
        """A claim whose answer was lost: read the entry's node once the connection is back. Ours there: it
        committed. Still at the version the claim needed: send the very same claim again (at most one of the
        two copies can commit) and look again. Anything else, or no answer: UNKNOWN (see _settle_doubts)."""
        refused = False
        try:
            for _ in range(3):
                deadline = Deadline(hold.session.cfg.connect_timeout)
                found = beat_state.read_claim(hold.session, hold.contender.parent, name, deadline)
                if beat_state.same_claim(found, sent_at, hold.token):
                    logger.info("beat: the claim of %s committed although its answer was lost", name)
                    return beat_state.COMMITTED
                if (found.version if found is not None else None) != version:
                    return beat_state.REJECTED if self.leader.is_leader else beat_state.UNKNOWN
                if refused:  # refused at an unchanged version: our node is gone, so no copy can commit any more
                    return beat_state.REJECTED
                again = beat_state.record_sent(
                    hold.session, self._own_node(hold), hold.contender.parent, name, sent_at, hold.token,
                    version=version, deadline=deadline,
                )  # fmt: skip
                if again == beat_state.COMMITTED:
                    return again
                refused = again == beat_state.REJECTED and not hold.session.dead
        except Exception as exc:  # noqa: BLE001 - any failure leaves the claim unknown (noted for the next leader)
            logger.warning("beat: could not resolve the claim of %s: %s", name, exc)
        return beat_state.UNKNOWN

    def sent(self, name: str, stamp: dict[str, Any]) -> None:
        """A claim's send is over: published (after_task_publish), or given up by Celery (a broker error it logs)."""
        self._doubt.discard((name, stamp["sent_at"], stamp["token"]))

    def _settle_doubts(self) -> None:
        """Claims of ours left UNKNOWN in an ended leadership: note them as orphans, so that the leader that
        inherited them sends those that committed (we never will)."""
        if not self._doubt or self._parent is None:
            return
        try:
            session = connections[self.using].session()
        except Exception as exc:  # noqa: BLE001 - tried again before the next election, and about once a second while leading
            logger.warning("beat: could not note %d unsent claim(s) yet: %s", len(self._doubt), exc)
            return
        # Newest first: a note is named by entry and token, and an entry's latest claim is the one the next leader
        # inherits (a note already there for an older claim of the same token is left, and this one skipped).
        for doubt in sorted(self._doubt, key=lambda d: d[1], reverse=True):
            name, sent_at, token = doubt
            try:
                beat_state.write_orphan(
                    session, self._parent, name, sent_at, token, Deadline(session.cfg.connect_timeout)
                )
            except Exception as exc:  # noqa: BLE001 - one note failing must not stop the others
                logger.warning("beat: could not note the unsent claim of %s: %s", name, exc)
                continue
            logger.warning(
                "beat: the claim of %s (token %s) may have committed unsent; noted for the leader", name, token
            )
            self._doubt.discard(doubt)
            hold = self.leader.leading_hold()
            if hold is not None and hold.token == token:
                self._noted_own.add(doubt)  # this leader adopts it: no new claim of the entry until then

    def adopt_orphans(self, inner) -> None:
        """Send each orphaned claim that this leader inherited (it committed and its beat never sent it), once."""
        hold = self.leader.leading_hold()
        if hold is None:
            return
        deadline = Deadline(hold.session.cfg.connect_timeout)
        for child, orphan in beat_state.read_orphans(hold.session, hold.contender.parent, deadline):
            inherited = self._inherited.get(orphan.entry)
            if orphan.token == hold.token:
                # Noted by this very leadership: a claim whose answer was lost, unresolved while ZooKeeper was away
                # (_settle_doubts runs while leading too). Whether it committed, the entry's node says.
                inherited = beat_state.read_claim(hold.session, hold.contender.parent, orphan.entry, deadline)
            committed = beat_state.same_claim(inherited, orphan.sent_at, orphan.token)
            taken = beat_state.take_orphan(hold.session, self._own_node(hold), hold.contender.parent, child, deadline)
            self._noted_own = {d for d in self._noted_own if (d[0], d[2]) != (orphan.entry, orphan.token)}
            entry = inner.schedule.get(orphan.entry)
            if taken == beat_state.COMMITTED and not committed:
                logger.info("beat: the noted claim of %s (token %s) never committed: nothing to send", orphan.entry,
                            orphan.token)  # fmt: skip
            if taken != beat_state.COMMITTED or not committed or entry is None or not self.leader.is_leader:
                continue
            self._inherited.pop(orphan.entry, None)
            logger.warning(
                "beat: sending %s: a tick claimed by token %s at %.3f that its beat never sent", orphan.entry,
                orphan.token, orphan.sent_at,
            )  # fmt: skip
            inner.zklocks_send(entry, self.stamp(orphan.entry, hold.token, orphan.sent_at), claimed=False)

    # -- syncing and shutdown --

    def should_sync(self) -> bool:
        return self._inner is not None and self._inner.should_sync()

    def _do_sync(self) -> None:
        if self._inner is not None:
            self._in_loop(self._inner._do_sync)

    def sync(self) -> None:
        if self._inner is not None:
            self._in_loop(self._inner.sync)

    def close(self) -> None:
        if self._closed:
            return
        if threading.get_ident() in self._looping:
            # Celery's SIGTERM handler closes the scheduler on the main thread wherever the signal landed, inside
            # a tick too, where the interrupted code may hold a lock the step-down needs (or be half-way through a
            # publish or the inner scheduler's storage). The step-down runs once the tick has unwound.
            self._close_asked = True
            return
        self._closed = True
        try:
            self._settle_doubts()  # a send cut off after its claim (_Fenced._stamped): noted before we leave
        finally:
            self._step_down("shutting down", clean=True)
        super().close()

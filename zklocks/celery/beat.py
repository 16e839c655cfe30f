"""Exactly one Celery beat across hosts: ``celery -A proj beat -S zklocks.celery.beat:LeaderScheduler``.

Every host runs beat; each beat runs for leader of one election (``ZKLOCKS_BEAT["ELECTION"]``, see
election.py). Only the leader builds the configured scheduler (``ZKLOCKS_BEAT["SCHEDULER"]``, e.g. Celery's
PersistentScheduler or django-celery-beat's DatabaseScheduler) and runs its schedule; the others wait as
candidates and touch neither the schedule nor the broker.

Each send is fenced. Before Celery sends a due entry, the leader records the send time of that entry in
ZooKeeper in one transaction with a ``check`` of its own candidate node (recipes/beatstate.py). The write
commits only while no other beat can lead, so a leader that lost its session (expired, frozen past its
timeout, cut off) cannot commit, and then it does not send. A new leader reads these times when elected: it
neither repeats a send of the old leader nor skips one beyond the failover. The message carries the header
``zklocks_beat = {"election", "token", "sent_at"}``: the token is the leader's fencing token.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from celery.beat import Scheduler
from celery.utils.log import get_logger

from ..handles.election import ZkLeader
from ..recipes import beatstate
from ..recipes.kazoo_calls import Deadline
from . import conf as celery_conf

logger = get_logger(__name__)
HEADER = "zklocks_beat"


def _timestamp(value: datetime) -> float:
    # Celery takes a naive datetime as UTC (celery.utils.time.maybe_make_aware).
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()


class _Fenced:
    """Mixed in before the configured scheduler class: catch up from ZooKeeper, and fence every send."""

    zklocks_guard: LeaderScheduler
    _zklocks_stamp: dict[str, Any] | None = None

    def is_due(self, entry):
        self.zklocks_guard.catch_up(entry)
        return super().is_due(entry)

    def apply_entry(self, entry, producer=None):
        stamp = self.zklocks_guard.claim(entry)
        if stamp is None:
            return  # not the leader (any more): nothing is sent
        self._zklocks_stamp = stamp
        try:
            super().apply_entry(entry, producer=producer)  # logs "Sending due task"
        finally:
            self._zklocks_stamp = None

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        stamp = self._zklocks_stamp
        if stamp is None:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        original = entry.options
        entry.options = {**(original or {}), "headers": {**((original or {}).get("headers") or {}), HEADER: stamp}}
        try:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        finally:
            entry.options = original


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
        self._closed = False
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
        if self._inner is not None and not self.leader.is_leader:
            self._step_down("leadership lost: the ZooKeeper session expired, was cut off or is no longer certain")
        if self._inner is None and not self._become_leader():
            return min(self.max_interval, 1.0)
        assert self._inner is not None  # noqa: S101 for mypy only: the line above returned otherwise
        return self._inner.tick()

    def _become_leader(self) -> bool:
        if self._closed:
            return False
        logger.info("beat: candidate in election %r (alias %r); waiting to lead", self.election, self.using)
        try:
            self.leader.acquire()  # blocks until elected
            hold = self.leader.leading_hold()
            if hold is None:  # elected on a lease that ran out at once: stand again
                self.leader.release()
                return False
            contender = hold.contender
            self._sent = beatstate.read_sent(hold.session, contender.parent, Deadline(hold.session.cfg.connect_timeout))
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

    def _step_down(self, why: str, *, clean: bool = False) -> None:
        """Stop running the schedule and leave the election. ``clean``: a requested stop (shutdown), logged at
        INFO; a lost leadership is a WARNING."""
        inner, self._inner = self._inner, None
        if inner is not None:
            log = logger.info if clean else logger.warning
            log("beat: stepping down as leader of %r (alias %r): %s", self.election, self.using, why)
            try:
                inner.close()
            except Exception as exc:  # noqa: BLE001 the schedule's own storage may be gone with the leadership
                logger.warning("beat: closing %s failed: %s", self.scheduler_path, exc)
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

    def claim(self, entry) -> dict[str, Any] | None:
        """Record ``entry``'s send in ZooKeeper, fenced by our candidate node; the header stamp, or None if this
        beat must not send."""
        for attempt in (1, 2):
            hold = self.leader.leading_hold()
            if hold is None:
                break
            sent_at = time.time()
            deadline = Deadline(hold.session.cfg.connect_timeout)
            try:
                committed = beatstate.record_sent(
                    hold.session,
                    hold.contender.node,  # type: ignore[arg-type]
                    hold.contender.parent,
                    entry.name,
                    sent_at,
                    hold.token,
                    exists=entry.name in self._sent,
                    deadline=deadline,
                )
            except Exception as exc:  # noqa: BLE001 any failure counts as not recorded: nothing is sent
                logger.warning("beat: could not record the send of %s in ZooKeeper: %s", entry.name, exc)
                committed = False
            if committed:
                self._sent[entry.name] = sent_at
                if not self.leader.is_leader:  # the lease ran out while we wrote: do not send after all
                    break
                return {"election": self.election, "token": hold.token, "sent_at": sent_at}
            if attempt == 1 and self.leader.is_leader:
                # Our node may still be there and only our guess of the entry's node was wrong: read again.
                try:
                    self._sent = beatstate.read_sent(hold.session, hold.contender.parent, deadline)
                except Exception:  # noqa: BLE001 a failed read ends the retries: nothing is sent
                    break
                continue
            break
        logger.warning(
            "beat: not sending %s: this beat does not lead election %r (alias %r) any more",
            entry.name,
            self.election,
            self.using,
        )
        return None

    # -- syncing and shutdown --

    def should_sync(self) -> bool:
        return self._inner is not None and self._inner.should_sync()

    def _do_sync(self) -> None:
        if self._inner is not None:
            self._inner._do_sync()

    def sync(self) -> None:
        if self._inner is not None:
            self._inner.sync()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._inner is not None:
            self._step_down("shutting down", clean=True)
        else:
            self.leader.release(wait=True)
        super().close()

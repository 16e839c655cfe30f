"""A django-health-check check of ZooKeeper (``pip install 'django-zklocks[health]'``): a ``sync`` + read round trip
per alias and, with ``ZKLOCKS_HEALTH["MAX_HOLD_SECONDS"]``, the locks held too long, in a bounded read (summary()).
Set-up, bounds, and why elections are left out: docs/operations.md, "Health check"; the read a wrong password
fails, and names hidden under READ_ACL="auth": docs/security.md, "The health check and READ_ACL".

A MAX_HOLD_SECONDS read that has an error (the namespace cannot be listed, e.g. NoAuth) fails the check too: a lock
it cannot see may be the one held too long. ``manage.py check`` validates ZKLOCKS_HEALTH (zklocks.E050, W050).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import threading
import time

from health_check.base import HealthCheck
from health_check.exceptions import ServiceUnavailable
from kazoo.exceptions import NoNodeError
from kazoo.security import Permissions

from .. import conf, forking
from ..client.deadline import Deadline, DeadlinePassed
from ..client.kazoo_options import build_acl
from ..client.pools import connections
from ..exceptions import ZkLocksError
from ..names import shown
from ..recipes.kazoo_calls import SessionGone, call
from ..recipes.layout import Kind

NAMED = 10  # locks held too long that a failure names; the others are counted
SUMMARY_SECONDS = 5.0  # how long one read of every lock answers MAX_HOLD_SECONDS for the process's requests
SUMMARIES = 16  # summaries kept (one per set of aliases checked)
READ_WAIT = 1.0  # seconds a request waits for a read under way before it answers from the last summary
_summary_lock = threading.Lock()
_summaries: dict[tuple, tuple[float, list[str], object]] = {}
_reads: dict[tuple, _SummaryRead] = {}  # the read under way, per key


def probe(alias: str) -> str | None:
    """None if the alias answers a sync + read within its CONNECT_TIMEOUT, else what went wrong."""
    try:
        cfg = conf.alias_config(alias)
        deadline = Deadline(cfg.connect_timeout)
        session = connections[alias].session()  # ZkUnavailable when no session within CONNECT_TIMEOUT
        client = session.client
        path = cfg.namespace or "/"

        readable = world_readable(cfg)

        def synced_read():
            client.sync_async(path)
            # exists needs no right at all. Under an ACL that keeps READ to the identity, a read of the
            # namespace's data does: a wrong password answers NoAuth here (ZooKeeper takes any at connect).
            return client.exists_async(path) if readable else client.get_async(path)

        call(session, synced_read, deadline)
    except NoNodeError:
        return None  # the namespace is made on first use
    except ZkLocksError as exc:
        text = str(exc)
        return text if repr(alias) in text else f"alias {alias!r}: {text}"
    except SessionGone:
        return f"alias {alias!r}: the ZooKeeper session was lost during the check"
    except DeadlinePassed:
        return f"alias {alias!r}: no sync + read answer within CONNECT_TIMEOUT={cfg.connect_timeout:g}s"
    return None


def world_readable(cfg: conf.AliasConfig) -> bool:
    """Whether anyone may read the alias's lock nodes (no ACL, or one that gives world:anyone READ). A READ_ONLY
    alias reads nodes that other processes made, with an ACL its settings cannot tell: taken as not."""
    if cfg.read_only:
        return False
    acl = build_acl(cfg)
    return acl is None or any(
        e.id.scheme == "world" and e.id.id == "anyone" and e.perms & Permissions.READ for e in acl
    )


def _shows_details_or_not(alias: str) -> bool:
    try:
        return shows_details(alias)
    except ZkLocksError:
        return False  # an alias that is not configured: its read reports it


def shows_details_setting() -> bool | None:
    from django.conf import settings

    return (getattr(settings, "ZKLOCKS_HEALTH", None) or {}).get("SHOW_LOCK_DETAILS")


def shows_details(alias: str) -> bool:
    """Whether the check's output may name the alias's locks, hosts and pids: ZKLOCKS_HEALTH["SHOW_LOCK_DETAILS"]
    when set, else only for an alias whose nodes anyone may read anyway."""
    chosen = shows_details_setting()
    if chosen is not None:
        return bool(chosen)
    return world_readable(conf.alias_config(alias))


def _shown(value: object) -> str:
    return shown(str(value)[:64])


def long_holds(aliases: list[str], max_hold: float) -> list[str]:
    """Locks held for longer than ``max_hold`` seconds, as messages naming the lock, its alias and holder (or,
    where the alias's READ_ACL hides them, counting them), and the aliases whose locks could not be read (naming
    the error). Elections are left out: their leader holds them for as long as it leads. The locks are read a
    chunk at a time, and at most NAMED locks are named (the others counted): time and memory stay bounded
    whatever the namespaces hold."""
    from ..ops.read_model import visit_locks

    now = time.time()
    named: list[str] = []
    unnamed = 0
    hidden: dict[str, tuple[int, float]] = {}  # alias: how many held too long, and the longest (bounded)
    details = {alias: _shows_details_or_not(alias) for alias in aliases}

    done = False

    def look(locks) -> None:
        nonlocal unnamed
        if done:
            return
        for lock in locks:
            if lock.kind == Kind.ELECTION:
                continue
            held_for = lock.held_for(now)
            if held_for is None or held_for <= max_hold:
                continue
            if not details.get(lock.alias):
                count, longest = hidden.get(lock.alias, (0, 0.0))
                hidden[lock.alias] = (count + 1, max(longest, held_for))
            elif len(named) < NAMED:
                # Node data comes from anyone who can write the namespace: escaped, as in the admin and the CLI
                # (this text reaches a terminal, a text/plain page and django-health-check's log line).
                who = ", ".join(f"{_shown(h.host or '?')} pid {_shown(h.pid or '?')}" for h in lock.holders[:3])
                named.append(
                    f"alias {lock.alias!r}: lock {lock.shown_name!r} held for {held_for:.0f}s > "
                    f"MAX_HOLD_SECONDS={max_hold:g} (by {who})"
                )
            else:
                unnamed += 1

    snaps = visit_locks(aliases, look)
    done = True  # a read that outlived its connect timeout may still call look(): it no longer counts
    found = []
    for failed in (a for a in snaps if a.error):
        error = str(failed.error)
        for prefix in (f"zklocks alias {failed.alias!r}: ", f"alias {failed.alias!r}: "):
            error = error.removeprefix(prefix)
        found.append(f"alias {failed.alias!r}: locks not checked against MAX_HOLD_SECONDS={max_hold:g}: {error}")
    for partial in (a for a in snaps if not a.error and a.refused):
        found.append(
            f"alias {partial.alias!r}: {len(partial.refused)} node(s) not checked against MAX_HOLD_SECONDS="
            f"{max_hold:g}, as this alias may not read them (e.g. {partial.refused[0]})"
        )
    found += named
    if unnamed:
        found.append(f"and {unnamed} more lock(s) held for longer than MAX_HOLD_SECONDS={max_hold:g}")
    for alias, (count, longest) in hidden.items():
        found.append(
            f"alias {alias!r}: {count} lock(s) held for longer than MAX_HOLD_SECONDS={max_hold:g} (the longest "
            f"{longest:.0f}s); names, hosts and pids not shown, as the alias's ACL keeps them from other readers "
            '(ZKLOCKS_HEALTH["SHOW_LOCK_DETAILS"] = True shows them)'
        )
    return found


def summary(aliases: list[str], max_hold: float) -> list[str]:
    """``long_holds``, read at most once per SUMMARY_SECONDS (or a tenth of ``max_hold``, if shorter) in this
    process, on a thread of its own shared by the requests that come while it runs; a request waits for it up to
    READ_WAIT seconds, then answers from the last summary (docs/operations.md, "Health check"). A settings change
    starts afresh."""
    configs = conf.get_config()[0]  # a new object after every change of ZKLOCKS
    key = (tuple(aliases), max_hold, shows_details_setting())
    with _summary_lock:
        hit = _summaries.get(key)
        if hit is not None and hit[2] is not configs:
            hit = None
        if hit is not None and time.monotonic() - hit[0] < min(SUMMARY_SECONDS, max_hold / 10):
            return hit[1]
        read = _reads.get(key)
        if read is None or read.configs is not configs:
            read = _reads[key] = _SummaryRead(key, aliases, max_hold, configs)
            try:
                read.start()
            except BaseException:
                # No thread (none left, or a signal handler's exception): a read that never runs would make
                # every later request wait READ_WAIT for nothing.
                if _reads.get(key) is read:
                    del _reads[key]
                raise
    if read.done.wait(READ_WAIT):
        if read.error is not None:
            raise copy.copy(read.error) from read.error  # one object per request: each adds its own traceback
        return read.found
    return hit[1] if hit is not None else []


class _SummaryRead(threading.Thread):
    """One read of ``long_holds`` for the requests that need it; its result replaces the summary of its key."""

    def __init__(self, key: tuple, aliases: list[str], max_hold: float, configs: object) -> None:
        super().__init__(name="zklocks-health-summary", daemon=True)
        self.key, self.aliases, self.max_hold, self.configs = key, aliases, max_hold, configs
        self.done = threading.Event()
        self.found: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.found = long_holds(self.aliases, self.max_hold)
        except BaseException as exc:  # noqa: BLE001 handed to the requests that wait for it
            self.error = exc
        finally:
            with _summary_lock:
                current = _reads.get(self.key) is self  # not replaced by a read of newer settings
                if current:
                    del _reads[self.key]
                if current and self.error is None:
                    _summaries.pop(self.key, None)
                    _summaries[self.key] = (time.monotonic(), self.found, self.configs)
                    while len(_summaries) > SUMMARIES:  # one per check registered (global, per alias): a few
                        del _summaries[next(iter(_summaries))]
            self.done.set()


def _reset_after_fork() -> None:
    """A child forked while a read was under way must not wait for its parent's lock, nor for a read whose
    thread did not come with it."""
    global _summary_lock
    _summary_lock = threading.Lock()
    _summaries.clear()
    _reads.clear()


forking.register(_reset_after_fork)


def max_hold_seconds() -> float | None:
    from django.conf import settings

    options = getattr(settings, "ZKLOCKS_HEALTH", None) or {}
    value = options.get("MAX_HOLD_SECONDS")
    return None if value is None else float(value)


@dataclasses.dataclass
class ZooKeeperHealthCheck(HealthCheck):
    """Every configured alias, or only ``alias``."""

    alias: str | None = None

    def __repr__(self) -> str:
        """The name django-health-check shows for the check (its page, and the keys of its JSON and text)."""
        return "ZooKeeper" if self.alias is None else f"ZooKeeper (alias {self.alias!r})"

    def aliases(self) -> list[str]:
        return [self.alias] if self.alias is not None else conf.aliases()

    @property
    def timeout(self) -> datetime.timedelta:
        """Each alias's CONNECT_TIMEOUT, in turn (twice with MAX_HOLD_SECONDS: the snapshot is one more read)."""
        total = 0.0
        for alias in self.aliases():
            try:
                total += conf.alias_config(alias).connect_timeout
            except ZkLocksError:
                pass
        if max_hold_seconds() is not None:
            total *= 2
        return datetime.timedelta(seconds=total + 1.0)

    def run(self) -> None:
        aliases = self.aliases()
        failed = {alias: problem for alias in aliases if (problem := probe(alias))}
        problems = list(failed.values())
        max_hold = max_hold_seconds()
        if max_hold is not None:
            # An alias whose probe failed is not read again (a second session start, a second report of it).
            reachable = [a for a in aliases if a not in failed]
            if reachable:
                problems += summary(reachable, max_hold)
        if problems:
            raise ServiceUnavailable("; ".join(problems))

"""Prometheus metrics of locks and sessions, through prometheus_client (``pip install django-zklocks[metrics]``),
installed into the default registry by the app's ready() unless ``settings.ZKLOCKS_METRICS`` is False. The metrics
and their labels, the bounded ``family`` label (FAMILY_LIMIT; shared across processes in multiprocess mode), and
``mark_process_dead``: docs/reference.md, "Metrics", and docs/observability.md, "Prometheus metrics".
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .. import forking
from ..client import observe
from ..exceptions import ZkConfigError

try:
    import prometheus_client
except ImportError:  # pragma: no cover - the extra is not installed
    prometheus_client = None  # type: ignore[assignment]

log = logging.getLogger("zklocks")

ACQUIRE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
HOLD_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
SESSION_STATES = ("connected", "suspended", "lost")


class Metrics(observe.Observer):
    """The six metrics, fed by observe.py. ``family`` maps a lock name to the ``family`` label (or None)."""

    def __init__(self, registry: Any = None, family: Callable[[str], object] | None = None) -> None:
        pc = prometheus_client
        if pc is None:
            raise RuntimeError("zklocks metrics need prometheus_client: pip install 'django-zklocks[metrics]'")
        registry = pc.REGISTRY if registry is None else registry
        lock_labels = ("alias", "kind", "family") if family is not None else ("alias", "kind")
        shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
        self.family = None if family is None else functools.lru_cache(maxsize=4096)(_Bounded(family, shared))
        self.acquire_seconds = pc.Histogram(
            "zklocks_acquire_seconds",
            "Wait time of acquire attempts, by result (acquired, timeout, not_acquired, unavailable)",
            (*lock_labels, "result"),
            buckets=ACQUIRE_BUCKETS,
            registry=registry,
        )
        self.hold_seconds = pc.Histogram(
            "zklocks_hold_seconds",
            "Time from acquired to released",
            lock_labels,
            buckets=HOLD_BUCKETS,
            registry=registry,
        )
        self.held_now = pc.Gauge(
            "zklocks_held", "Holds this process holds now", lock_labels, multiprocess_mode="livesum", registry=registry
        )
        self.waiting_now = pc.Gauge(
            "zklocks_waiting",
            "Acquires this process is waiting on now",
            lock_labels,
            multiprocess_mode="livesum",
            registry=registry,
        )
        self.lost_total = pc.Counter("zklocks_lost_total", "Holds lost", ("alias", "reason"), registry=registry)
        self.task_dedup_total = pc.Counter(
            "zklocks_task_dedup_total",
            "Single-execution task calls that did not simply run, by outcome",
            ("task", "outcome"),
            registry=registry,
        )
        self.sessions = pc.Gauge(
            "zklocks_sessions",
            "This process's ZooKeeper sessions by state (lost: not yet replaced)",
            ("alias", "state"),
            multiprocess_mode="livesum",
            registry=registry,
        )
        self._lock = threading.Lock()
        self._held: dict[Any, tuple] = {}  # hold -> its label values, while counted in zklocks_held
        self._session_state: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._children: dict[tuple, Any] = {}  # (metric, label values) -> child: labels() costs a lock and checks
        _instances.add(self)

    def _child(self, metric: Any, labels: tuple) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _labels(self, alias: str, kind: str, name: str) -> tuple:
        if self.family is None:
            return (alias, str(kind))
        return (alias, str(kind), self.family(name))

    # -- acquire --

    def acquire_started(self, attempt: observe.Attempt) -> tuple:
        labels = self._labels(attempt.alias, attempt.kind, attempt.name)
        self._child(self.waiting_now, labels).inc()
        return labels

    def acquire_ended(self, attempt: observe.Attempt, labels: tuple) -> None:
        self._child(self.waiting_now, labels).dec()
        self._child(self.acquire_seconds, (*labels, attempt.result)).observe(attempt.wait)

    # -- holds --

    def held(self, hold: Any) -> None:
        labels = self._labels(hold.alias, hold.kind, hold.name)
        with self._lock:
            self._held[hold] = labels
        self._child(self.held_now, labels).inc()

    def _uncount(self, hold: Any) -> tuple | None:
        with self._lock:
            labels = self._held.pop(hold, None)
        if labels is not None:
            self._child(self.held_now, labels).dec()
        return labels

    def released(self, hold: Any) -> None:
        labels = self._uncount(hold) or self._labels(hold.alias, hold.kind, hold.name)
        self._child(self.hold_seconds, labels).observe(max(0.0, time.monotonic() - hold.acquired_at))

    def lost(self, hold: Any, reason: str) -> None:
        self._child(self.lost_total, (hold.alias, reason)).inc()
        self._uncount(hold)

    def task_deduplicated(self, task: str, outcome: str) -> None:
        self._child(self.task_dedup_total, (task, outcome)).inc()

    # -- sessions --

    def session_state(self, session: Any, state: str) -> None:
        alias = session.alias
        with self._lock:
            old = self._session_state.get(session)
            if old == state:
                return
            replaced = None
            if old is None and state == "connected":
                # A new session takes the place of a lost one of its alias (the pool replaces dead sessions).
                replaced = next((s for s, st in self._session_state.items() if st == "lost" and s.alias == alias), None)
                if replaced is not None:
                    del self._session_state[replaced]
            if state == "closed":
                self._session_state.pop(session, None)
            else:
                self._session_state[session] = state
        if replaced is not None:
            self._child(self.sessions, (alias, "lost")).dec()
        if old is not None:
            self._child(self.sessions, (alias, old)).dec()
        if state != "closed":
            self._child(self.sessions, (alias, state)).inc()

    def reset_after_fork(self) -> None:
        """A forked child holds nothing and has no sessions: its gauges start from zero."""
        self._lock = threading.Lock()
        self._held = {}
        self._session_state = weakref.WeakKeyDictionary()
        self._children = {}
        for gauge in (self.held_now, self.waiting_now, self.sessions):
            gauge._lock = threading.Lock()  # another thread of the parent may have held it at the fork
            gauge.clear()


# At most this many distinct ``family`` label values (per process; in multiprocess mode, per directory); later
# ones are counted as "other".
FAMILY_LIMIT = 100
OTHER_FAMILY = "other"
SHARED_FAMILIES = "zklocks_metrics_families"  # the admitted values, one per line, in PROMETHEUS_MULTIPROC_DIR


class _Bounded:
    """``ZKLOCKS_METRICS_FAMILY`` with at most FAMILY_LIMIT distinct values: each one past them is folded into
    "other" (a warning is logged once), so a function that returns user ids cannot make unbounded series. With
    ``shared_dir`` (PROMETHEUS_MULTIPROC_DIR, whose files every process's metrics are summed from), the values
    admitted are shared by every process in a file there: four workers still make at most FAMILY_LIMIT."""

    def __init__(self, family: Callable[[str], object], shared_dir: str | None = None) -> None:
        self.family = family
        self.seen: set[str] = set()
        self.refused: set[str] = set()
        self.lock = threading.Lock()
        self.warned = False
        self.path = None if shared_dir is None else os.path.join(shared_dir, SHARED_FAMILIES)

    def __call__(self, name: str) -> str:
        value = str(self.family(name))
        with self.lock:
            if value in self.seen or value == OTHER_FAMILY:
                return value
            if value not in self.refused:
                if self._admit(value):
                    self.seen.add(value)
                    return value
                if len(self.refused) < 100_000:  # a refusal is final: the admitted set only grows to its bound
                    self.refused.add(value)
            warn, self.warned = not self.warned, True
        if warn:
            log.warning(
                "zklocks: ZKLOCKS_METRICS_FAMILY gave more than %d distinct values; %r and later new ones are "
                "counted as family=%r",
                FAMILY_LIMIT,
                value[:100],
                OTHER_FAMILY,
            )
        return OTHER_FAMILY

    def _admit(self, value: str) -> bool:
        if self.path is None:
            return len(self.seen) < FAMILY_LIMIT
        try:
            return _admit_shared(self.path, value)
        except OSError as exc:  # an unwritable directory: the per-process bound still holds
            log.warning("zklocks: cannot share the metrics family values in %s: %s", self.path, exc)
            self.path = None
            return len(self.seen) < FAMILY_LIMIT


def _admit_shared(path: str, value: str) -> bool:
    """Whether ``value`` is (or now becomes) one of the at most FAMILY_LIMIT values in ``path``."""
    import fcntl

    line = value.encode("unicode_escape")  # one line per value, whatever it holds
    with open(path, "a+b") as shared:
        fcntl.flock(shared, fcntl.LOCK_EX)  # released as the file closes
        shared.seek(0)
        known = shared.read().splitlines()
        if line in known:
            return True
        if len(known) >= FAMILY_LIMIT:
            return False
        shared.write(line + b"\n")
        shared.flush()
        return True


_instances: weakref.WeakSet = weakref.WeakSet()
_installed: Metrics | None = None


def resolve_family(value: object) -> Callable[[str], object] | None:
    """The ``family`` callable of ``ZKLOCKS_METRICS_FAMILY`` (a callable or its dotted path), or None if unset.

    Raises ZkConfigError when it is neither (system check zklocks.E053 reports the same text)."""
    if value is None:
        return None
    if isinstance(value, str):
        from django.utils.module_loading import import_string

        try:
            found = import_string(value)
        except Exception as exc:  # ImportError, or whatever importing the user's module raises
            raise ZkConfigError(f"settings.ZKLOCKS_METRICS_FAMILY {value!r} cannot be imported: {exc}") from exc
        if not callable(found):
            raise ZkConfigError(f"settings.ZKLOCKS_METRICS_FAMILY {value!r} names {found!r}, which is not callable")
        return found
    if not callable(value):
        raise ZkConfigError(f"settings.ZKLOCKS_METRICS_FAMILY must be a callable or its dotted path, not {value!r}")
    return value


def start(metrics: Metrics) -> Metrics:
    """Feed ``metrics`` from now on (stop with :func:`stop`)."""
    observe.register(metrics)
    return metrics


def stop(metrics: Metrics) -> None:
    observe.unregister(metrics)


def install() -> Metrics | None:
    """Register the metrics in the default registry once, if enabled; the app's ready() calls it."""
    global _installed
    from django.conf import settings

    if prometheus_client is None or getattr(settings, "ZKLOCKS_METRICS", True) is False:
        return None
    if _installed is None:
        try:
            family = resolve_family(getattr(settings, "ZKLOCKS_METRICS_FAMILY", None))
        except ZkConfigError as exc:
            # Never crash ready() (every manage.py command): the system check reports it as zklocks.E053.
            log.warning("zklocks: metrics without the family label: %s", exc)
            family = None
        _installed = start(Metrics(family=family))
    return _installed


def installed() -> Metrics | None:
    return _installed


def exposition() -> tuple[bytes, str]:
    """The text exposition and its content type: of all processes in multiprocess mode, else of this one."""
    if prometheus_client is None:
        raise RuntimeError("zklocks metrics need prometheus_client: pip install 'django-zklocks[metrics]'")
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = prometheus_client.REGISTRY
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST


def reset_after_fork() -> None:
    for metrics in list(_instances):
        metrics.reset_after_fork()


forking.register(reset_after_fork)

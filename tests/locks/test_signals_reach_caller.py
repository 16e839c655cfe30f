"""Exceptions raised by OS signal handlers reach the caller from every wait of zklocks, and whatever the
interrupted call had taken is given back (docs/reference.md, "Signals").

(tests/locks/test_signals.py is about Django signals; this module is about OS signals.)

A SIGALRM handler raises ``Alarm``; the timer is armed for a random fraction of a round, and the round runs one
operation over and over until the alarm ends it: a contended ``with zk_lock`` (so the alarm lands in the
session's start, the create, the listing, the wait for the predecessor and the release), ``ensure_held()``,
``zk_semaphore`` and ``zk_multi_lock``. Every alarm must come out of the round as ``Alarm``; nothing else
(nothing from kazoo above all) may come out; and no node of ours may be left in ZooKeeper afterwards.
"""

from __future__ import annotations

import random
import signal
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from tests.support.helpers import tree, wait_until
from tests.support.interrupts import Interrupted, callees_of, raise_at, traced
from zklocks import zk_lock, zk_multi_lock, zk_semaphore
from zklocks.client.pools import connections
from zklocks.handles import hold_registry
from zklocks.handles.locks import ZkLock

ROUNDS = 30
# The alarm lands this many seconds into a round: from inside the first request to a few turns of the lock.
ALARM_AFTER = (0.0005, 0.04)
# A round whose alarm never surfaced ends this long after the alarm was due ("swallowed").
GRACE = 3.0


class Alarm(Exception):
    """What the test's SIGALRM handler raises (as Celery's soft time limit raises SoftTimeLimitExceeded)."""


class Rounds:
    """Runs rounds under SIGALRM and tells what ended each one."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fired = 0
        self.outcomes: Counter[str] = Counter()
        self.escaped: list[BaseException] = []
        self.lost_at: list[str] = []  # where the alarms that never surfaced were raised
        self._where = ""
        self._at: tuple[str, int] = ("", 0)  # (function, line) where the last alarm was raised
        self._in_finalizer = False

    def _handler(self, signum, frame) -> None:
        self.fired += 1
        stack = traceback.extract_stack(frame)
        here = stack[-4:]
        self._at = (stack[-1].name, stack[-1].lineno)
        self._where = " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in reversed(here))
        # CPython reports an exception raised inside a weakref callback or a __del__ (run by the garbage
        # collector at whatever line dropped the last reference) as unraisable, and the code that was running
        # never sees it: no library can deliver such an alarm (docs/reference.md, "Exceptions raised by signal
        # handlers").
        self._in_finalizer = any(
            f.name == "__del__" or f.filename.endswith(("_weakrefset.py", "/weakref.py")) for f in stack[-2:]
        )
        raise Alarm()

    @contextmanager
    def installed(self) -> Iterator[Rounds]:
        previous = signal.signal(signal.SIGALRM, self._handler)
        try:
            yield self
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def round(self, op: Callable[[], None]) -> None:
        """Arm the alarm, then run ``op`` until it surfaces; record what ended the round."""
        after = self.rng.uniform(*ALARM_AFTER)
        fired_before = self.fired
        outcome = "swallowed"
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, after)
                give_up = time.monotonic() + after + GRACE
                while time.monotonic() < give_up:
                    op()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except Alarm:
            outcome = "alarm"
        except Exception as exc:
            outcome = f"{type(exc).__module__}.{type(exc).__qualname__}"
            self.escaped.append(exc)
        if outcome == "swallowed" and self.fired > fired_before and self._in_finalizer:
            outcome = "raised in a finalizer"
        elif outcome != "alarm" and self.fired > fired_before:
            self.lost_at.append(f"{outcome}: {self._where}")
        if outcome == "swallowed" and self.fired == fired_before:
            outcome = "never fired"
        self.outcomes[outcome] += 1

    def check(self, rounds: int) -> None:
        assert self.escaped == [], (dict(self.outcomes), self.escaped[:3], self.lost_at)
        assert self.lost_at == [], (dict(self.outcomes), self.lost_at)
        in_finalizer = self.outcomes["raised in a finalizer"]
        assert in_finalizer <= rounds // 10, dict(self.outcomes)  # rare: the GC's timing, not zklocks' waits
        assert self.outcomes["alarm"] + in_finalizer == rounds, dict(self.outcomes)
        assert self.fired == rounds


class Rival:
    """Another session (alias "other") that takes ``take()`` part of the time, in a thread of its own."""

    def __init__(self, take: Callable[[], object], seed: int) -> None:
        self.take = take
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.turns = 0
        self.thread = threading.Thread(target=self._run, name="rival", daemon=True)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                with self.take():
                    self.turns += 1
                    time.sleep(self.rng.uniform(0.0, 0.02))
                self.stop.wait(self.rng.uniform(0.0, 0.02))
        except BaseException as exc:
            self.errors.append(exc)

    def __enter__(self) -> Rival:
        self.thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop.set()
        self.thread.join(30)
        if exc_type is not None:
            return  # the test's own failure says more than a rival blocked behind what it left held
        assert not self.thread.is_alive()
        assert self.errors == []
        assert self.turns > 0


@pytest.fixture
def aliases(zklocks_settings):
    """'default' (the test's thread) and 'other' (the rival): two sessions on one namespace."""
    alias = zklocks_settings()
    return zklocks_settings(EXTRA_ALIASES={"other": dict(alias)})


def ephemeral_nodes(kz, namespace: str) -> list[str]:
    return [path for path in tree(kz, namespace) if (stat := kz.exists(path)) and stat.ephemeralOwner]


def assert_nothing_left(kz, namespace: str) -> None:
    """No contender, holder or lease node of ours is left (the releases and give-backs sent without waiting
    are applied within a round trip; a node handed to the background delete within a few)."""
    try:
        wait_until(lambda: not ephemeral_nodes(kz, namespace), timeout=5)
    except AssertionError:
        left = {path: kz.get(path)[0] for path in ephemeral_nodes(kz, namespace)}
        raise AssertionError(f"nodes left: {left}") from None


def restart_session() -> None:
    """End the test thread's session, so that the next acquire starts one (and the alarm may land there)."""
    session = connections["default"].ready_session()
    if session is not None:
        session.close()


def held_here() -> list[tuple]:
    """The holds this thread has in its registry, of this module's locks."""
    me = threading.get_ident()
    return [
        key for key in hold_registry.registry if getattr(key[0], "ident", None) == me and str(key[2]).startswith("sig-")
    ]


def rounds_of(op: Callable[[], None], seed: int, *, restart_every: int = 0, kept: list | None = None) -> Rounds:
    """Rounds of ``op`` (a with statement); after each, whatever the alarm interrupted, this thread holds nothing.

    The one exception the reference documents: an alarm on the first instruction of the handle's ``__exit__``
    leaves the hold on the handle (``kept[-1]``, the handle of op's last with statement), and its ``release()``
    frees it."""
    rounds = Rounds(seed)
    left: list = []
    at_entry = 0
    with rounds.installed():
        for n in range(ROUNDS):
            if restart_every and n % restart_every == 0:
                restart_session()
            rounds.round(op)
            handle = kept[-1] if kept else None
            if handle is not None and held_here() and rounds._at == first_line(type(handle).__exit__):
                at_entry += 1
                handle.release()
            if held_here():
                left.append((n, rounds._where, held_here()))
                break
    assert left == []
    assert at_entry <= ROUNDS // 5, at_entry  # one instruction: rare
    return rounds


def test_alarm_reaches_a_contended_with_zk_lock(aliases, kz):
    name = "sig-with"
    rng = random.Random(1)

    kept: list = []

    def op() -> None:
        kept[:] = [zk_lock(name)]
        with kept[0]:
            time.sleep(rng.uniform(0.0, 0.002))

    with Rival(lambda: zk_lock(name, using="other"), seed=2) as rival:
        rounds = rounds_of(op, seed=3, restart_every=3, kept=kept)
    rounds.check(ROUNDS)
    assert rival.turns > 0
    assert_nothing_left(kz, aliases["NAMESPACE"])
    other = zk_lock(name, using="other")
    assert other.acquire(blocking=False)
    other.release()


def test_alarm_reaches_ensure_held(aliases, kz):
    name = "sig-ensure"
    lock = zk_lock(name)

    def op() -> None:
        lock.ensure_held()

    rounds = Rounds(seed=4)
    with rounds.installed():
        for n in range(ROUNDS):
            if n % 5 == 0:
                restart_session()
            lock.acquire()
            try:
                rounds.round(op)
            finally:
                lock.release()
    rounds.check(ROUNDS)
    assert not lock.is_held
    assert_nothing_left(kz, aliases["NAMESPACE"])
    other = zk_lock(name, using="other")
    assert other.acquire(blocking=False)
    other.release()


def test_alarm_reaches_a_contended_zk_semaphore(aliases, kz):
    name = "sig-sem"
    rng = random.Random(5)

    kept: list = []

    def op() -> None:
        kept[:] = [zk_semaphore(name, 1)]
        with kept[0]:
            time.sleep(rng.uniform(0.0, 0.002))

    with Rival(lambda: zk_semaphore(name, 1, using="other"), seed=6):
        rounds = rounds_of(op, seed=7, restart_every=5, kept=kept)
    rounds.check(ROUNDS)
    assert_nothing_left(kz, aliases["NAMESPACE"])
    other = zk_semaphore(name, 1, using="other")
    assert other.acquire(blocking=False)
    other.release()


def test_alarm_reaches_a_contended_zk_multi_lock(aliases, kz):
    names = ["sig-multi-a", "sig-multi-b"]
    rng = random.Random(8)

    kept: list = []

    def op() -> None:
        kept[:] = [zk_multi_lock(names)]
        with kept[0]:
            time.sleep(rng.uniform(0.0, 0.002))

    with Rival(lambda: zk_lock(names[1], using="other"), seed=9):
        rounds = rounds_of(op, seed=10, restart_every=5, kept=kept)
    rounds.check(ROUNDS)
    assert_nothing_left(kz, aliases["NAMESPACE"])
    other = zk_multi_lock(names, using="other")
    assert other.acquire(blocking=False)
    other.release()


def first_line(function) -> tuple[str, int]:
    return function.__name__, function.__code__.co_firstlineno


@pytest.mark.parametrize("form", ["with", "release()"])
def test_an_alarm_in_a_release_leaves_nothing_held(aliases, kz, form):
    """Uncontended cycles, so that many alarms land in the acquire's and the release's bookkeeping: after each
    round the thread holds nothing (no hold left in its registry or on the handle). The one exception is an alarm
    on the first instruction of ``release()`` or ``__exit__``, before any of their code runs (docs/reference.md,
    "Exceptions raised by signal handlers"): the hold stays on the handle, and ``release()`` frees it."""
    name = f"sig-release-{form}"
    handle = zk_lock(name)
    entries = {first_line(ZkLock.release), first_line(ZkLock.__exit__)}

    def op() -> None:
        if form == "with":
            with handle:
                pass
        else:
            handle.acquire()
            handle.release()

    rounds = Rounds(seed=11)
    leftovers = []
    at_entry = 0
    with rounds.installed():
        for n in range(ROUNDS * 10):
            rounds.round(op)
            if handle.is_held and rounds._at in entries:
                at_entry += 1
                handle.release()
            mine = [key for key in hold_registry.registry if key[1:] == ("default", name)]
            if mine or handle.is_held:
                leftovers.append((n, rounds._where, mine, handle.is_held))
                break
    assert leftovers == []
    assert at_entry <= ROUNDS, at_entry  # one instruction: rare
    rounds.check(ROUNDS * 10)
    assert_nothing_left(kz, aliases["NAMESPACE"])
    print(f"{form}: {ROUNDS * 10} alarms, {at_entry} on the first instruction of release or __exit__")


def raise_after_yield_from(code, error: BaseException) -> list:
    """A tracer that raises ``error`` in the first frame of ``code`` as its ``yield from`` returns, before the value
    is stored: as a signal handler's exception can land there. The delegated generator's StopIteration, which the
    tracer sees in that frame, is that moment."""
    import sys

    seen: list = []

    def local(frame, event, arg):
        if event == "exception" and arg[0] is StopIteration and not seen:
            seen.append(frame.f_lineno)
            raise error
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code is code and not seen else None

    sys.settrace(tracer)
    return seen


EXIT_FORMS: dict[str, Callable[[], object]] = {
    "zk_lock": lambda: zk_lock("sig-exit-lock"),
    "zk_semaphore": lambda: zk_semaphore("sig-exit-sem", 1),
    "zk_multi_lock": lambda: zk_multi_lock(["sig-exit-a", ("sig-exit-b", "shared")]),
}


@pytest.mark.parametrize("way", ["__exit__", "release"])
@pytest.mark.parametrize("form", list(EXIT_FORMS))
def test_an_exception_in_any_call_of_a_release_leaves_nothing_held(aliases, kz, form, way):
    """Each function that the with statement's ``__exit__`` (or ``release()``) calls takes, in its turn, the
    exception on its first instruction (where a signal handler's lands when the alarm falls due during the call
    before it). Whatever the call, the exception comes out and nothing stays held: the SIGALRM rounds above found
    the multi-lock's ``__exit__`` asking for its owner before its ``try``."""
    make = EXIT_FORMS[form]
    exit_code = getattr(type(make()), way).__code__

    def leave(handle) -> None:
        if way == "release":
            handle.release()
        else:
            handle.__exit__(None, None, None)

    def cycle() -> None:
        handle = make()
        handle.__enter__()
        leave(handle)

    callees = callees_of(exit_code, cycle)
    assert callees
    left = []
    for code in callees:
        handle = make()
        handle.__enter__()
        tracer, seen = raise_at(code, caller=exit_code)
        with pytest.raises(Interrupted):
            with traced(tracer):
                leave(handle)
        assert len(seen) == 1, code.co_qualname
        if held_here() or handle.is_held:
            left.append((code.co_qualname, held_here()))
            handle.release()
    assert left == []
    assert_nothing_left(kz, aliases["NAMESPACE"])


def test_an_exception_as_the_granted_node_is_returned_gives_it_back(aliases, kz):
    """The window the SIGALRM loop above found: an exception that lands in take_hold_steps as the recipe returns
    the granted node, before any record of it (where no recipe's ``except`` runs), leaves no node behind."""
    import sys

    from zklocks.handles import hold_registry as registry_module

    lock = zk_lock("sig-granted")
    seen = raise_after_yield_from(registry_module.take_hold_steps.__code__, Alarm())
    try:
        with pytest.raises(Alarm):
            lock.acquire()
    finally:
        sys.settrace(None)
    assert len(seen) == 1
    assert not lock.is_held and not held_here()
    assert_nothing_left(kz, aliases["NAMESPACE"])
    with zk_lock("sig-granted", using="other", timeout=5):
        pass


def test_a_handler_that_calls_zklocks_while_its_thread_starts_a_session_is_answered_at_once(settings):
    """The handler interrupts the start of the thread's session (ZooKeeper unreachable: the start lasts
    CONNECT_TIMEOUT) and takes a lock itself: it gets ZkUnavailable at once instead of waiting for the start it
    interrupted, which then ends as it would have."""
    from zklocks import ZkUnavailable
    from zklocks.client.pools import close_all
    from zklocks.testing.server import free_port

    settings.ZKLOCKS = {
        "default": {"HOSTS": f"127.0.0.1:{free_port()}", "NAMESPACE": "/sig-start", "CONNECT_TIMEOUT": 2.0}
    }
    close_all()
    answered: list[tuple[str, float]] = []

    def handler(signum, frame) -> None:
        began = time.monotonic()
        try:
            zk_lock("sig-in-handler", blocking=False).acquire()
            answered.append(("acquired", time.monotonic() - began))
        except Exception as exc:
            answered.append((type(exc).__name__, time.monotonic() - began))

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        began = time.monotonic()
        with pytest.raises(ZkUnavailable):
            zk_lock("sig-outer").acquire(timeout=10)
        outer = time.monotonic() - began
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        close_all()
    assert len(answered) == 1 and answered[0][0] == "ZkUnavailable", answered
    assert answered[0][1] < 0.5, f"the handler waited {answered[0][1]:.2f} s"
    assert outer < 2.0 + 1.0, f"the interrupted start took {outer:.2f} s (CONNECT_TIMEOUT 2 s)"


@pytest.mark.parametrize("point", ["connected", "settled"])
def test_an_exception_once_the_session_connected_closes_it(aliases, point):
    """The exception lands after kazoo connected the new session, before the pool has it: as the session marks
    itself connected, or as the pool waits for the sessions it gave up to be closed. The session is closed (no
    connected session that nobody uses), and the next call starts one."""
    from zklocks.client import abandoned
    from zklocks.client.interrupts import new_event
    from zklocks.client.pools import Pool, close_all
    from zklocks.client.session import Session

    close_all()
    code, caller = {
        "connected": (type(new_event()).set.__code__, Session.start.__code__),
        "settled": (abandoned.settle.__code__, Pool._start.__code__),
    }[point]
    tracer, seen = raise_at(code, caller=caller)
    with pytest.raises(Interrupted), traced(tracer):
        zk_lock("sig-start").acquire()
    assert len(seen) == 1
    frame = seen[0].f_back
    session = frame.f_locals["self" if point == "connected" else "session"]
    assert isinstance(session, Session) and session.dead
    wait_until(lambda: not session.client.connected, timeout=10)
    assert connections["default"].ready_session() is None
    with zk_lock("sig-start", timeout=5):
        pass

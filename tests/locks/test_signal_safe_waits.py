"""The condition and Event under kazoo's results and zklocks' waits (zklocks/client/interrupts.py): an exception
raised by a signal handler, wherever it lands in them, leaves no lock taken, hides behind no RuntimeError and
loses no wake-up. threading's own Condition fails the first of these within a few alarms."""

from __future__ import annotations

import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from zklocks.client.interrupts import SafeEvent

ROUNDS = 4000


class Alarm(Exception):
    pass


@contextmanager
def alarms() -> Iterator[None]:
    def handler(signum, frame):
        raise Alarm()

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_alarm_in_a_wait_leaves_the_lock_free_and_comes_out_as_itself():
    rng = random.Random(1)
    event = SafeEvent()
    outcomes: dict[str, int] = {}
    with alarms():
        for _ in range(ROUNDS):
            try:
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 40e-6))
                try:
                    for _ in range(20):
                        event.wait(rng.choice((0, 1e-5)))
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                outcome = "none"
            except Alarm:
                outcome = "alarm"
            except RuntimeError:
                outcome = "masked"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            assert not event._cond._is_owned(), outcomes
            # Another thread can take the lock (as kazoo's worker thread does to set a result).
            taker = threading.Thread(target=lambda: event._cond.acquire(timeout=2) and event._cond.release())
            taker.start()
            taker.join(3)
            assert not taker.is_alive(), outcomes
    assert outcomes.get("masked", 0) == 0, outcomes
    assert outcomes.get("alarm", 0) > ROUNDS // 10, outcomes  # the alarms did land in the waits


def test_an_alarm_in_a_set_loses_no_wake_up():
    rng = random.Random(2)
    interrupted = rounds = 0
    with alarms():
        while interrupted < 20 and rounds < 3000:  # until enough alarms landed in the set, however fast it runs
            rounds += 1
            event = SafeEvent()
            woken = threading.Event()
            waiter = threading.Thread(target=lambda e=event, w=woken: (e.wait(5.0), w.set()), daemon=True)
            waiter.start()
            while not event._cond._waiters:
                time.sleep(0)
            try:
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(5e-6, 60e-6))
                    for _ in range(rng.randrange(0, 600)):
                        pass
                    event.set()
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except Alarm:
                interrupted += 1
            if not event.is_set():
                event.set()  # the alarm came before the set did anything: set now
            assert woken.wait(1.0), "the waiter was not woken although the flag is set"
    assert interrupted > 0, rounds


def test_the_cpython_internals_are_checked_and_their_absence_falls_back_to_the_standard_library(monkeypatch):
    from zklocks.checks import check_kazoo
    from zklocks.client import interrupts

    missing = interrupts.cpython_internals_missing()  # none on 3.12 and 3.13; early 3.11 releases lack one
    assert (type(interrupts.new_event()) is interrupts.SafeEvent) == (not missing)
    assert bool([m for m in check_kazoo() if m.id == "zklocks.W062"]) == bool(missing)
    monkeypatch.setattr(interrupts, "RLOCK_INTERNALS", (*interrupts.RLOCK_INTERNALS, "_gone_in_a_later_python"))
    (warning,) = [m for m in check_kazoo() if m.id == "zklocks.W062"]
    assert "_thread.RLock._gone_in_a_later_python" in warning.msg
    monkeypatch.setattr(interrupts, "RLOCK_INTERNALS", interrupts.RLOCK_INTERNALS[:-1])
    # A Python newer than the suite has run on (3.14's with statement) takes the fallback too.
    monkeypatch.setattr(interrupts, "TESTED_UP_TO", (3, sys.version_info[1] - 1))
    (warning,) = [m for m in check_kazoo() if m.id == "zklocks.W062"]
    assert f"after a C __enter__ (Python 3.{sys.version_info[1]})" in warning.msg
    monkeypatch.setattr(interrupts, "_SAFE_WAITS", False)
    assert type(interrupts.new_event()) is threading.Event
    assert type(interrupts.new_condition()) is threading.Condition

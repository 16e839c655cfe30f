import threading

import pytest

from tests.support.helpers import wait_until
from zklocks import signals, zk_lock

pytestmark = pytest.mark.zk


def test_acquired_and_released_signals_carry_name_alias_token_and_times():
    events = []

    def on_acquired(sender, **kw):
        events.append(("acquired", kw, threading.current_thread().name))

    def on_released(sender, **kw):
        events.append(("released", kw, threading.current_thread().name))

    signals.lock_acquired.connect(on_acquired)
    signals.lock_released.connect(on_released)
    try:
        with zk_lock("signalled") as lock:
            token = lock.token
        wait_until(lambda: len(events) == 2, timeout=5)
    finally:
        signals.lock_acquired.disconnect(on_acquired)
        signals.lock_released.disconnect(on_released)
    (kind1, acquired, t1), (kind2, released, t2) = events
    assert (kind1, kind2) == ("acquired", "released")
    assert acquired["name"] == "signalled" and acquired["alias"] == "default" and acquired["token"] == token
    assert acquired["wait_time"] >= 0 and acquired["kind"] == "exclusive"
    assert released["token"] == token and released["held_time"] >= 0
    assert t1 == t2 == "zklocks-signals"

import threading
import time

import pytest
from django.test import override_settings

from tests.support.helpers import wait_until
from zklocks import signals, zk_lock
from zklocks.client.pools import connections
from zklocks.testing.proxy import TcpProxy

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


def test_a_blocking_signal_receiver_does_not_delay_loss_detection(own_zk):
    proxy = TcpProxy("127.0.0.1", own_zk.port).start()

    def slow_receiver(sender, **kw):
        time.sleep(6)

    signals.lock_acquired.connect(slow_receiver, dispatch_uid="slow")
    try:
        with override_settings(
            ZKLOCKS={
                "default": {
                    "HOSTS": proxy.hosts,
                    "NAMESPACE": "/slow-receiver",
                    "SESSION_TIMEOUT": 1.5,
                    "CONNECT_TIMEOUT": 1.0,
                }
            }
        ):
            lock = zk_lock("watched")
            lock.acquire()
            session = connections["default"].session()
            proxy.partition()
            started = time.monotonic()
            wait_until(lambda: session.dead, timeout=4)  # declared lost by the bound, not after the receiver
            assert time.monotonic() - started < 2.5
            lock.release()
    finally:
        signals.lock_acquired.disconnect(dispatch_uid="slow")
        proxy.stop()

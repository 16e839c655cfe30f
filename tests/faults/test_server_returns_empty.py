"""A server that comes back empty (or older, restored from a snapshot) refuses every session that has seen a
newer zxid, for good. A process that had a session must not stay broken: the session is dropped after a whole
session timeout without a connection, its holds are reported lost, and a fresh session serves the next call."""

import logging
import time

import pytest

from tests.support.helpers import zk_settings
from zklocks import LockLost, ZkUnavailable, zk_lock
from zklocks.client.pools import close_all
from zklocks.testing import ZkServer

pytestmark = [pytest.mark.zk, pytest.mark.timeout(120)]

# Longer than a restart of the server takes, so that it is back (and refusing) while the session still waits.
SESSION_TIMEOUT = 6.0
CONNECT_TIMEOUT = 2.0


def recover_after_wipe(server, held) -> float:
    """Restart ``server`` with its data wiped; the seconds until a lock call works again in this process."""
    server.restart(wipe=True)
    back = time.monotonic()
    errors = []
    while True:
        try:
            with zk_lock("after-the-wipe", timeout=1) as lock:
                assert lock.is_held
            break
        except ZkUnavailable as exc:  # never anything else meanwhile: an outage is no contention
            errors.append(str(exc))
            assert time.monotonic() - back < SESSION_TIMEOUT + CONNECT_TIMEOUT + 10, errors[-3:]
            time.sleep(0.1)
    recovered = time.monotonic() - back
    assert errors, "the empty server was back before the session timeout: it should have refused the session"
    print(f"recovered {recovered:.2f}s after the empty server was back ({len(errors)} ZkUnavailable)")
    assert recovered <= SESSION_TIMEOUT + CONNECT_TIMEOUT + 1.0, recovered
    return recovered


def warm_up() -> None:
    for i in range(30):  # the session sees zxids that an empty server will not reach soon
        with zk_lock(f"warm-{i}"):
            pass


@pytest.fixture
def settings_on(caplog):
    caplog.set_level(logging.WARNING, logger="zklocks")
    server = ZkServer(tick_time=500).start()  # sessions of up to 10 s
    try:
        with zk_settings(
            server.hosts, "/empty", SESSION_TIMEOUT=SESSION_TIMEOUT, CONNECT_TIMEOUT=CONNECT_TIMEOUT, TICK_TIME=0.5
        ):
            try:
                yield server
            finally:
                close_all()
    finally:
        server.cleanup()


def test_an_idle_process_recovers_and_says_why(settings_on, caplog):
    warm_up()  # then nothing is held or awaited: no lease runs out, only the reconnects fail
    recover_after_wipe(settings_on, None)
    warnings = [r.getMessage() for r in caplog.records if "could not reconnect" in r.getMessage()]
    assert warnings, [r.getMessage() for r in caplog.records]
    assert "dropping the session" in warnings[0] and "empty or older data" in warnings[0]


def test_a_holding_process_reports_the_loss_and_recovers(settings_on, caplog):
    warm_up()
    held = zk_lock("held-through-the-wipe")
    assert held.acquire(timeout=5)
    recover_after_wipe(settings_on, held)
    assert not held.is_held
    with pytest.raises(LockLost):
        held.ensure_held()
    held.release()  # never raises for a lost lock
    lost = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert any("held-through-the-wipe" in m for m in lost), lost

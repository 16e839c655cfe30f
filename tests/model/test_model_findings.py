"""The stateful model's findings as plain tests (tests/model/findings.py has the shrunk programs).

Each runs the finding's program in a process that held its lock on a live session before the fault. The ones
still open (findings.OPEN) are expected failures naming the issue that owns the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
import uuid

import pytest
from kazoo.recipe.lock import Lock as KazooLock

from tests.model.actors import MarkingWork
from tests.model.machine import link_settled
from tests.support.helpers import raw_client, wait_until, zk_settings
from tests.support.threads import HeldInThread
from zklocks import LockLost, lock_path, zk_lock
from zklocks.client.pools import close_all
from zklocks.testing import ZkServer
from zklocks.testing.proxy import TcpProxy

SESSION_TIMEOUT = 4.0

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server():
    with ZkServer(tick_time=200) as zk:
        yield zk


@pytest.fixture
def linked(server):
    """This process reaches the server through a proxy (the link a blip cuts); others reach it directly."""
    proxy = TcpProxy("127.0.0.1", server.port).start()
    override = zk_settings(proxy.hosts, f"/findings/{uuid.uuid4().hex[:8]}", SESSION_TIMEOUT=SESSION_TIMEOUT)
    override.enable()
    observer = raw_client(server.hosts)
    try:
        yield proxy, observer
    finally:
        close_all(wait=False)
        override.disable()
        proxy.stop()
        observer.stop()
        observer.close()


def test_an_idle_holder_keeps_its_hold_through_a_silent_blip_of_half_the_session_timeout(linked):
    # Model: acquire(t1, x); restart_with_data(); silent_blip(1.5); silent_blip(1.5) -> t1 lost 'x'.
    proxy, _ = linked
    holder = HeldInThread(zk_lock("idle"))
    assert holder.acquired is True
    try:
        phases = random.Random(7)
        for _ in range(8):  # blips at spread moments of the lease's cycle, the worst among them
            time.sleep(phases.uniform(0, 1.5))
            proxy.partition(refuse_new=False)
            time.sleep(SESSION_TIMEOUT / 2)
            proxy.heal()
            time.sleep(1)  # reconnected, idle again
    finally:
        holder.release()  # checks ensure_held() in the holder's thread first
    assert holder.lost is None, f"the idle holder lost its hold: {holder.lost!r}"


def test_an_idle_holder_keeps_its_hold_through_a_silent_blip_of_half_the_session_timeout_after_a_reconnect(linked):
    # Model: acquire(t1, x, blocking=False); acquire_while_down(t2, x); silent_blip(2.0) -> t1 lost 'x'. The blip
    # began while the process was still reconnecting on kazoo's backoff after the outage, so the server saw the
    # outage, the backoff and the blip as one silence; the model now blips a working link. From one, after each
    # reconnect, half the timeout is survived.
    proxy, _ = linked
    holder = HeldInThread(zk_lock("reconnected"))
    assert holder.acquired is True
    try:
        for _ in range(3):
            proxy.partition()  # connections refused: the process reconnects on its backoff once healed
            time.sleep(1.0)
            proxy.heal()
            wait_until(link_settled, timeout=2 * SESSION_TIMEOUT)  # reconnected and renewed: a working link
            proxy.partition(refuse_new=False)
            time.sleep(SESSION_TIMEOUT / 2)
            proxy.heal()
            wait_until(link_settled, timeout=2 * SESSION_TIMEOUT)
    finally:
        holder.release()
    assert holder.lost is None, f"the idle holder lost its hold: {holder.lost!r}"


def release_during_an_outage(server, name: str) -> None:
    """Hold ``name``, stop the server, release, stay away for more than a session timeout (the session is given
    up), and start the server again with its data."""
    lock = zk_lock(name)
    assert lock.acquire(timeout=5)
    server.stop()
    try:
        lock.release()
        time.sleep(SESSION_TIMEOUT + 1)
    finally:
        server.start()


def test_a_lock_released_during_an_outage_is_free_within_a_second_of_the_server_coming_back(server, linked):
    # Model: acquire(t1, x); release_during_outage(t1, x) -> x still held ~ a session timeout after the restart,
    # until abandoned.py closed the given-up session once the server answered.
    release_during_an_outage(server, "outage")
    path = lock_path("outage")
    back = time.monotonic()
    observer = raw_client(server.hosts)  # a fresh one: the suite's observer reconnects on kazoo's backoff
    try:
        took = wait_until(lambda: not observer.exists(path) or not observer.get_children(path), timeout=15)
        free_after = time.monotonic() - back
        assert took and free_after <= 1.0, f"free {free_after:.2f} s after the server came back"
    finally:
        observer.stop()
        observer.close()


def test_the_first_try_lock_after_the_restart_finds_a_lock_released_during_the_outage_free(server, linked):
    """The same outage, seen by the process itself: its first try-lock once ZooKeeper is back must not read its own
    previous session's ghost as "held elsewhere" (a Celery skip, a 409). A new session waits for the closers of
    the sessions its alias gave up (abandoned.settle) before its first acquire."""
    release_during_an_outage(server, "outage-again")
    assert zk_lock("outage-again", blocking=False).acquire() is True


def test_work_in_to_thread_under_cancel_stops_before_the_next_holder_is_granted(server, linked):
    # Model: cancel_work_in_a_thread() -> the thread's work wrote after the next holder's grant. It stops at its
    # checkpoints now, which raise in a thread started from the holding task even once the task has left.
    proxy, observer = linked
    work = MarkingWork(3 * SESSION_TIMEOUT)

    async def body():
        async with zk_lock("work", on_lost="cancel"):
            await asyncio.to_thread(work)

    def run() -> None:
        with contextlib.suppress(LockLost):  # how the holder learns that its lock was lost
            asyncio.run(body())

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    assert work.started.wait(10)
    proxy.partition(refuse_new=False)
    try:
        nxt = KazooLock(observer, lock_path("work"))
        assert nxt.acquire(timeout=3 * SESSION_TIMEOUT)
        granted = time.monotonic()
    finally:
        proxy.heal()
    nxt.release()
    runner.join(4 * SESSION_TIMEOUT)
    late = work.after(granted)
    assert not late, f"the work ran {late[-1] - granted:.2f} s past the next holder's grant"

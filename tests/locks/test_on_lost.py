"""on_lost="cancel" and max_hold on real servers: the work stops no later than the lease ends, at its next
checkpoint for a thread (docs/lost.md)."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from tests.support.helpers import raw_client, wait_until, zk_settings
from zklocks import LockLost, checkpoint, signals, zk_leader, zk_lock, zk_multi_lock, zk_rw_lock, zk_semaphore
from zklocks.client import clock, lease
from zklocks.client.pools import connections


def spin_until_stopped(limit: float) -> None:
    """Work in small steps, each behind a checkpoint, for ``limit`` seconds, unless LockLost stops it."""
    ends = time.monotonic() + limit
    while time.monotonic() < ends:
        checkpoint()
        spin_for(0.001)


def session_of(alias: str = "default"):
    return connections[alias].session()


def session_timeout() -> float:
    return session_of().timeout


@pytest.mark.timeout(60)
def test_cancel_lands_in_the_body_no_later_than_the_lease_deadline(own_zk):
    with zk_settings(own_zk.hosts, "/onlost-deadline"):
        lock = zk_lock("frozen", on_lost="cancel")
        with pytest.raises(LockLost):  # the body caught the stop: the with statement says it again
            with lock:
                own_zk.pause()
                try:
                    with pytest.raises(LockLost) as info:
                        spin_until_stopped(20)
                    stopped = clock.now()
                finally:
                    own_zk.resume()
                assert not lock.is_held
        exc = info.value
        print(f"stopped {1000 * (stopped - exc.lease_end):+.1f} ms from the lease's end")
        # Declared up to 150 ms ahead of the lease's end (at most half the renewal lead); the bound is the leader's
        # earliest expiry after it (lease.py's margin), room for a thread starved of CPU on a loaded machine.
        assert stopped <= exc.lease_end + lease.loss_margin(session_timeout())


@pytest.mark.timeout(60)
def test_without_cancel_the_body_runs_on_past_the_loss(own_zk):
    """The control: on_lost="notify" (the default) stops nothing, the body only sees is_held turn False."""
    with zk_settings(own_zk.hosts, "/onlost-notify"):
        with zk_lock("frozen") as lock:
            own_zk.pause()
            try:
                assert wait_until(lambda: not lock.is_held, timeout=15)
                time.sleep(0.3)  # no LockLost arrives
            finally:
                own_zk.resume()


@pytest.mark.timeout(60)
def test_cancel_on_a_real_session_expiry(zk_server, zk_expire):
    with zk_settings(zk_server.hosts, "/onlost-expire"):
        lock = zk_lock("expire", on_lost="cancel")
        with pytest.raises(LockLost) as info:
            with lock:
                zk_expire(zk_server.hosts, session_of())
                ends = time.monotonic() + 15
                while time.monotonic() < ends:
                    checkpoint()
                    time.sleep(0.01)
        assert info.value.reason == "expired"
        with zk_lock("expire", timeout=5) as again:  # the next holder is not kept out
            assert again.is_held


@pytest.mark.timeout(60)
def test_cancel_on_a_partition_from_the_server(zk_server):
    """A proxy between client and server cuts the link: the lease runs out and the body stops."""
    from zklocks.testing.proxy import TcpProxy

    proxy = TcpProxy("127.0.0.1", zk_server.port).start()
    try:
        with zk_settings(proxy.hosts, "/onlost-partition"):
            lock = zk_lock("cut", on_lost="cancel")
            with pytest.raises(LockLost):
                with lock:
                    proxy.partition()
                    spin_until_stopped(15)
                    raise AssertionError("not stopped")
    finally:
        proxy.stop()


@pytest.mark.timeout(60)
def test_cancel_never_lands_after_the_with_statement(zk_server):
    """Losses (a force-release from another client) at random moments around the end of the body: LockLost is
    raised inside the with statement or not at all, never in the code after it nor in the release. An open alias:
    its holders watch their own node from the grant, so a delete within the first second is heard (a guarded
    alias's holders set that watch once a hold has lasted one second)."""
    with zk_settings(zk_server.hosts, "/onlost-race", AUTH="open"):
        kz = raw_client(zk_server.hosts)
        try:
            outcomes = {"inside": 0, "none": 0}
            for i in range(120):
                lock = zk_lock(f"race-{i}", on_lost="cancel")
                after = False
                try:
                    with lock:
                        node = lock._hold().contender.node
                        killer = threading.Timer(random.uniform(0, 0.02), kz.delete_async, args=(node,))
                        killer.start()
                        spin_until_stopped(random.uniform(0, 0.08))  # the stop takes some ms: both sides
                    after = True
                    spin_until_stopped(0.02)  # the code after the with statement: no checkpoint raises here
                    outcomes["none"] += 1
                except LockLost:
                    assert not after, "LockLost landed after the with statement"
                    outcomes["inside"] += 1
                killer.join()
                assert not lock._mine, "the hold was not released"
            print(outcomes)
            assert outcomes["inside"] > 0 and outcomes["none"] > 0  # both sides of the race were run
        finally:
            kz.stop()
            kz.close()


def spin_for(seconds: float) -> None:
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        pass


# -- asyncio --


@pytest.mark.timeout(60)
def test_async_with_cancels_the_task_and_raises_lock_lost(own_zk):
    async def main():
        lock = zk_lock("aio", on_lost="cancel")
        with pytest.raises(LockLost) as info:
            async with lock:
                own_zk.pause()
                try:
                    await asyncio.sleep(20)
                finally:
                    own_zk.resume()
        return info.value, clock.now()

    with zk_settings(own_zk.hosts, "/onlost-aio"):
        exc, stopped = asyncio.run(main())
    assert not isinstance(exc, asyncio.CancelledError)
    print(f"task stopped {1000 * (stopped - exc.lease_end):+.1f} ms from the lease's end")
    assert stopped <= exc.lease_end + lease.loss_margin(2.0)  # as for threads (see above)


@pytest.mark.timeout(60)
def test_an_outside_cancellation_stays_a_cancelled_error(zk_server):
    async def main():
        lock = zk_lock("aio-outside", on_lost="cancel")

        async def body():
            async with lock:
                await asyncio.sleep(20)

        task = asyncio.create_task(body())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return lock

    with zk_settings(zk_server.hosts, "/onlost-aio-outside"):
        lock = asyncio.run(main())
        assert not lock._mine


@pytest.mark.timeout(60)
def test_an_async_decorated_function_is_cancelled_on_expiry(zk_server, zk_expire):
    @zk_lock("deco:{n}", on_lost="cancel")
    async def work(n):
        zk_expire(zk_server.hosts, session_of())
        await asyncio.sleep(20)

    with zk_settings(zk_server.hosts, "/onlost-aio-deco"):
        with pytest.raises(LockLost):
            asyncio.run(asyncio.wait_for(work(1), 15))


# -- every kind of handle --


def kinds():
    return {
        "semaphore": lambda: zk_semaphore("sem", 2, on_lost="cancel"),
        "rw-read": lambda: zk_rw_lock("rw", on_lost="cancel").read,
        "rw-write": lambda: zk_rw_lock("rw", on_lost="cancel").write,
        "multi": lambda: zk_multi_lock(["m1", ("m2", "shared")], on_lost="cancel"),
        "leader": lambda: zk_leader("lead", on_lost="cancel"),
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", sorted(kinds()))
def test_every_kind_stops_its_holder_on_expiry(zk_server, zk_expire, kind):
    with zk_settings(zk_server.hosts, f"/onlost-kind-{kind}"):
        handle = kinds()[kind]()
        with pytest.raises(LockLost):
            with handle:
                zk_expire(zk_server.hosts, session_of())
                spin_until_stopped(15)
                raise AssertionError("not stopped")
        assert not handle.is_held


# -- max_hold --


@pytest.mark.timeout(60)
def test_max_hold_ends_a_notified_hold_and_hands_over_at_once(zk_server):
    lost = []

    def on_lost(sender, **kw):
        lost.append(kw["reason"])

    signals.lock_lost.connect(on_lost)
    try:
        with zk_settings(zk_server.hosts, "/maxhold-notify"):
            got = {}

            def waiter():
                time.sleep(0.1)
                with zk_lock("capped", timeout=10):
                    got["at"] = time.monotonic()

            with zk_lock("capped", max_hold=0.6) as lock:
                started = time.monotonic()
                t = threading.Thread(target=waiter)
                t.start()
                time.sleep(1.5)  # the body overstays; it is only notified
                assert not lock.is_held
            t.join(10)
            handover = got["at"] - started
            print(f"the waiter held {handover:.3f} s after the hold began (max_hold 0.6)")
            assert 0.55 <= handover < 1.2  # at the cap, not at the body's end (1.5) nor a session timeout later
            assert wait_until(lambda: "max_hold" in lost, timeout=5)
    finally:
        signals.lock_lost.disconnect(on_lost)


@pytest.mark.timeout(60)
def test_max_hold_with_cancel_stops_the_body_then_releases_cleanly(zk_server):
    with zk_settings(zk_server.hosts, "/maxhold-cancel"):
        got = {}

        def waiter():
            time.sleep(0.1)
            with zk_lock("capped", timeout=10):
                got["at"] = clock.now()

        t = threading.Thread(target=waiter)
        with pytest.raises(LockLost) as info:
            with zk_lock("capped", max_hold=0.5, on_lost="cancel"):
                t.start()
                try:
                    spin_until_stopped(10)
                finally:
                    got["stopped"] = clock.now()
                raise AssertionError("not stopped")
        t.join(10)
        assert info.value.reason == "max_hold"
        assert got["at"] >= got["stopped"]  # the next holder came after the work stopped
        assert got["at"] - got["stopped"] < 0.5  # and at once: the release mark, not a session timeout


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="on_lost"):
        zk_lock("x", on_lost="kill")
    with pytest.raises(ValueError, match="on_lost"):
        zk_lock("x", on_lost="terminate")
    with pytest.raises(ValueError, match="max_hold"):
        zk_lock("x", max_hold=0)
    with pytest.raises(ValueError, match="max_hold"):
        zk_semaphore("x", 2, max_hold="5")
    with pytest.raises(ValueError, match="on_lost"):
        zk_multi_lock(["a"], on_lost="stop")


@pytest.mark.timeout(60)
def test_a_holder_stopped_outside_a_with_statement_releases_then_takes_the_lock_again(zk_server):
    """acquire() with on_lost="cancel", stopped by a force-release: until its release(), the thread's next acquire
    of the name says the hold was lost; after it, the next acquire holds."""
    with zk_settings(zk_server.hosts, "/onlost-stale"):
        kz = raw_client(zk_server.hosts)
        try:
            lock = zk_lock("stale", on_lost="cancel")
            assert lock.acquire()
            node = lock._hold().contender.node
            with pytest.raises(LockLost):
                kz.delete(node)
                spin_until_stopped(10)
                raise AssertionError("not stopped")
            with pytest.raises(LockLost, match="release"):
                zk_lock("stale", timeout=5).acquire()
            lock.release()
            with zk_lock("stale", timeout=5) as again:
                assert again.is_held and again.token > 0
        finally:
            kz.stop()
            kz.close()


@pytest.mark.timeout(60)
def test_a_body_that_swallows_the_cancellation_still_gets_lock_lost_from_async_with(zk_server, zk_expire):
    async def main():
        lock = zk_lock("aio-swallow", on_lost="cancel")
        with pytest.raises(LockLost):
            async with lock:
                zk_expire(zk_server.hosts, session_of())
                try:
                    await asyncio.sleep(20)
                except asyncio.CancelledError:
                    pass  # a body that catches everything
        await asyncio.sleep(0.05)  # and the caller's code after it is not cancelled
        return lock

    with zk_settings(zk_server.hosts, "/onlost-aio-swallow"):
        lock = asyncio.run(asyncio.wait_for(main(), 20))
        assert not lock._mine


@pytest.mark.timeout(60)
def test_a_thread_body_that_swallows_the_stop_still_leaves_its_with_through_lock_lost(zk_server, zk_expire):
    """A body that catches every exception per item (common in batch jobs) swallows the stop; the with statement
    still raises LockLost when the body ends, so the caller never reads the work as done under the lock."""
    swallowed = []
    with zk_settings(zk_server.hosts, "/onlost-swallow"):
        lock = zk_lock("swallow", on_lost="cancel")
        with pytest.raises(LockLost) as info:
            with lock:
                zk_expire(zk_server.hosts, session_of())
                ends = time.monotonic() + 15
                while time.monotonic() < ends and not swallowed:
                    try:
                        checkpoint()
                        time.sleep(0.01)
                    except Exception as exc:  # noqa: BLE001 - the body under test swallows everything
                        swallowed.append(exc)
        assert swallowed and isinstance(swallowed[0], LockLost)  # the stop did reach the body
        assert info.value.reason == "expired"
        assert not lock._mine


@pytest.mark.timeout(60)
def test_a_loss_completes_when_a_cancel_holders_loop_is_already_closed(zk_server, zk_expire):
    """A task took a lock with on_lost="cancel" and its loop ended without releasing it. The loss cannot cancel
    a task of a closed loop; the rest of the loss still happens: the next lock's stop, the signal, a new session."""
    with zk_settings(zk_server.hosts, "/onlost-closed-loop"):

        async def take_and_leave():
            return await zk_lock("left", on_lost="cancel").acquire_async()

        assert asyncio.run(take_and_leave())
        heard = []

        def on_lost(sender, **kwargs):
            heard.append(kwargs.get("name"))

        signals.lock_lost.connect(on_lost)
        try:
            other = zk_lock("beside", on_lost="cancel")
            with pytest.raises(LockLost):
                with other:
                    session = session_of()
                    zk_expire(zk_server.hosts, session)
                    spin_until_stopped(15)
            assert wait_until(lambda: {"left", "beside"} <= set(heard), timeout=10), heard
            assert session.dead
            with zk_lock("left", timeout=5) as again:
                assert again.is_held
        finally:
            signals.lock_lost.disconnect(on_lost)

"""Regression tests for races and failure paths: each would fail on the code before its fix."""

import asyncio
import os
import time

import pytest
from django.test import override_settings

from tests.support.helpers import HeldInThread, raw_client, wait_until
from zklocks import LockLost, LockTimeout, signals, zk_lock, zk_semaphore
from zklocks.connections import connections
from zklocks.testing import ZkServer
from zklocks.testing.proxy import TcpProxy

pytestmark = pytest.mark.zk


def test_release_by_a_thread_that_holds_nothing_frees_nothing():
    shared_handle = zk_lock("shared-handle", timeout=0.2)
    owner = HeldInThread(shared_handle)
    assert owner.acquired
    assert shared_handle.acquire() is False  # this thread timed out ...
    shared_handle.release()  # ... and releasing must not free the other thread's hold
    with pytest.raises(LockLost):
        shared_handle.ensure_held()  # nor may this thread pass for the holder
    assert zk_lock("shared-handle", blocking=False).acquire() is False
    owner.release()


def test_async_tasks_sharing_one_handle_each_release_their_own_node():
    sem = zk_semaphore("async-shared", 3)
    read = zk_lock("async-read", shared=True)

    async def use():
        async with sem, read:
            await asyncio.sleep(0.05)

    async def main():
        await asyncio.gather(*(use() for _ in range(3)))

    asyncio.run(main())
    client = connections["default"].session().client
    wait_until(lambda: [c for c in client.get_children(sem.path) if "__lease__" in c] == [], timeout=3)
    wait_until(lambda: client.get_children(read.path) == [], timeout=3)


def test_a_lock_in_the_body_of_a_non_reentrant_hold_nests_instead_of_waiting_on_itself():
    from zklocks.locks import ZkLock

    outer = ZkLock("task-key", reentrant=False)
    outer.acquire()
    try:
        started = time.monotonic()
        with zk_lock("task-key", timeout=2) as inner:
            assert inner.token == outer.token
        assert time.monotonic() - started < 1
        assert outer.is_held
    finally:
        outer.release()


def test_a_blocking_signal_receiver_does_not_delay_loss_detection():
    server = ZkServer(tick_time=100).start()
    proxy = TcpProxy("127.0.0.1", server.port).start()

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
        server.cleanup()


def test_forked_child_does_not_see_the_parents_lock_as_held_and_async_works():
    lock = zk_lock("fork-held")
    lock.acquire()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            held = lock.is_held
            try:
                lock.ensure_held()
                ensured = True
            except LockLost:
                ensured = False

            async def take():
                return await asyncio.wait_for(zk_lock("fork-async").acquire_async(), 10)

            got = asyncio.run(take())
            os.write(w, f"{held} {ensured} {got}".encode())
        finally:
            os._exit(0)
    os.close(w)
    out = os.read(r, 1000).decode()
    os.waitpid(pid, 0)
    assert out == "False False True"
    assert lock.is_held
    lock.release()


def test_long_hold_watch_survives_a_connection_blip():
    server = ZkServer(tick_time=100).start()
    proxy = TcpProxy("127.0.0.1", server.port).start()
    try:
        with override_settings(
            ZKLOCKS={
                "default": {
                    "HOSTS": proxy.hosts,
                    "NAMESPACE": "/blip-watch",
                    "SESSION_TIMEOUT": 3.0,
                    "CONNECT_TIMEOUT": 2.0,
                }
            }
        ):
            lock = zk_lock("long")
            lock.acquire()
            time.sleep(1.3)  # long hold: its node is watched
            session = connections["default"].session()
            proxy.reset()
            wait_until(lambda: session.connected, timeout=5)
            time.sleep(0.3)
            client = raw_client(server.hosts)
            try:
                (child,) = client.get_children(lock.path)
                client.delete(f"{lock.path}/{child}")
                wait_until(lambda: not lock.is_held, timeout=3)
            finally:
                client.stop()
            lock.release()
    finally:
        proxy.stop()
        server.cleanup()


def test_lock_deadline_during_a_short_blip_is_a_timeout_not_an_outage():
    server = ZkServer(tick_time=100).start()
    proxy = TcpProxy("127.0.0.1", server.port).start()
    try:
        with override_settings(
            ZKLOCKS={
                "default": {
                    "HOSTS": proxy.hosts,
                    "NAMESPACE": "/blip-deadline",
                    "SESSION_TIMEOUT": 3.0,
                    "CONNECT_TIMEOUT": 5.0,
                }
            }
        ):
            holder = HeldInThread(zk_lock("busy"))
            proxy.partition()
            with pytest.raises(LockTimeout):  # not ZkUnavailable: CONNECT_TIMEOUT (5 s) has not passed
                with zk_lock("busy", timeout=0.5):
                    pass
            proxy.heal()
            holder.release()
    finally:
        proxy.stop()
        server.cleanup()


def test_lone_surrogate_is_an_invalid_name():
    with pytest.raises(ValueError, match="surrogate"):
        zk_lock("bad\ud800")

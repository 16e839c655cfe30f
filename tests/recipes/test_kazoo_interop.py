"""kazoo's own Lock, ReadLock and WriteLock on lock_path(name) interoperate with zklocks, both ways."""

import threading

import pytest
from kazoo.recipe.lock import Lock, ReadLock, WriteLock

from tests.support.helpers import wait_until
from zklocks import lock_path, zk_lock

pytestmark = pytest.mark.zk


def zk_try(name, shared=False):
    box = {}

    def run():
        lock = zk_lock(name, shared=shared, blocking=False)
        box["got"] = lock.acquire()
        if box["got"]:
            lock.release()

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    return box["got"]


KAZOO = {"lock": Lock, "read": ReadLock, "write": WriteLock}


@pytest.mark.parametrize(
    "kazoo_kind,shared,expected",
    [
        ("lock", False, False),
        ("lock", True, False),
        ("write", False, False),
        ("write", True, False),
        ("read", False, False),
        ("read", True, True),
    ],
)
def test_kazoo_holder_against_zklocks(kz, kazoo_kind, shared, expected):
    name = f"interop-{kazoo_kind}-{shared}"
    held = KAZOO[kazoo_kind](kz, lock_path(name), identifier="kazoo-holder")
    assert held.acquire(timeout=5)
    try:
        assert zk_try(name, shared=shared) is expected
    finally:
        held.release()
    assert zk_try(name, shared=shared) is True


@pytest.mark.parametrize(
    "shared,kazoo_kind,expected",
    [
        (False, "lock", False),
        (False, "write", False),
        (False, "read", False),
        (True, "read", True),
        (True, "write", False),
        # kazoo's plain Lock only looks at "__lock__" nodes, so it ignores readers (kazoo's own ReadLock too):
        # use kazoo's WriteLock to exclude shared holders.
        (True, "lock", True),
    ],
)
def test_zklocks_holder_against_kazoo(kz, shared, kazoo_kind, expected):
    name = f"interop2-{kazoo_kind}-{shared}"
    with zk_lock(name, shared=shared):
        contender = KAZOO[kazoo_kind](kz, lock_path(name))
        got = contender.acquire(blocking=False)
        assert got is expected
        if got:
            contender.release()
    # The with statement's release does not wait for its answer; another client sees it one round trip later.
    wait_until(lambda: not kz.get_children(lock_path(name)), timeout=5)
    contender = KAZOO[kazoo_kind](kz, lock_path(name))
    assert contender.acquire(blocking=False) is True
    contender.release()


def test_zklocks_waiter_gets_the_lock_when_kazoo_releases(kz):
    held = Lock(kz, lock_path("handoff"))
    held.acquire()
    got = threading.Event()

    def waiter():
        with zk_lock("handoff", timeout=10):
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    assert not got.wait(0.3)
    held.release()
    assert got.wait(5)
    t.join(5)


def test_kazoo_sees_zklocks_contenders(kz):
    with zk_lock("visible"):
        contenders = Lock(kz, lock_path("visible")).contenders()
        assert len(contenders) == 1 and '"v":1' in contenders[0]

"""Fork safety with real forks: a child never uses, closes or flushes its parent's sessions."""

import asyncio
import os
import time

import pytest

from tests.support.helpers import raw_client
from zklocks import LockLost, zk_lock
from zklocks.client.pools import connections

pytestmark = pytest.mark.zk


def _fork(child):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(r)
            os.write(w, (child() or "").encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001
            os.write(w, f"error: {exc!r}".encode())
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while True:
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode()


def test_child_opens_its_own_session_and_holds_nothing(zk_server):
    lock = zk_lock("forked")
    lock.acquire()
    parent_session = connections["default"].session()
    parent_id = parent_session.client.client_id[0]

    def child():
        # The registry is empty: the same thread id must not "re-enter" the parent's lock.
        attempt = zk_lock("forked", blocking=False)
        got = attempt.acquire()
        own = connections["default"].session()
        result = f"{got} {own is parent_session} {own.client.client_id[0] != parent_id}"
        with zk_lock("child-only") as mine:
            result += f" {mine.is_held}"
        return result

    code, out = _fork(child)
    assert code == 0, out
    assert out == "False False True True"
    # The parent's session survived the child's exit, and so did its lock.
    assert lock.is_held
    lock.ensure_held()
    assert parent_session.client.client_id[0] == parent_id and parent_session.connected
    lock.release()


def test_child_exit_does_not_close_the_parent_session(zk_server):
    with zk_lock("parent-keeps") as lock:
        code, out = _fork(lambda: "")  # atexit does not run after os._exit; try a normal exit as well
        assert code == 0
        pid = os.fork()
        if pid == 0:
            import zklocks.client.pools as c

            c._at_exit()  # what a child's normal interpreter exit runs
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.3)
        lock.ensure_held()
        client = raw_client(zk_server.hosts)
        try:
            assert len(client.get_children(lock.path)) == 1
        finally:
            client.stop()


def test_multiprocessing_fork_children_lock_independently(zk_server):
    import multiprocessing

    warm = zk_lock("warm")
    warm.acquire(blocking=False)  # the parent has a live session before forking
    try:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(2) as pool:
            tokens = pool.map(_child_lock, range(4))
    finally:
        warm.release()
    assert len(set(tokens)) == 4 and all(isinstance(t, int) for t in tokens)


def _child_lock(i):
    with zk_lock(f"mp:{i}", timeout=10) as lock:
        return lock.token


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

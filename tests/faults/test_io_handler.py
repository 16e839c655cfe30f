"""The I/O handler of zklocks sessions: select()'s contract over poll(2), on real sockets and a real server."""

import functools
import os
import resource
import socket
import sys
import threading
import time

import pytest

from tests.support.helpers import wait_until, zk_settings
from zklocks import zk_lock
from zklocks.client.iohandler import PollingHandler, poll_select
from zklocks.client.pools import close_all, connections


def _recording_watch():
    """(the names of the threads it ran on, set once it ran, a watch)."""
    ran: list[str] = []
    done = threading.Event()

    def watch(event) -> None:
        ran.append(threading.current_thread().name)
        done.set()

    return ran, done, watch


def _holder_once_a_waiter_queued(client, parent: str) -> str:
    """The holder's node of lock ``parent`` once a second contender has queued (and had time to watch it)."""
    deadline = time.monotonic() + 10
    while len(client.get_children(parent)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # the waiter's watch is set
    return sorted(client.get_children(parent), key=lambda c: c[-10:])[0]


GET_DATA = 4  # the opcode of a read with a watch: the re-arm


def _called_from(function: str, filename: str) -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == function and frame.f_code.co_filename.endswith(filename):
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_nothing_to_read_times_out_empty(pair):
    a, _ = pair
    started = time.monotonic()
    assert poll_select([a], [], [], 0.05) == ([], [], [])
    assert time.monotonic() - started >= 0.04


def test_reports_what_is_ready_and_only_that(pair):
    a, b = pair
    assert poll_select([a, b], [a], [], 0) == ([], [a], [])
    b.sendall(b"x")
    readable, writable, _ = poll_select([a, b], [], [], 1.0)
    assert readable == [a]
    assert writable == []


def test_a_closed_peer_is_readable_so_the_read_sees_it(pair):
    a, b = pair
    b.close()
    readable, _, _ = poll_select([a], [], [], 1.0)
    assert readable == [a]
    assert a.recv(1) == b""


def test_bad_arguments_raise_as_selectors_would(pair):
    a, _ = pair
    with pytest.raises(ValueError, match="timeout must be non-negative"):
        poll_select([a], [], [], -1)
    with pytest.raises(TypeError):
        poll_select([a], [], [], "1")
    closed = socket.socket()
    closed.close()
    with pytest.raises((TypeError, ValueError)):
        poll_select([closed], [], [], 0)


def test_a_descriptor_closed_behind_its_owner_fails_instead_of_reading_as_ready(pair):
    """kazoo's loop would take it as readable forever (a busy loop): its own select fails on it, and so must ours."""
    a, _ = pair
    fd = a.detach()
    os.close(fd)
    with pytest.raises(ValueError, match="Invalid event mask or fd"):
        poll_select([fd], [], [], 0)


@pytest.mark.zk
def test_sessions_use_it_and_OPTIONS_may_name_another(zk_server):
    from kazoo.handlers.threading import SequentialThreadingHandler

    with zk_settings(zk_server.hosts, "/io"):
        with zk_lock("io"):
            client = connections["default"].session().client
            assert isinstance(client.handler, PollingHandler)
            assert "_read" in vars(client._connection)  # the short read path is installed
        close_all()
    with zk_settings(zk_server.hosts, "/io", OPTIONS={"handler": SequentialThreadingHandler}, POOL_SIZE=2):
        with zk_lock("io"):
            pool = connections["default"]
            other = threading.Thread(target=pool.session)  # the pool's second slot goes to another thread
            other.start()
            other.join(10)
            sessions = pool.sessions()
            assert len(sessions) == 2
            assert all(type(s.client.handler) is SequentialThreadingHandler for s in sessions)
            assert not any("_read" in vars(s.client._connection) for s in sessions)  # kazoo's own reads
            # a class makes one handler per session: kazoo stops a client's handler with the client
            assert len({id(s.client.handler) for s in sessions}) == len(sessions)
        close_all()


@pytest.mark.zk
def test_a_session_on_a_descriptor_above_1024_locks_and_releases(zk_server):
    """select(2) cannot watch descriptors from 1024 up; a busy process has such descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.fail(f"this test needs a descriptor limit of 1200 or more (hard limit {hard})")
    if soft != resource.RLIM_INFINITY and soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    filler: list[int] = []
    sockets = []
    try:
        # Other threads of the suite close descriptors at any time, and a new socket takes the lowest free one:
        # fill every hole below 1100 again before each try, until the session's socket lands above 1024.
        for _ in range(5):
            while not filler or filler[-1] < 1100:
                filler.append(os.open(os.devnull, os.O_RDONLY))
            with zk_settings(zk_server.hosts, "/io"):
                with zk_lock("high-fd") as held:
                    fd = connections["default"].session().client._connection._socket.fileno()
                    assert held.token is not None
                with zk_lock("high-fd"):
                    pass
                close_all()
            sockets.append(fd)
            if fd > 1024:
                break
            filler.append(os.open(os.devnull, os.O_RDONLY))  # below 1100: the next fill starts over
        assert sockets[-1] > 1024, f"the session's socket never got a descriptor above 1024: {sockets}"
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def connection(pair):
    """kazoo's own ConnectionHandler, unstarted, reading from one end of a socket pair with the short path."""
    from kazoo.client import KazooClient

    from zklocks.client.kazoo_adapter.hooks import read_without_select

    client = KazooClient(hosts="127.0.0.1:1", handler=PollingHandler())
    conn = client._connection
    a, b = pair
    a.setblocking(False)
    conn._socket = a
    read_without_select(client)
    return conn, b


def test_an_answer_already_there_is_read_whole(connection):
    conn, peer = connection
    peer.sendall(b"\x00\x00\x00\x05hello")
    assert conn._read(4, 1.0) == b"\x00\x00\x00\x05"
    assert conn._read(5, 1.0) == b"hello"


def test_an_answer_that_arrives_in_parts_is_waited_for(connection):
    conn, peer = connection
    peer.sendall(b"he")
    later = threading.Timer(0.1, peer.sendall, args=(b"llo",))
    later.start()
    try:
        assert conn._read(5, 2.0) == b"hello"
    finally:
        later.join()


def test_a_length_that_is_no_length_is_left_to_kazoos_read(connection):
    conn, peer = connection
    peer.sendall(b"x")
    assert conn._read(0, 0.1) == b""
    assert conn._read(-5, 0.1) == b""  # kazoo reads nothing; the caller's parse then fails as a bad answer
    assert conn._read(1, 0.1) == b"x"


def test_a_closed_peer_or_silence_is_reported_as_kazoo_does(connection):
    from kazoo.exceptions import ConnectionDropped
    from kazoo.handlers.threading import KazooTimeoutError

    conn, peer = connection
    with pytest.raises(KazooTimeoutError):
        conn._read(4, 0.05)
    peer.close()
    with pytest.raises(ConnectionDropped):
        conn._read(4, 1.0)


@pytest.mark.zk
def test_a_marked_watch_runs_on_the_connection_thread_and_its_exception_ends_nothing(zk_server, caplog):
    """A waiter's wake-up watch runs where its event is read (one thread hop less per handoff); an exception it
    lets out is logged and the connection goes on, as it does on kazoo's callback thread."""
    from zklocks.client.iohandler import on_connection_thread

    with zk_settings(zk_server.hosts, "/io"):
        try:
            client = connections["default"].session().client
            client.ensure_path("/io/watched")
            ran: list[str] = []
            done = threading.Event()

            @on_connection_thread
            def failing(event) -> None:
                ran.append(threading.current_thread().name)
                done.set()
                raise RuntimeError("a broken watch")

            plain_ran, plain, unmarked = _recording_watch()
            wrapped_ran, wrapped_done, marked = _recording_watch()
            marked = on_connection_thread(marked)

            @functools.wraps(marked)  # copies marked's __dict__, and with it the mark: it must not count here
            def wrapper(event) -> None:
                marked(event)

            client.get("/io/watched", watch=failing)
            client.exists("/io/watched", watch=unmarked)
            client.exists("/io/watched", watch=wrapper)
            with caplog.at_level("ERROR", logger="zklocks.client.iohandler"):
                client.set("/io/watched", b"x")
                assert done.wait(10) and plain.wait(10)
            assert ran == [client._connection._connection_routine.name]  # the thread that read the event
            assert plain_ran and plain_ran != ran  # an unmarked watch still runs on kazoo's callback thread
            assert wrapped_done.wait(10) and wrapped_ran == plain_ran[:1]  # so does a wrapper of a marked one
            assert "a waiter's watch failed" in caplog.text
            assert client.get("/io/watched")[0] == b"x"  # the connection goes on
            client.delete("/io/watched")
        finally:
            close_all()


@pytest.mark.zk
def test_a_waiter_watching_again_sends_nothing_from_the_connection_thread(zk_server):
    """A send may wait for the connection thread to drain its wake-up pipe, which a send from that thread would
    wait on for ever: where anyone may write the blocker (an open alias), each write makes the waiter watch again,
    and that read is sent by kazoo's callback thread. The waiter still holds once the holder releases."""
    from kazoo.client import KazooClient

    from zklocks import lock_path

    with zk_settings(zk_server.hosts, "/io-open", AUTH="open"):  # a namespace of its own: /io is guarded
        other = KazooClient(hosts=zk_server.hosts)
        other.start(timeout=10)
        holder = zk_lock("io-rearm")
        try:
            holder.acquire()
            client = connections["default"].session().client
            sent_by: list[str] = []
            kazoo_get_async = client.get_async

            def recording_get_async(path, watch=None):
                sent_by.append(threading.current_thread().name)
                return kazoo_get_async(path, watch=watch)

            client.get_async = recording_get_async
            got = threading.Event()

            def wait() -> None:
                with zk_lock("io-rearm", timeout=20):
                    got.set()

            waiter = threading.Thread(target=wait)
            waiter.start()
            parent = lock_path("io-rearm")
            first = _holder_once_a_waiter_queued(other, parent)
            before = len(sent_by)
            for i in range(3):
                other.set(f"{parent}/{first}", b"written by another client %d" % i)
                time.sleep(0.2)
            rearms = sent_by[before:]
            assert rearms, "the waiter did not watch again after a write to its blocker"
            assert client._connection._connection_routine.name not in rearms
            assert not got.is_set()  # a write on an open alias proves nothing
            holder.release()
            assert got.wait(10)
            waiter.join(10)
        finally:
            other.stop()
            other.close()
            close_all()


@pytest.mark.zk
def test_a_waiter_watching_again_across_a_dropped_connection_still_holds_at_the_release(zk_server):
    """The re-arm of the test above, lost with the connection: the read reaches the server and the link drops
    before its answer (reconnects refused for 1 s). The read fails with ConnectionLoss, so the waiter cannot
    know whether its watch is set: it looks again, on the same session, and holds once the holder releases, not
    before. Two wakes make it look (the session's state change, and the failed read's own): without both, it
    never learns of the release."""
    from kazoo.client import KazooClient

    from zklocks import lock_path
    from zklocks.testing.proxy import TcpProxy

    proxy = TcpProxy("127.0.0.1", zk_server.port).start()
    waiter = None
    other = KazooClient(hosts=zk_server.hosts)
    other.start(timeout=10)
    try:
        with zk_settings(proxy.hosts, "/io-open-drop", AUTH="open", SESSION_TIMEOUT=4.0, CONNECT_TIMEOUT=4.0):
            holder = zk_lock("io-rearm-drop")
            holder.acquire()
            session = connections["default"].session()
            client = session.client
            session_id = client.client_id[0]
            cuts: list[str] = []
            kazoo_get_async = client.get_async

            def cut_then_get_async(path, watch=None):
                if armed.is_set() and not cuts and _called_from("rearm", "recipes/queue.py"):
                    cuts.append(threading.current_thread().name)
                    # The read reaches the server, then the link drops before its answer (reconnects refused
                    # for 1 s): the read fails with ConnectionLoss although its watch may be set.
                    proxy.drop_after_next_request((GET_DATA,), contains=b"io-rearm-drop", then_partition=True)
                    threading.Thread(target=heal_after_drop, daemon=True).start()
                return kazoo_get_async(path, watch=watch)

            def heal_after_drop() -> None:
                if proxy.dropped.wait(10):
                    time.sleep(1.0)
                proxy.heal()

            client.get_async = cut_then_get_async
            armed = threading.Event()
            got = threading.Event()
            failed: list[BaseException] = []

            def wait() -> None:
                try:
                    with zk_lock("io-rearm-drop", timeout=30):
                        got.set()
                except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                    failed.append(exc)

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            parent = lock_path("io-rearm-drop")
            first = _holder_once_a_waiter_queued(other, parent)
            armed.set()
            deadline = time.monotonic() + 10
            writes = 0
            while not cuts and time.monotonic() < deadline:  # again, should the waiter's first watch come late
                other.set(f"{parent}/{first}", b"written by another client %d" % writes)
                writes += 1
                time.sleep(0.2)
            assert cuts, "the waiter did not watch again after a write to its blocker"
            assert proxy.dropped.wait(10), "the link was not dropped after the re-arm's read"
            wait_until(lambda: not session.connected, 5)
            wait_until(lambda: session.connected, 10)  # after the heal
            assert client.client_id[0] == session_id  # the same session: the outage was shorter than its timeout
            time.sleep(0.5)
            assert not got.is_set() and not failed, failed  # nothing was released yet
            holder.release()  # (the holder has been told its node was written: "changed", a lost hold on an open alias)
            assert got.wait(15), f"the waiter did not hold after the release ({failed})"
            assert client.client_id[0] == session_id
            waiter.join(10)
            assert not failed, failed
    finally:
        proxy.heal()
        other.stop()
        other.close()
        close_all()  # a waiter still waiting (a failed assertion above) ends with its session
        if waiter is not None:
            waiter.join(30)
        proxy.stop()

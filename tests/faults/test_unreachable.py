"""An unreachable ZooKeeper: ZkUnavailable says why, kazoo's per-retry lines stay out of the way, the status
command prints only its error, and a view that lets ZkUnavailable escape answers 503 with the middleware."""

import contextlib
import logging
import re
import socket
import sys
import threading
import time

import pytest
from django.test import override_settings

from tests.support.project import Project
from zklocks import ZkUnavailable, zk_lock
from zklocks.client.pools import close_all
from zklocks.testing import free_port


def unavailable(hosts, **extra) -> str:
    settings = {"HOSTS": hosts, "CONNECT_TIMEOUT": 1.0, "SESSION_TIMEOUT": 2.0, "REAP_INTERVAL": 0, **extra}
    with override_settings(ZKLOCKS={"default": settings}):
        try:
            with pytest.raises(ZkUnavailable) as info:
                zk_lock("report").acquire(timeout=None)
        finally:
            close_all()
    return str(info.value)


def test_cause_connection_refused():
    port = free_port()
    assert unavailable(f"127.0.0.1:{port}") == (
        f"zklocks alias 'default', exclusive lock 'report': ZooKeeper at 127.0.0.1:{port} is unavailable "
        f"(no session within CONNECT_TIMEOUT=1s: connection refused by 127.0.0.1:{port})"
    )


def test_cause_unknown_host():
    message = unavailable("zk-nowhere.invalid:2181")
    assert message.startswith(
        "zklocks alias 'default', exclusive lock 'report': ZooKeeper at zk-nowhere.invalid:2181 is unavailable "
        "(no session within CONNECT_TIMEOUT=1s: cannot resolve zk-nowhere.invalid: "
    ), message


def test_cause_tls_error(zk_server):
    """TLS towards a plaintext server: the TLS error is the cause."""
    message = unavailable(zk_server.hosts, OPTIONS={"use_ssl": True, "verify_certs": False})
    assert re.search(rf"CONNECT_TIMEOUT=1s: {re.escape(zk_server.hosts)}: TLS: .+\)$", message), message
    print(message)


def test_threads_that_call_at_once_each_get_zk_unavailable_within_connect_timeout():
    """Four threads share the one session slot (POOL_SIZE 1): those that find its start under way wait for that
    start and share its failure, instead of starting again one after the other (the last after 4 x 1 s)."""
    port = free_port()
    settings = {"HOSTS": f"127.0.0.1:{port}", "CONNECT_TIMEOUT": 1.0, "SESSION_TIMEOUT": 2.0, "REAP_INTERVAL": 0}
    took: list[tuple[str, float]] = []
    barrier = threading.Barrier(4)

    def call(n: int) -> None:
        barrier.wait()
        began = time.monotonic()
        try:
            zk_lock(f"at-once-{n}").acquire(timeout=10)
            took.append(("acquired", time.monotonic() - began))
        except Exception as exc:
            took.append((str(exc), time.monotonic() - began))

    with override_settings(ZKLOCKS={"default": settings}):
        try:
            threads = [threading.Thread(target=call, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        finally:
            close_all()
    assert len(took) == 4
    assert all("is unavailable (no session within CONNECT_TIMEOUT=1s" in said for said, _ in took), took
    assert max(seconds for _, seconds in took) < 1.0 + 0.5, took


def test_kazoo_retry_lines_are_quiet(caplog):
    caplog.set_level(logging.DEBUG)
    unavailable(f"127.0.0.1:{free_port()}")
    loud = [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == []
    assert any(r.name == "zklocks.kazoo" and "Connection refused" in r.getMessage() for r in caplog.records)


def test_status_command_prints_only_its_error(tmp_path):
    port = free_port()
    project = Project(tmp_path, hosts=f"127.0.0.1:{port}")
    result = project.manage("zklocks_status")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"CommandError: zklocks alias 'default': ZooKeeper at 127.0.0.1:{port} is unavailable (no session "
        f"within CONNECT_TIMEOUT=2s: connection refused by 127.0.0.1:{port})\n"
    )


@pytest.mark.parametrize("retry_after", [None, "'soon'"])
def test_middleware_answers_503(tmp_path, retry_after):
    """Also with a Retry-After setting manage.py check refuses (E054): the outage still answers 503, not 500."""
    port = free_port()
    extra = "" if retry_after is None else f"ZKLOCKS_UNAVAILABLE_RETRY_AFTER = {retry_after}"
    project = Project(
        tmp_path,
        hosts=f"127.0.0.1:{port}",
        settings_extra=f"""
            MIDDLEWARE = ["zklocks.middleware.ZkUnavailableMiddleware"]
            ZKLOCKS["default"]["CONNECT_TIMEOUT"] = 0.5
            {extra}
        """,
    )
    project.write(
        "proj/urls.py",
        """\
        from django.http import HttpResponse
        from django.urls import path

        from zklocks import zk_lock


        @zk_lock("stock:{sku}")
        def reserve(request, sku):
            return HttpResponse("reserved")


        urlpatterns = [path("reserve/<sku>/", reserve)]
        """,
    )
    project.write(
        "probe.py",
        """\
        import django

        django.setup()
        from django.test import Client

        response = Client().get("/reserve/tea/")
        print(response.status_code, response["Retry-After"], response["Content-Type"])
        print(response.content.decode(), end="")
        """,
    )
    result = project.run([sys.executable, "probe.py"], DJANGO_SETTINGS_MODULE="proj.settings")
    assert result.stdout == "503 5 text/plain; charset=utf-8\nZooKeeper is unavailable; try again shortly.\n", (
        result.stderr
    )
    assert "zklocks: ZooKeeper unavailable for GET '/reserve/tea/'" in result.stderr  # the path through repr
    if retry_after is not None:
        assert "ZKLOCKS_UNAVAILABLE_RETRY_AFTER='soon' is not a number of seconds; sending 5" in result.stderr


def test_a_fresh_session_past_a_deadline_gets_only_what_is_left_of_connect_timeout():
    """An acquire whose session ended past its deadline asks for a fresh one with what is left of CONNECT_TIMEOUT
    (queue.fresh_session_bound): the outage still ends the call within CONNECT_TIMEOUT of the fault. A start given
    up that early answers only for itself: a thread of the same slot that waited for it with more time left tries
    again, and is not told "unavailable" by a start that had less time than it."""
    from zklocks.client.pools import connections

    port = free_port()
    settings = {"HOSTS": f"127.0.0.1:{port}", "CONNECT_TIMEOUT": 2.0, "SESSION_TIMEOUT": 2.0, "REAP_INTERVAL": 0}
    with override_settings(ZKLOCKS={"default": settings}):
        try:
            pool = connections["default"]
            started = time.monotonic()
            with pytest.raises(ZkUnavailable, match=r"within the 0\.30s left of the call's CONNECT_TIMEOUT=2s"):
                pool.session(within=0.3)
            assert time.monotonic() - started < 1.5  # not the whole CONNECT_TIMEOUT

            ended: dict[str, float] = {}

            def late() -> None:
                with contextlib.suppress(ZkUnavailable):
                    pool.session(within=0.3)
                ended["late"] = time.monotonic() - started

            started = time.monotonic()
            starter = threading.Thread(target=late)
            starter.start()
            time.sleep(0.1)  # the late thread's start is under way: this one waits for it
            with pytest.raises(ZkUnavailable, match=r"within CONNECT_TIMEOUT=2s"):
                pool.session()
            ended["full"] = time.monotonic() - started
            starter.join(5)
            assert ended["late"] < 1.0 and ended["full"] >= 1.8, ended
        finally:
            close_all()


@contextlib.contextmanager
def _hung_server(kind: str, zk_server):
    """A server first in HOSTS that never lets a session start: one that accepts the connection and answers nothing
    (a hung JVM), or one whose connect never completes (a full accept queue: the SYN is dropped, as a firewall
    would)."""
    if kind == "answers nothing":
        from zklocks.testing.proxy import TcpProxy

        host, port = zk_server.hosts.split(":")
        proxy = TcpProxy(host, int(port)).start()
        proxy.partition(refuse_new=False)
        try:
            yield proxy.hosts
        finally:
            proxy.stop()
        return
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))  # fills the queue: the next connect hangs
    try:
        yield f"127.0.0.1:{port}"
    finally:
        filler.close()
        listener.close()


@pytest.mark.zk
@pytest.mark.parametrize(
    "kinds, connect_timeout",
    [
        (["answers nothing"], 5.0),
        (["answers nothing"], 2.0),
        (["connect hangs"], 5.0),
        (["connect hangs", "connect hangs"], 3.0),
    ],
)
def test_hung_servers_in_hosts_leave_time_for_the_next_one(zk_server, zklocks_settings, kinds, connect_timeout):
    # kazoo gives a server the session timeout to connect and its share of it to answer the handshake; with a long
    # SESSION_TIMEOUT one hung server used up the whole CONNECT_TIMEOUT (ZkUnavailable after 5 s), and the healthy
    # one after it was never tried. Each server now gets its share of CONNECT_TIMEOUT to connect (1 s of 3 with
    # three: no floor there, which two hung ones first would use up), and 2 s at the least for the handshake, half
    # of CONNECT_TIMEOUT at the most (a server that answers nothing used up the whole of a CONNECT_TIMEOUT of 2 s).
    with contextlib.ExitStack() as stack:
        hung = [stack.enter_context(_hung_server(kind, zk_server)) for kind in kinds]
        zklocks_settings(
            HOSTS=",".join([*hung, zk_server.hosts]),
            SESSION_TIMEOUT=12.0,
            CONNECT_TIMEOUT=connect_timeout,
            OPTIONS={"randomize_hosts": False},  # the hung ones first
        )
        started = time.monotonic()
        with zk_lock("next-host", timeout=1):
            pass
        assert time.monotonic() - started < connect_timeout


@pytest.mark.zk
def test_a_slow_but_working_ensemble_still_connects(long_sessions_zk, zklocks_settings):
    # Five servers in HOSTS share CONNECT_TIMEOUT (1 s each), but each handshake's answer gets ATTEMPT_FLOOR (2 s)
    # at the least: a handshake answered after 1.2 s (a slow createSession, a WAN) still connects.
    from zklocks.testing.proxy import TcpProxy

    proxies = [TcpProxy("127.0.0.1", long_sessions_zk.port).start() for _ in range(5)]
    for proxy in proxies:
        proxy.latency = 1.2
    try:
        zklocks_settings(
            HOSTS=",".join(p.hosts for p in proxies), SESSION_TIMEOUT=10.0, CONNECT_TIMEOUT=5.0, TICK_TIME=0.1
        )
        from zklocks.client.pools import connections

        assert connections["default"].session().connected  # (each request of a lock would take 1.2 s more)
    finally:
        close_all(wait=False)
        for proxy in proxies:
            proxy.stop()


@pytest.mark.zk
def test_a_handler_instance_given_in_options_is_never_wrapped(zklocks_settings):
    # It may be shared (by a pool's sessions, by aliases): each session wrapping it again would nest without end.
    # Only a handler a session makes for itself gets the connect cap.
    from kazoo.handlers.threading import SequentialThreadingHandler

    from zklocks.client.pools import connections

    handler = SequentialThreadingHandler()
    zklocks_settings(OPTIONS={"handler": handler})
    with zk_lock("shared-handler"):
        pass
    assert "create_connection" not in vars(handler)
    assert connections["default"].session().client.handler is handler

"""The test kit's own hygiene: a stopped proxy leaves no thread and no listening port behind (a long suite
starts hundreds of them)."""

import socket

import pytest

from zklocks.testing.links import ServerLinks
from zklocks.testing.proxy import TcpProxy

pytestmark = pytest.mark.timeout(30)


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_stopped_proxy_ends_its_accept_thread_and_frees_its_port():
    proxy = TcpProxy("127.0.0.1", 9).start()
    proxy.stop()
    proxy._thread.join(5)
    assert not proxy._thread.is_alive()
    assert refused(proxy.port)


def test_stopped_links_end_their_accept_threads():
    links = ServerLinks([1, 2], [9, 9], [9, 9])
    proxies = list(links.links.proxies)
    assert len(proxies) == 4
    links.stop()
    for link in proxies:
        link._thread.join(5)
        assert not link._thread.is_alive()
        assert refused(link.port)

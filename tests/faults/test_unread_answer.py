"""A silent server is one that sent nothing, not one whose answer this (starved) process has not read yet."""

import socket
from types import SimpleNamespace

from zklocks.client.iohandler import Unread
from zklocks.client.session import Session


def _watch_of(sock, unread=None):
    connection = SimpleNamespace(_socket=sock)
    return SimpleNamespace(client=SimpleNamespace(_connection=connection, handler=SimpleNamespace(unread=unread)))


def test_an_answer_waiting_in_the_socket_is_not_silence():
    ours, server = socket.socketpair()
    try:
        watch = _watch_of(ours)
        assert not Session._answer_unread(watch)
        server.sendall(b"\x00\x00\x00\x10")
        assert Session._answer_unread(watch)
        ours.recv(4)
        assert not Session._answer_unread(watch)
    finally:
        ours.close()
        server.close()


def test_no_socket_or_a_closed_one_counts_as_silence():
    assert not Session._answer_unread(_watch_of(None))
    closed = socket.socket()
    closed.close()
    assert not Session._answer_unread(_watch_of(closed))


def test_an_answer_read_ahead_but_not_yet_parsed_is_not_silence():
    """The short read path takes a burst of answers with one recv: the kernel's buffer is empty while the rest
    waits in the handler's Unread for kazoo's thread (kazoo_adapter/hooks.py)."""
    ours, server = socket.socketpair()
    try:
        unread = Unread()
        watch = _watch_of(ours, unread)
        unread.keep(ours, b"\x00\x00\x00\x10")
        assert Session._answer_unread(watch)
        assert unread.take(ours, 4) is not None
        assert not Session._answer_unread(watch)
        unread.keep(server, b"\x00")  # another connection's bytes
        assert not Session._answer_unread(watch)
    finally:
        ours.close()
        server.close()

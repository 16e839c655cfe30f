"""A silent server is one that sent nothing, not one whose answer this (starved) process has not read yet."""

import socket
from types import SimpleNamespace

from zklocks.client.session import Session


def _watch_of(sock):
    return SimpleNamespace(client=SimpleNamespace(_connection=SimpleNamespace(_socket=sock)))


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

"""Outages seen from a session that exists: a silent server, and a server that refuses the session for good.

:class:`OutageWatch` is a part of :class:`~zklocks.client.session.Session`: the attributes annotated on it are the
session's, set by ``Session.__init__``.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from kazoo.client import KazooClient

from .. import conf
from . import clock, worker_threads
from .iohandler import readable_now
from .kazoo_adapter.calls import connection_socket
from .kazoolog import KazooLog

log = logging.getLogger("zklocks")

# A connected server that answers nothing for this share of CONNECT_TIMEOUT, with a request waiting, is taken
# for paused or cut off: waiters raise ZkUnavailable (a probe goes every quarter, so the whole stays within it).
RESPONSE_LIMIT = 0.75


class OutageWatch:
    """The watch of a session's connection while something waits on it."""

    cfg: conf.AliasConfig
    client: KazooClient
    alias: str
    timeout: float
    dead: bool
    kazoo_log: KazooLog
    last_answer: float
    last_sent: float
    unresponsive: bool
    _lock: threading.Lock
    _connected: threading.Event
    _sent: dict[int | None, tuple[float, int, int]]
    _waiters: set[threading.Event]
    _watching: bool
    _down_since: float | None

    if TYPE_CHECKING:

        def _wake_waiters(self) -> None: ...

        def declare_lost(self, reason: str) -> None: ...

    def _watch(self) -> None:
        """While something waits on this session: every quarter of CONNECT_TIMEOUT, look for a silent server.

        A server that is paused or cut off keeps the TCP connection open, so kazoo notices only after two thirds
        of the session timeout. A waiter must hear of it within CONNECT_TIMEOUT: once a request has been
        unanswered for RESPONSE_LIMIT of it and nothing at all was answered meanwhile, the session is marked
        unresponsive (until the next answer) and every waiter is woken to raise ZkUnavailable. An idle
        connection is probed with a read so that a pause is seen while nothing else is asked.
        """
        with self._lock:
            if self.dead or not self._waiters:
                self._watching = False
                return
        period = next_look = self.cfg.connect_timeout / 4
        try:
            now = clock.now()
            if self._connected.is_set():
                oldest = min((entry[0] for entry in list(self._sent.values())), default=None)
                silent_for = now - self.last_answer
                limit = RESPONSE_LIMIT * self.cfg.connect_timeout
                late = oldest is not None and now - oldest > limit and silent_for > limit
                # an answer that arrived but is unread excuses the silence, up to the whole CONNECT_TIMEOUT
                if late and (silent_for >= self.cfg.connect_timeout or not self._answer_unread()):
                    if not self.unresponsive:
                        self.unresponsive = True
                        self._wake_waiters()
                elif late:  # excused: look again when the excuse runs out, not a whole period later
                    next_look = min(period, self.cfg.connect_timeout - silent_for)
                elif oldest is None and now - self.last_sent >= period:
                    try:
                        self.client.exists_async("/")
                    except Exception:
                        log.debug("zklocks: probe of alias %r not sent", self.alias, exc_info=True)
        finally:  # whatever failed above, the watch goes on while something waits
            worker_threads.get().call_later(next_look, self._watch)

    def _answer_unread(self) -> bool:
        """The server's bytes wait in our socket: it answered, only this process has not read them yet.

        On a loaded machine kazoo's reading thread may be starved for longer than RESPONSE_LIMIT; a server whose
        answer has arrived is not silent, and its waiters must not raise ZkUnavailable for our own slowness.
        """
        sock = connection_socket(self.client)
        if sock is None:
            return False
        # Only the kernel's buffer: an SSL object's own (pending()) is kazoo's thread's, which may be reading it.
        return readable_now(sock)

    def _drop_if_still_down(self, down_since: float) -> None:
        """Disconnected for a whole session timeout: the session is over on every server that still knows it.

        A server that came back with empty or older data refuses this session for good (it has seen a newer
        zxid than the server has), and kazoo would retry for ever. Drop the session: its holds are reported
        lost, and the pool starts a fresh session for the next call.
        """
        if self.dead or self._down_since != down_since:
            return
        causes = self.kazoo_log.causes()
        log.warning(
            "zklocks: alias %r could not reconnect to ZooKeeper at %s for %gs (its session timeout)%s; dropping "
            "the session, a fresh one starts with the next call. If ZooKeeper restarted with empty or older data, "
            "its servers refuse this session for good.",
            self.alias,
            self.cfg.hosts,
            self.timeout,
            f" ({causes})" if causes else "",
        )
        self.declare_lost("unreachable")

"""Sessions given up while ZooKeeper could not be reached (dropped by session.py's _drop_if_still_down, or closed
while disconnected), closed on the server as soon as one can be reached: a server that comes back with its data would
keep their ephemeral nodes, the nodes of released locks among them, for another session timeout. Their id and
password are kept for that. See docs/reliability.md, "Releases during an outage".
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from .. import forking
from .kazoolog import KazooLog

log = logging.getLogger("zklocks")

# How often a closer tries the servers while none answers: the bound on how long a released lock stays held once
# ZooKeeper is reachable again.
_RETRY = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.2}


# (alias, hosts) -> how many of its abandoned sessions are still being closed (settle() waits for them).
_closing: dict[tuple[str, str], int] = {}
_closing_changed = threading.Condition()


def settle(alias: str, hosts: str, timeout: float) -> bool:
    """Wait at most ``timeout`` seconds until no abandoned session of ``alias`` on ``hosts`` is being closed; whether
    none is. Called once a new session of the alias has connected: a server answers, so the closers get through
    within their retry delay, and the new session's first acquire never finds a lock this process released
    still held by its previous session."""
    ends = time.monotonic() + timeout
    with _closing_changed:
        while _closing.get((alias, hosts)):
            left = ends - time.monotonic()
            if left <= 0:
                return False
            _closing_changed.wait(left)
    return True


def _track(key: tuple[str, str], change: int) -> None:
    with _closing_changed:
        count = _closing.get(key, 0) + change
        if count > 0:
            _closing[key] = count
        else:
            _closing.pop(key, None)
        _closing_changed.notify_all()


def close_when_reachable(
    alias: str, hosts: str, client_id: tuple[int, bytes], timeout: float, options: dict[str, Any]
) -> threading.Thread:
    """Close session ``client_id`` on the first of ``hosts`` that answers, in a daemon thread of its own.

    ``options`` are the alias's kazoo options for the connection (TLS, auth), without a handler or a logger.
    It gives up after max(5 min, 30 session timeouts); a server restarted later with its data expires the session
    by itself a session timeout after its start, as before. The password never reaches a log.
    """
    give_up = time.monotonic() + max(300.0, 30 * timeout)

    def close() -> None:
        try:
            closing()
        finally:
            _track((alias, hosts), -1)

    def closing() -> None:
        while time.monotonic() < give_up:
            twin = KazooClient(
                hosts=hosts,
                client_id=client_id,
                # kazoo's connect attempt waits in proportion to it: one caught by a server that is still
                # starting would hold the close back for seconds. The joined session is closed at once anyway.
                timeout=min(timeout, 1.0 * max(1, hosts.count(",") + 1)),  # kazoo splits it over the hosts
                connection_retry=_RETRY,
                logger=KazooLog(secrets=[cred for _, cred in options.get("auth_data") or ()]),
                **options,
            )
            try:
                twin.start(timeout=min(30.0, max(1.0, give_up - time.monotonic())))
            except KazooTimeoutError:
                with contextlib.suppress(Exception):  # kazoo stopped the attempt (and closes it since 2.9)
                    twin.close()
                continue  # try again
            except Exception:  # noqa: BLE001 - a bad option or a refused auth: nothing more to do from here
                log.debug("zklocks: closing an abandoned session of alias %r failed", alias, exc_info=True)
                with contextlib.suppress(Exception):
                    twin.stop()
                with contextlib.suppress(Exception):
                    twin.close()
                return
            try:
                twin.stop()
            finally:
                twin.close()
            log.info("zklocks: an abandoned session of alias %r is closed on the server", alias)
            return
        log.info("zklocks: gave up closing an abandoned session of alias %r (it has expired by now)", alias)

    thread = threading.Thread(target=close, name="zklocks-close-abandoned", daemon=True)
    _track((alias, hosts), +1)
    try:
        thread.start()
    except RuntimeError:  # at interpreter shutdown no thread starts: the server expires the session by itself
        _track((alias, hosts), -1)
        log.debug("zklocks: an abandoned session of alias %r is left to expire (interpreter exit)", alias)
    return thread


def _reset_after_fork() -> None:
    """The closers are threads of the parent: a child has none to wait for."""
    global _closing_changed
    _closing.clear()
    _closing_changed = threading.Condition()


forking.register(_reset_after_fork)

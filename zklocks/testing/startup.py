"""How a test server's start is checked and tried again (see :mod:`zklocks.testing.server`).

- Who listens on a port, from ``/proc``: a server that failed to bind its port must not pass for serving because
  another process answers there.
- ``poll_until``: poll a readiness check within a deadline; ``start_attempts``: try a start again on fresh ports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOG_TAIL_CHARS = 4000  # how much of a server's log a failed start reports
START_ATTEMPTS = 3  # a first start that lost a port is tried again on fresh ports, this many tries in all


class ZkStartError(RuntimeError):
    """A server or an ensemble did not start (ZooKeeper, or any server a test starts through :func:`poll_until`);
    the message says what each server was doing, logs included."""


def listening_sockets() -> dict[int, set[str]] | None:
    """Port -> inodes of the TCP sockets listening on it (any address, IPv4 and IPv6), or None without /proc."""
    out: dict[int, set[str]] = {}
    found = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        found = True
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A":  # LISTEN
                out.setdefault(int(fields[1].rsplit(":", 1)[1], 16), set()).add(fields[9])
    return out if found else None


def socket_inodes(pid: int) -> set[str] | None:
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    out = set()
    for name in names:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def port_owner(listeners: dict[int, set[str]] | None, mine: set[str] | None, port: int) -> str:
    if listeners is None or mine is None:
        return "unknown"
    inodes = listeners.get(port)
    if not inodes:
        return "none"
    return "own" if inodes & mine else "other"


def poll_until(
    ready,
    describe,
    message: str,
    timeout: float,
    *,
    proc: subprocess.Popen | None = None,
    stop: Callable[[], object] | None = None,
) -> None:
    """Poll ``ready()`` every 0.1 s until it is true; ZkStartError on a timeout, or from ``ready()`` itself.

    ``describe`` adds what the caller knows to the error: a callable's text, the tail of a log file (a Path), or
    nothing (None). With ``proc``, the server's process exiting ends the wait at once (a server that died will not
    become ready). ``stop()``, if given, runs whenever the wait fails (e.g. to stop the server that did not start)."""
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            code = None if proc is None else proc.poll()
            if code is not None:
                raise ZkStartError(f"{message}: its process exited with {code}")
            if time.monotonic() > deadline:
                raise ZkStartError(message)
            time.sleep(0.1)
    except ZkStartError as exc:
        if stop is not None:
            stop()
        if describe is None:
            raise
        raise ZkStartError(f"{exc}\n{_described(describe)}") from None
    except BaseException:
        if stop is not None:
            stop()
        raise


def _described(describe) -> str:
    if not isinstance(describe, Path):
        return describe()
    try:
        return f"--- {describe} (its end)\n" + describe.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError as exc:
        return f"--- {describe}: {exc}"


def start_attempts(what, attempt, kill, repick, movable, describe, timeout: float) -> None:
    """Run ``attempt(deadline)`` until it succeeds: up to START_ATTEMPTS tries while ``movable()`` (the ports may
    change), each but the last bounded by half of ``timeout``, all of them within ``timeout``. After a failed
    try: its state and logs printed on stderr, ``kill()``, ``repick()``. ZkStartError with every try's report."""
    began = time.monotonic()
    deadline = began + timeout
    failures: list[str] = []
    for n in range(1, START_ATTEMPTS + 1):
        tried = time.monotonic()
        last = n == START_ATTEMPTS or not movable() or deadline - tried < 5.0
        try:
            attempt(deadline if last else min(deadline, tried + timeout / 2))
            return
        except ZkStartError as exc:
            report = f"try {n} ({time.monotonic() - tried:.1f}s): {exc}\n{describe()}"
            failures.append(report)
            again = " (trying again on fresh ports)" if not last else ""
            text = f"\nzklocks.testing: {what.name} did not start{again}, {report}"
            print(text, file=sys.stderr, flush=True)  # noqa: T201 the test run's stderr shows it before the logs go
            kill()
            if last:
                break
            repick()
        except BaseException:
            kill()  # e.g. one server of an ensemble could not be spawned: stop the others
            raise
    raise ZkStartError(f"{what.name} did not start within {time.monotonic() - began:.0f}s:\n" + "\n".join(failures))


class StartedInWith:
    """``with server:`` (or an ensemble) starts it and cleans it up after, also when the start fails."""

    def start(self, timeout: float = 60.0) -> Any:  # each kind has its own default timeout
        raise NotImplementedError

    def cleanup(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

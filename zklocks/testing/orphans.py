"""Process groups that must not outlive the command that started them, however it ends.

A command's clean-up (a fixture's ``finally``, :func:`~zklocks.testing.runtime.stopped_on_exit`) does not run when
the command is killed: SIGKILL, or pytest-timeout's ``os._exit`` after a hang. Servers and workers started in
process groups of their own would live on, holding ports, memory and CPU that the next run needs.

So each process that starts such a group has one watchdog: a small Python process, in a session of its own, that
reads ``+PGID`` and ``-PGID`` lines from a pipe whose write end only that process holds. At end of file (the
process is gone, whatever ended it) it kills every group still registered. A stopped group is unregistered by
whoever stops it (runtime.stop_group does), so that a reused id is not killed later.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from typing import IO

from .. import forking

_WATCHDOG = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups = set()
for line in sys.stdin:
    sign, pgid = line[:1], line[1:].strip()
    if pgid.isdigit():
        (groups.add if sign == "+" else groups.discard)(int(pgid))
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""

_lock = threading.Lock()
_pipe: IO[bytes] | None = None  # the watchdog's stdin, in the process that started it
_watchdog: subprocess.Popen | None = None


def _send(line: str, start: bool) -> None:
    global _pipe, _watchdog
    with _lock:
        if _pipe is None:
            if not start:
                return
            _watchdog = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C or a signal to our group does not end it before we are gone
            )
            _pipe = _watchdog.stdin
        pipe = _pipe
        if pipe is None:
            return
        with contextlib.suppress(OSError):  # a watchdog that died: nothing to do but go on
            pipe.write(line.encode() + b"\n")
            pipe.flush()


def adopt(pid: int) -> None:
    """Kill the process group ``pid`` (the leader of a group started with ``start_new_session=True``) if this
    process ends before it is :func:`released <release>`."""
    _send(f"+{pid}", start=True)


def release(pid: int) -> None:
    """The group ``pid`` was stopped: leave it alone from now on."""
    _send(f"-{pid}", start=False)


_inherited: list[object] = []  # a forked child's copies of its parent's pipe and watchdog, kept from the collector


def _reset_after_fork() -> None:
    """A forked child must not hold the parent's pipe open (the parent's watchdog would wait for the child's end
    too); the child's own groups get a watchdog of their own."""
    global _lock, _pipe, _watchdog
    _lock = threading.Lock()
    if _pipe is not None:
        with contextlib.suppress(OSError):
            _pipe.close()  # nothing buffered: each line is flushed as it is written
        _inherited.append(_watchdog)  # not ours to wait for
    _pipe = _watchdog = None


forking.register(_reset_after_fork)

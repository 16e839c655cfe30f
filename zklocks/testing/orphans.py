"""Process groups that must not outlive the command that started them, however it ends (SIGKILL, pytest-timeout's
``os._exit``: docs/testing.md, "Servers and ensembles").

Each process that starts such a group has one watchdog: a small Python process, in a session of its own, that
reads ``+PGID`` and ``-PGID`` lines from a pipe whose write end only that process holds. At end of file (the
process is gone, whatever ended it) it kills every group still registered, unless its id now names a later
process. A stopped group is unregistered by whoever stops it (runtime.stop_group does).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from typing import IO

from .. import forking

# A group's id is its leader's pid. The leader's start time, read when the group is registered, tells a group
# from a later process that reused the id (pid_max may be as low as 32768); a leader that is gone leaves its id
# in use for as long as its group has a member, so the group is still the one registered.
_WATCHDOG = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
def started(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None
groups = {}
for line in sys.stdin:
    sign, pgid = line[:1], line[1:].strip()
    if pgid.isdigit():
        if sign == "+":
            groups[int(pgid)] = started(pgid)
        else:
            groups.pop(int(pgid), None)
for pgid, start in groups.items():
    now = started(pgid)
    if now is not None and now != start:
        continue
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
        # Not close(): a parent thread may have held the file's buffer at the fork. The descriptor now leads to
        # /dev/null, and the file object is kept, so that nothing flushes into a reused descriptor.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, _pipe.fileno())
            os.close(devnull)
        _inherited.append((_pipe, _watchdog))
    _pipe = _watchdog = None


forking.register(_reset_after_fork)

"""zklocks.testing.orphans: a process group that a command started dies with the command, however the command
ends (here SIGKILL, as pytest-timeout's os._exit or the OOM killer end it); a group it stopped itself is left
alone."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, wait_until

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)"),
]

COMMAND = textwrap.dedent(
    """\
    import subprocess, sys, time
    from zklocks.testing import orphans

    group = subprocess.Popen(["sleep", "300"], start_new_session=True)
    orphans.adopt(group.pid)
    if sys.argv[1] == "release":
        orphans.release(group.pid)
    print(group.pid, orphans._watchdog.pid, flush=True)
    time.sleep(300)
    """
)


def running(pid: int) -> bool:
    """The process exists and is no zombie (an orphan is reaped by whoever adopts it, maybe late)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def killed_command(mode: str) -> int:
    """The pid of the group the command started, once the command was killed with SIGKILL and its watchdog has
    done what it does at the command's end."""
    command = subprocess.Popen(
        [sys.executable, "-c", COMMAND, mode], cwd=ROOT, stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        pid, watchdog = map(int, command.stdout.readline().split())
        assert running(pid) and running(watchdog)
    finally:
        os.killpg(command.pid, signal.SIGKILL)  # the command's own group: not the one it started
        command.wait(10)
        command.stdout.close()
    wait_until(lambda: not running(watchdog), timeout=10)
    return pid


def test_a_group_dies_with_the_command_that_started_it():
    pid = killed_command("keep")
    try:
        wait_until(lambda: not running(pid), timeout=5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_a_group_the_command_released_lives_on():
    pid = killed_command("release")
    try:
        assert running(pid), "a released group was killed with the command"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

"""zklocks.testing.orphans: a process group that a command started dies with the command, however the command
ends (here SIGKILL, as pytest-timeout's os._exit or the OOM killer end it); a group it stopped itself is left
alone."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support.helpers import ROOT, wait_until

pytestmark = [pytest.mark.timeout(60)]

COMMAND = textwrap.dedent(
    """\
    import subprocess, sys, time
    from zklocks.testing import orphans

    group = subprocess.Popen(["sleep", "300"], start_new_session=True)
    orphans.adopt(group.pid)
    if sys.argv[1] == "release":
        orphans.release(group.pid)
    print(group.pid, flush=True)
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
    """The pid of the group the command started, after the command was killed with SIGKILL."""
    command = subprocess.Popen(
        [sys.executable, "-c", COMMAND, mode], cwd=ROOT, stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        pid = int(command.stdout.readline())
        assert running(pid)
    finally:
        os.killpg(command.pid, signal.SIGKILL)  # the command's own group: not the one it started
        command.wait(10)
        command.stdout.close()
    return pid


def test_a_group_dies_with_the_command_that_started_it():
    pid = killed_command("keep")
    wait_until(lambda: not running(pid), timeout=10)


def test_a_group_the_command_released_lives_on():
    pid = killed_command("release")
    try:
        wait_until(lambda: not running(pid), timeout=2)
    except AssertionError:
        pass  # still running two seconds after the command's end, as it should
    else:
        pytest.fail("a released group was killed with the command")
    finally:
        os.killpg(pid, signal.SIGKILL)

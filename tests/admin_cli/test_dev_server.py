"""`python -m zklocks.testing.server`: a local ZooKeeper for development that prints host:port and stops on
Ctrl-C; and zklocks_check saying when the server negotiated another session timeout than the configured one."""

import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command

from zklocks.testing import four_letter, free_port

ROOT = Path(__file__).resolve().parents[2]


def start(*argv):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "zklocks.testing.server", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def test_runs_prints_host_port_and_stops_on_ctrl_c():
    port = free_port()
    proc = start("--port", str(port))
    try:
        assert proc.stdout.readline() == f"127.0.0.1:{port}\n"
        assert four_letter(port, "ruok") == "imok"
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        assert proc.wait(20) == 0
        stderr = proc.stderr.read()
        assert "RuntimeWarning" not in stderr and "Traceback" not in stderr, stderr
        assert "ZooKeeper stopped" in stderr
        deadline = time.monotonic() + 5
        while four_letter(port, "ruok", timeout=0.5) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert four_letter(port, "ruok", timeout=0.5) == ""  # the JVM is gone too
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_a_busy_port_says_so():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = start("--port", str(port))
        out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (2, "")
    assert err == f"port {port} is busy (another ZooKeeper?): give --port 0 for a free one\n"


@pytest.mark.zk
def test_zklocks_check_notes_a_negotiated_session_timeout(zklocks_settings, zk_server):
    zklocks_settings(SESSION_TIMEOUT=10.0)  # the suite's server has tickTime=200 ms: at most 4 s
    out = io.StringIO()
    call_command("zklocks_check", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[:2] == [
        f"default: ok connected to {zk_server.hosts} (session timeout 4s)",
        "default: note the server gave a session timeout of 4s instead of SESSION_TIMEOUT=10s: servers allow "
        "2 to 20 times their tickTime (minSessionTimeout, maxSessionTimeout in zoo.cfg); set SESSION_TIMEOUT "
        "within those bounds",
    ]

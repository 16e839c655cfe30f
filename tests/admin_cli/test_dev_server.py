"""`python -m zklocks.testing.server`: a local ZooKeeper for development that prints host:port, stops on Ctrl-C,
starts again at once on the same port and keeps its data across restarts (--ephemeral: starts empty); and
zklocks_check saying when the server negotiated another session timeout than the configured one."""

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from kazoo.client import KazooClient

from zklocks.testing import four_letter, free_port

ROOT = Path(__file__).resolve().parents[2]


def start(*argv, state: Path):
    """The server in its own process group; ``state`` is its XDG_STATE_HOME (where it keeps its data)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(state)}
    return subprocess.Popen(
        [sys.executable, "-m", "zklocks.testing.server", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def test_runs_prints_host_port_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    proc = start("--port", str(port), state=tmp_path)
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


@pytest.mark.parametrize("reuse", [False, True])
def test_a_busy_port_says_so(tmp_path, reuse):
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))  # a listener is a listener
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = start("--port", str(port), state=tmp_path)
        out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (2, "")
    assert err == f"port {port} is busy (another ZooKeeper?): give --port 0 for a free one\n"
    assert not (tmp_path / "zklocks").exists()


def closed_connections_on(port: int) -> list[str]:
    """The states (hex, as in /proc/net/tcp) of the non-listening TCP sockets whose local port is ``port``."""
    states = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # the JVM's sockets are IPv6, IPv4-mapped
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] != "0A":
                states.append(fields[3])
    return states


class DevServer:
    """One run of the development server: its first stdout line, its data line, a Ctrl-C that must stop it."""

    def __init__(self, port: int, state: Path, *argv: str) -> None:
        self.port = port
        self.proc = start("--port", str(port), *argv, state=state)
        first = self.proc.stdout.readline()
        if first != f"127.0.0.1:{port}\n":
            self.proc.kill()
            out, err = self.proc.communicate(timeout=30)
            raise AssertionError(f"exit {self.proc.returncode}, stdout {first + out!r}, stderr {err!r}")
        self.data_line = self.proc.stderr.readline()

    def client(self) -> KazooClient:
        client = KazooClient(hosts=f"127.0.0.1:{self.port}", timeout=10.0)
        client.start(timeout=20)
        return client

    def ctrl_c(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.wait(20) == 0
        stderr = self.proc.stderr.read()
        assert "Traceback" not in stderr and "ZooKeeper stopped" in stderr, stderr

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def test_starts_again_at_once_with_its_data_unless_ephemeral(tmp_path):
    """Ctrl-C, then the same command at once: the port (its old connections in TIME_WAIT) is not busy, and the
    node written before is there; --ephemeral starts empty and leaves the kept data alone."""
    port = free_port()
    kept = tmp_path / "zklocks" / f"dev-server-{port}"
    runs: list[DevServer] = []
    try:
        runs.append(DevServer(port, tmp_path))
        assert runs[-1].data_line == f"data in {kept} (kept across restarts; --ephemeral starts empty)\n"
        client = runs[-1].client()
        client.create("/kept", b"before the restart")
        client.stop()
        client.close()
        runs[-1].ctrl_c()
        # The case at hand: the server closed its connections first, they wait in TIME_WAIT ("06") on its port.
        assert "06" in closed_connections_on(port)

        runs.append(DevServer(port, tmp_path))
        client = runs[-1].client()
        assert client.get("/kept")[0] == b"before the restart"
        client.stop()
        client.close()
        runs[-1].ctrl_c()

        runs.append(DevServer(port, tmp_path, "--ephemeral"))
        assert runs[-1].data_line.endswith(" (temporary, removed when the server stops)\n")
        assert str(kept) not in runs[-1].data_line
        client = runs[-1].client()
        assert client.exists("/kept") is None
        client.stop()
        client.close()
        runs[-1].ctrl_c()
        assert (kept / "data" / "version-2").is_dir()  # still there for the next run without --ephemeral
    finally:
        for run in runs:
            run.kill()


@pytest.mark.zk
def test_zklocks_check_notes_a_negotiated_session_timeout(zklocks_settings, zk_server):
    zklocks_settings(SESSION_TIMEOUT=10.0)  # the suite's server has tickTime=200 ms: at most 4 s
    out = io.StringIO()
    with contextlib.suppress(CommandError):  # the suite's open /zklocks-test above the namespace is a finding
        call_command("zklocks_check", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[:2] == [
        f"default: ok connected to {zk_server.hosts} (session timeout 4s)",
        "default: note the server gave a session timeout of 4s instead of SESSION_TIMEOUT=10s: servers allow "
        "2 to 20 times their tickTime (minSessionTimeout, maxSessionTimeout in zoo.cfg); set SESSION_TIMEOUT "
        "within those bounds",
    ]


def test_help_gives_the_unit_of_tick_time(capsys):
    from zklocks.testing.devserver import run
    from zklocks.testing.server import ZkServer

    with pytest.raises(SystemExit) as exited:
        run(ZkServer, ["--help"])
    assert exited.value.code == 0
    usage = capsys.readouterr().out
    assert "--tick-time MS" in usage and "milliseconds" in usage, usage

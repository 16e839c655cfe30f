"""Nothing left running: ``make compare``, ``make bench`` and ``make demo`` stop every process they started, when
they fail and on Ctrl-C.

Each command runs with a tag of its own in its environment (``ZKLOCKS_LEFTOVER_TAG``), which every process it starts
inherits: servers (JVMs, etcd, PostgreSQL, PgBouncer, Redis), workers, fork servers. A process started by the command
is one that carries the tag, or descends from one that does, or was seen so during the run (PostgreSQL's children
overwrite the memory /proc/PID/environ reads). Once the command has exited, none may remain.

Ctrl-C is pressed twice, as an impatient user does: the second one must not cut the clean-up short.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from zklocks.testing.server import four_letter

ROOT = Path(__file__).resolve().parents[2]
TAG = "ZKLOCKS_LEFTOVER_TAG"
GRACE = 10.0  # how long processes may take to go once the command has exited

pytestmark = pytest.mark.leftovers


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process, None once it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), fields[19]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


class Command:
    """A command run as in a terminal (a session of its own), with its tag; what it started, found from /proc."""

    def __init__(self, argv: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> None:
        self.tag = uuid.uuid4().hex
        self.log = tmp_path / "output.log"
        self.seen: dict[int, tuple[str, str]] = {}  # pid -> (start time, command line)
        environ = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ZKLOCKS_HOSTS", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
        }
        environ.update(env or {}, PYTHONUNBUFFERED="1")
        environ[TAG] = self.tag
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def started(self) -> dict[int, str]:
        """pid -> command line of every live process the command started (itself included while it runs)."""
        needle = f"{TAG}={self.tag}".encode()
        parents: dict[int, int] = {}
        tagged: set[int] = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            stat = _stat(pid)
            if stat is None:
                continue
            parents[pid] = stat[0]
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                tagged.add(pid)
        found = set(tagged)
        for pid in parents:
            ancestor, hops = parents.get(pid), 0
            while ancestor and ancestor not in tagged and hops < 64:
                ancestor, hops = parents.get(ancestor), hops + 1
            if ancestor in tagged:
                found.add(pid)
        for pid, (start, _) in list(self.seen.items()):
            stat = _stat(pid)
            if stat is not None and stat[1] == start:
                found.add(pid)
        out = {}
        for pid in found:
            stat = _stat(pid)
            if stat is None:
                continue
            self.seen.setdefault(pid, (stat[1], _cmdline(pid)))
            out[pid] = self.seen[pid][1]
        return out

    def wait_for(self, what: str, check, timeout: float):
        """Poll ``check()`` (and what the command started) until it is true; fail if the command exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.started()
            found = check()
            if found:
                return found
            if self.proc.poll() is not None:
                pytest.fail(f"the command exited with {self.proc.returncode} before {what}:\n{self.output()[-4000:]}")
            time.sleep(0.2)
        pytest.fail(f"{what}: not within {timeout:g}s\n{self.output()[-4000:]}")

    def interrupt(self, again_after: float = 0.3) -> None:
        """Ctrl-C, then Ctrl-C again while it stops (an impatient user): SIGINT to the terminal's foreground process
        group, here the command's own session."""
        os.killpg(self.proc.pid, signal.SIGINT)
        time.sleep(again_after)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)

    def wait(self, timeout: float) -> int:
        """The command's exit status, watching what it started meanwhile; fail if it does not exit in time."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                pytest.fail(f"the command did not exit within {timeout:g}s:\n{self.output()[-4000:]}")
            self.started()
            time.sleep(0.2)
        return self.proc.returncode

    def leftovers(self) -> dict[int, str]:
        """What the command started and is still running ``GRACE`` seconds after it exited."""
        deadline = time.monotonic() + GRACE
        while (left := self.started()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def kill(self) -> None:
        """The test's own clean-up, whatever happened: nothing the command started outlives the test."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for pid in self.started():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture
def command(tmp_path):
    made: list[Command] = []

    def run(argv: list[str], env: dict[str, str] | None = None) -> Command:
        made.append(Command(argv, tmp_path, env))
        return made[-1]

    yield run
    for cmd in made:
        cmd.kill()


def names(processes: dict[int, str]) -> set[str]:
    """The servers among ``processes``: zookeeper, etcd, postgres, pgbouncer, redis (by the program run, not by a
    word in some command line: the command's own names its systems, initdb's runs postgres without a port)."""
    out = set()
    for line in processes.values():
        argv = line.split()
        if "--" in argv[:6] and argv[0].endswith("setpriv"):
            argv = argv[argv.index("--") + 1 :]
        program = os.path.basename(argv[0]) if argv else ""
        if program == "java" and "org.apache.zookeeper.server.quorum.QuorumPeerMain" in argv:
            out.add("zookeeper")
        elif program == "postgres" and "-p" in argv:
            out.add("postgres")
        elif program in ("etcd", "pgbouncer"):
            out.add(program)
        elif program == "redis-server":
            out.add("redis")
    return out


def assert_none_left(cmd: Command) -> None:
    left = cmd.leftovers()
    assert not left, f"still running {GRACE:g}s after the command exited: " + "; ".join(
        f"{pid}: {line[:200]}" for pid, line in sorted(left.items())
    )


# Four systems at once (--quick runs four at a time): every kind of store is up when the run fails or is interrupted.
COMPARE = [
    sys.executable, "-m", "benchmarks.compare", "--quick", "--systems", "etcd,zklocks,pglock-pgbouncer,redlock",
]  # fmt: skip


def hidden_client(tmp_path: Path) -> Path:
    """A directory that, first on PYTHONPATH, makes etcd's client library (etcd3gw and requests) not installed."""
    hidden = tmp_path / "hidden"
    for name in ("requests", "etcd3gw"):
        (hidden / name).mkdir(parents=True)
        (hidden / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}' (hidden by the test)\", name={name!r})\n"
        )
    return hidden


@pytest.mark.timeout(200)
def test_compare_that_fails_after_its_servers_started_leaves_nothing(command, tmp_path):
    hidden = hidden_client(tmp_path)
    pythonpath = os.pathsep.join(p for p in (str(hidden), os.environ.get("PYTHONPATH")) if p)
    cmd = command([*COMPARE, "--out", str(tmp_path / "out")], env={"PYTHONPATH": pythonpath})
    code = cmd.wait(150)
    output = cmd.output()
    assert code != 0, output[-4000:]
    # The import failed in Etcd.ready(), which is asked only once etcd listens: after etcd started.
    assert re.search(r'stores\.py", line \d+, in ready\n\s+import requests', output), output[-4000:]
    assert "No module named 'requests'" in output, output[-4000:]
    assert_none_left(cmd)


@pytest.mark.timeout(240)
def test_compare_interrupted_mid_run_leaves_nothing(command, tmp_path):
    cmd = command([*COMPARE, "--out", str(tmp_path / "out")])

    def mid_run() -> set[str]:
        running = names(cmd.started())
        return running if ": faults (" in cmd.output() and {"postgres", "pgbouncer"} <= running else set()

    running = cmd.wait_for("a fault schedule began while PostgreSQL and PgBouncer run", mid_run, 150)
    assert {"zookeeper", "redis"} & running, running
    cmd.interrupt()
    cmd.wait(60)
    assert_none_left(cmd)


def _zookeeper_serves(cmd: Command) -> bool:
    """Whether a ZooKeeper the command started answers as a server (its port from the zoo.cfg it was given)."""
    for line in cmd.started().values():
        if "QuorumPeerMain" not in line:
            continue
        try:
            cfg = Path(line.split()[-1]).read_text()
        except OSError:
            continue
        port = re.search(r"^clientPort=(\d+)", cfg, re.M)
        if port and "Mode:" in four_letter(int(port.group(1)), "srvr", timeout=0.5):
            return True
    return False


@pytest.mark.timeout(200)
def test_bench_that_fails_after_its_zookeeper_started_leaves_nothing(command, tmp_path):
    # Redis comes second: a missing redis-server fails the run once ZooKeeper serves.
    missing = str(tmp_path / "no-redis-server")
    cmd = command(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path / "out")],
        env={"ZKLOCKS_REDIS_SERVER": missing},
    )
    assert cmd.wait(120) != 0
    assert "redis-server is not installed" in cmd.output(), cmd.output()[-4000:]
    seen = names({pid: line for pid, (_, line) in cmd.seen.items()})
    assert "zookeeper" in seen, f"the run failed before ZooKeeper started (saw {seen}):\n{cmd.output()[-4000:]}"
    assert_none_left(cmd)


@pytest.mark.timeout(200)
def test_bench_interrupted_once_its_zookeeper_serves_leaves_nothing(command, tmp_path):
    cmd = command([sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path / "out")])
    # Both servers up: the first Ctrl-C starts stopping ZooKeeper, the second lands while it does.
    cmd.wait_for(
        "its ZooKeeper served and its Redis ran", lambda: _zookeeper_serves(cmd) and "redis" in names(cmd.started()), 90
    )
    cmd.interrupt()
    cmd.wait(60)
    assert_none_left(cmd)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(240)
def test_demo_interrupted_once_it_serves_leaves_nothing(command, tmp_path):
    port = _free_port()
    cmd = command(
        [sys.executable, "-m", "demo_project.run", "--port", str(port)],
        env={"ZKLOCKS_DEMO_DIR": str(tmp_path / "demo")},
    )
    cmd.wait_for("the demo served", lambda: "ready at" in cmd.output(), 150)
    seen = names(cmd.started())
    assert {"zookeeper", "redis"} <= seen, seen
    cmd.interrupt()
    assert cmd.wait(60) == 0, cmd.output()[-4000:]
    assert_none_left(cmd)

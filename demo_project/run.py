"""``make demo``: everything the demo needs, started in order and stopped together.

    python -m demo_project.run [--port 8000] [--exit-after SECONDS] [--no-load]
    make demo DEMO_PORT=8001     # when port 8000 is taken

1. ZooKeeper: a local server with its data under .demo/zookeeper, or the ensemble in $ZKLOCKS_HOSTS.
2. Redis: a local server under .demo/redis, or the broker in $CELERY_BROKER_URL.
3. Migrates the SQLite database (.demo/demo.sqlite3), seeds the shop, creates the admin user and prints its login.
4. A Celery worker, the development server and a small load generator.

DEBUG is off unless DJANGO_DEBUG=1, and the SECRET_KEY is drawn on the first run (then kept in the data directory:
the nodes ZooKeeper keeps grant the identity derived from it) unless DJANGO_SECRET_KEY is set.

Ctrl-C (SIGINT) or SIGTERM stops everything it started: each child runs in its own process group and the
whole group is stopped. Logs are under .demo/logs/. While it runs, .demo/services.json holds the ZooKeeper hosts
and the broker URL, which demo_project/settings.py reads: ``python manage.py zklocks_status`` in another terminal
reaches the demo's ZooKeeper.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


class Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise Stop(signal.Signals(signum).name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, what: str, timeout: float, procs: dict | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for name, proc in (procs or {}).items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}")
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready within {timeout:g}s")


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status < 500
    except Exception:  # noqa: BLE001 not up yet, whatever the reason
        return False


def web_argv(port: int) -> list[str]:
    """The development server of the demo. ``--insecure`` serves the admin's static files with DEBUG off too (the
    demo's default): it listens on 127.0.0.1 only."""
    return [PY, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"]


class Demo:
    def __init__(self, args) -> None:
        self.args = args
        self.data = Path(os.environ.get("ZKLOCKS_DEMO_DIR", ROOT / ".demo")).resolve()
        self.logs = self.data / "logs"
        self.procs: dict[str, subprocess.Popen] = {}  # in start order
        self.zk = None
        self.env = dict(os.environ)

    def say(self, text: str) -> None:
        print(f"demo: {text}", flush=True)

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        self._write_pids()
        return proc

    def _write_pids(self) -> None:
        pids = {name: p.pid for name, p in self.procs.items()}
        if self.zk is not None and self.zk.proc is not None:
            pids["zookeeper"] = self.zk.proc.pid
        (self.data / "pids.json").write_text(json.dumps(pids))

    def manage(self, *argv: str) -> None:
        subprocess.run(
            [PY, "manage.py", *argv],
            cwd=ROOT,
            env=self.env,
            check=True,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            timeout=300,
        )

    # -- the parts --

    def start_zookeeper(self) -> None:
        if os.environ.get("ZKLOCKS_HOSTS"):
            self.say(f"ZooKeeper: using {os.environ['ZKLOCKS_HOSTS']}")
            return
        from zklocks.testing import ZkServer

        # tickTime 500 ms lets sessions of up to 10 s (20 ticks), the demo's SESSION_TIMEOUT.
        self.zk = ZkServer(tick_time=500, workdir=str(self.data / "zookeeper"))
        self.zk.spawn()
        self._write_pids()
        self.zk.wait_ready(90)
        self.env["ZKLOCKS_HOSTS"] = self.zk.hosts
        self.say(f"ZooKeeper: started on {self.zk.hosts} (data in {self.zk.dir})")

    def start_redis(self) -> None:
        if os.environ.get("CELERY_BROKER_URL"):
            self.say(f"Redis: using {os.environ['CELERY_BROKER_URL']}")
            return
        if shutil.which("redis-server") is None:
            raise RuntimeError(
                "redis-server is not installed: run `make demo` (it installs it) or apt-get install redis-server"
            )
        port = free_port()
        rdir = self.data / "redis"
        rdir.mkdir(parents=True, exist_ok=True)
        self.spawn(
            "redis",
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(rdir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
        )
        wait_for(lambda: redis_ping(port), "Redis", 30, self.procs)
        self.env["CELERY_BROKER_URL"] = f"redis://127.0.0.1:{port}/0"
        self.say(f"Redis: started on 127.0.0.1:{port}")

    def prepare_database(self) -> str:
        self.manage("migrate", "--noinput", "-v", "0")
        password = os.environ.get("DEMO_ADMIN_PASSWORD") or secrets.token_urlsafe(9)
        self.env["DEMO_ADMIN_PASSWORD"] = password
        self.manage("demo_setup")
        del self.env["DEMO_ADMIN_PASSWORD"]  # the children need not know it
        self.say(f"database: {self.data / 'demo.sqlite3'} migrated and seeded")
        return password

    def start_worker(self) -> None:
        self.spawn(
            "celery",
            [
                PY,
                "-m",
                "celery",
                "-A",
                "demo_project.tasks",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "3",
                "--hostname",
                f"demo-{os.getpid()}@%h",
                "--without-gossip",
                "--without-mingle",
            ],
        )
        self.say("Celery worker: started (log: .demo/logs/celery.log)")

    def start_beats(self, count: int = 2) -> None:
        """Two ``celery beat`` processes, as on two hosts: one leads and sends, the other stands by."""
        for n in range(1, count + 1):
            state = self.data / f"beat-{n}"
            state.mkdir(parents=True, exist_ok=True)
            self.spawn(
                f"beat-{n}",
                [
                    PY,
                    "-m",
                    "celery",
                    "-A",
                    "demo_project.tasks",
                    "beat",
                    "-S",
                    "zklocks.celery.beat:LeaderScheduler",
                    "-s",
                    str(state / "schedule"),
                    "--pidfile",
                    str(state / "beat.pid"),
                    "--loglevel",
                    "INFO",
                ],
            )
        self.say(f"Celery beat: {count} started, one leads (logs: .demo/logs/beat-*.log)")

    def start_web(self) -> str:
        port = self.args.port or free_port()
        url = f"http://127.0.0.1:{port}"
        self.spawn("web", web_argv(port))
        wait_for(lambda: http_ok(url + "/admin/login/"), "the web server", 60, self.procs)
        self.say(f"web: {url}/ (log: .demo/logs/web.log)")
        return url

    def start_load(self, url: str) -> None:
        self.spawn("load", [PY, "-m", "demo_project.load", "--url", url, "--buyers", str(self.args.buyers)])
        self.say("load generator: started (log: .demo/logs/load.log)")

    # -- run and stop --

    def check_port(self) -> None:
        if not self.args.port:
            return
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", self.args.port))
            except OSError:
                raise RuntimeError(
                    f"port {self.args.port} is busy (another demo or runserver?): stop it, or run "
                    f"`make demo DEMO_PORT={self.args.port + 1}` (python -m demo_project.run --port "
                    f"{self.args.port + 1})"
                ) from None

    def write_services(self) -> None:
        """Where a manage.py command run beside the demo finds its ZooKeeper and broker (settings.py reads it)."""
        services = {key: self.env[key] for key in ("ZKLOCKS_HOSTS", "CELERY_BROKER_URL") if key in self.env}
        (self.data / "services.json").write_text(json.dumps(services))

    def secret_key(self) -> str:
        """The demo's SECRET_KEY: drawn on the first run, then read from its data directory (mode 0600)."""
        path = self.data / "secret_key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(50))
        return path.read_text().strip()

    def run(self) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env["ZKLOCKS_DEMO_DIR"] = str(self.data)
        self.env["DJANGO_SETTINGS_MODULE"] = "demo_project.settings"
        self.env["PYTHONPATH"] = str(ROOT) + os.pathsep + self.env.get("PYTHONPATH", "")
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        # One key for every process it starts (settings.py would draw one per process otherwise), kept with the
        # demo's data: the lock nodes that ZooKeeper keeps between runs grant the identity derived from it.
        self.env["DJANGO_SECRET_KEY"] = os.environ.get("DJANGO_SECRET_KEY") or self.secret_key()
        signal.signal(signal.SIGINT, _raise_stop)
        signal.signal(signal.SIGTERM, _raise_stop)
        try:
            self.check_port()
            self.start_zookeeper()
            self.start_redis()
            self.write_services()
            password = self.prepare_database()
            self.start_worker()
            self.start_beats()
            url = self.start_web()
            if not self.args.no_load:
                self.start_load(url)
            (self.data / "login.json").write_text(json.dumps({"url": url, "username": "admin", "password": password}))
            self.say(f"admin: {url}/admin/zklocks/lock/?refresh=2  login: admin / {password}")
            self.say(f"ready at {url} (Ctrl-C stops everything)")
            deadline = None if self.args.exit_after is None else time.monotonic() + self.args.exit_after
            while deadline is None or time.monotonic() < deadline:
                for name, proc in self.procs.items():
                    if proc.poll() is not None and name != "load":
                        self.say(f"{name} exited with {proc.returncode}; see {self.logs / (name + '.log')}")
                        return 1
                time.sleep(0.5)
            self.say("--exit-after reached")
            return 0
        except Stop as stop:
            self.say(f"{stop}: stopping")
            return 0
        except (RuntimeError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            self.say(f"failed: {exc}")
            return 1
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self.stop()

    def stop(self) -> None:
        (self.data / "services.json").unlink(missing_ok=True)
        for proc in reversed(list(self.procs.values())):
            _stop_group(proc)
        if self.zk is not None:
            self.zk.stop()
        self.say("stopped everything it started")


def _stop_group(proc: subprocess.Popen, grace: float = 8.0) -> None:
    """SIGTERM the child (a Celery worker then stops its own pool), SIGKILL whatever is left of its group."""
    if proc.poll() is None:
        try:
            proc.terminate()
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("DEMO_PORT", "8000")), help="web server port (0: a free one)"
    )
    parser.add_argument("--exit-after", type=float, help="stop everything after this many seconds (for tests)")
    parser.add_argument("--no-load", action="store_true", help="do not start the load generator")
    parser.add_argument("--buyers", type=int, default=6, help="concurrent buyers of the load generator")
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return Demo(args).run()


if __name__ == "__main__":
    sys.exit(main())

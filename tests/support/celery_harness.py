"""Real Redis and real ``celery worker`` processes for the Celery tests.

Every process runs in its own process group and is stopped in a fixture teardown (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, read_records, wait_until
from tests.support.redis_server import RedisServer
from zklocks.testing.runtime import start_group, stop_group
from zklocks.testing.startup import poll_until


class CeleryWorker:
    """``celery -A tests.support.celery_app worker`` with the given pool, concurrency and queue."""

    def __init__(
        self,
        env: dict[str, str],
        *,
        pool: str = "prefork",
        concurrency: int = 2,
        queue: str = "zk-prefork",
        logdir: Path,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.name = f"{pool}-{uuid.uuid4().hex[:6]}@localhost"
        self.pool = pool
        self.queue = queue
        self.log = logdir / f"worker-{self.name.split('@')[0]}.log"
        self.env = env
        self.args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.support.celery_app",
            "worker",
            "-P",
            pool,
            "-c",
            str(concurrency),
            "-n",
            self.name,
            "-Q",
            queue,
            "-l",
            "INFO",
            "-O",
            "fair",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *extra,
        ]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> CeleryWorker:
        out = open(self.log, "ab")
        self.proc = start_group(
            self.args,
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        out.close()
        message = f"worker {self.name} not ready within {timeout}s"
        poll_until(lambda: " ready." in self.read_log(), self.log, message, timeout, proc=self.proc, stop=self.kill)
        return self

    def read_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def children(self) -> list[int]:
        """Pool child pids (prefork)."""
        if self.proc is None:
            return []
        try:
            text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except FileNotFoundError:
            return []
        return [int(p) for p in text.split()]

    def terminate(self) -> None:
        """Ask for a warm shutdown (SIGTERM to the group)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 15.0) -> int | None:
        """Warm shutdown, then SIGKILL of the whole group if it takes too long."""
        if self.proc is None:
            return None
        self.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is None:
            return
        stop_group(self.proc, steps=((signal.SIGKILL, 10.0),))


class CeleryEnv:
    """What workers and the test share: ZooKeeper hosts and namespace, the broker, a records directory."""

    def __init__(self, hosts: str, broker: str, session_timeout: float = 2.0, connect_timeout: float = 2.0) -> None:
        self.hosts = hosts
        self.broker = broker
        self.namespace = f"/zklocks-test/celery-{uuid.uuid4().hex[:10]}"
        self.session_timeout = session_timeout
        self.connect_timeout = connect_timeout
        self.dir = Path(tempfile.mkdtemp(prefix="zklocks-celery-"))
        self.records = self.dir / "records"
        self.records.mkdir()
        self.workers: list[CeleryWorker] = []

    def environ(self, **overrides: str) -> dict[str, str]:
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            ZKLOCKS_TEST_HOSTS=self.hosts,
            ZKLOCKS_TEST_NAMESPACE=self.namespace,
            ZKLOCKS_TEST_BROKER=self.broker,
            ZKLOCKS_TEST_RECORDS=str(self.records),
            ZKLOCKS_TEST_SESSION_TIMEOUT=str(self.session_timeout),
            ZKLOCKS_TEST_CONNECT_TIMEOUT=str(self.connect_timeout),
        )
        env.pop("DJANGO_SETTINGS_MODULE", None)
        env.update(overrides)
        return env

    def worker(self, **kwargs) -> CeleryWorker:
        env_overrides = kwargs.pop("env", {})
        worker = CeleryWorker(self.environ(**env_overrides), logdir=self.dir, **kwargs)
        self.workers.append(worker)
        return worker.start()

    def records_of(self, kind: str) -> list[dict]:
        return read_records(self.records / f"{kind}.jsonl")

    def wait_records(self, kind: str, count: int, timeout: float = 30.0) -> list[dict]:
        wait_until(lambda: len(self.records_of(kind)) >= count, timeout=timeout, interval=0.05)
        return self.records_of(kind)

    def settings(self) -> dict:
        return {
            "default": {
                "HOSTS": self.hosts,
                "NAMESPACE": self.namespace,
                "SESSION_TIMEOUT": self.session_timeout,
                "CONNECT_TIMEOUT": self.connect_timeout,
                "REAP_INTERVAL": 0,
            }
        }

    def cleanup(self) -> None:
        for worker in self.workers:  # all at once: a warm shutdown can take seconds (gevent: 5 s)
            worker.terminate()
        for worker in self.workers:
            worker.stop()
        self.workers.clear()
        if not os.environ.get("ZKLOCKS_KEEP_WORKER_LOGS"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        return "\n".join(f"--- {w.name}\n{w.read_log()[-4000:]}" for w in self.workers)


@contextlib.contextmanager
def running_workers(hosts: str, broker: str, *workers: dict, **env_options):
    """The one way a test starts Celery workers: a CeleryEnv with ``workers`` started (each a dict of
    ``CeleryEnv.worker`` arguments; more can be started on the env), every one stopped on exit."""
    env = CeleryEnv(hosts, broker, **env_options)
    try:
        for worker in workers:
            env.worker(**worker)
        yield env
    finally:
        env.cleanup()


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def celery_app(redis_server):
    from tests.support.celery_app import app

    app.conf.broker_url = f"{redis_server.url}/0"
    app.conf.result_backend = f"{redis_server.url}/1"
    # An eager test may have built the result backend from the defaults before this fixture ran: drop it, so
    # the suite's order never decides which Redis the results go to.
    app._backend_cache = None
    app._local.__dict__.pop("backend", None)
    yield app
    gc.collect()  # results never waited for unsubscribe in __del__: let them while Redis is still up
    app.close()


@pytest.fixture
def celery_settings(request):
    """settings.ZKLOCKS of this process pointed at the workers' namespace (for unique_queued producers)."""
    from django.test import override_settings

    from zklocks.client.pools import close_all

    env = request.getfixturevalue("celery_env")
    override = override_settings(ZKLOCKS=env.settings())
    override.enable()
    try:
        yield env
    finally:
        override.disable()
        close_all()


def new_key() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture
def bad_tasks():
    """The misconfigured tasks; their system-check problems are forgotten afterwards."""
    from tests.support import celery_bad_tasks
    from zklocks.celery import conf as celery_conf
    from zklocks.celery.task import record_option_problems

    tasks = (celery_bad_tasks.bad_key_missing, celery_bad_tasks.bad_key_format)
    for task in tasks:
        record_option_problems(type(task._get_current_object()) if hasattr(task, "_get_current_object") else type(task))
    try:
        yield celery_bad_tasks
    finally:
        names = {task.name for task in tasks}
        celery_conf.declared_task_problems[:] = [p for p in celery_conf.declared_task_problems if p[0] not in names]
        celery_conf.declared_task_warnings[:] = [p for p in celery_conf.declared_task_warnings if p[0] not in names]

"""zklocks.tasks over django-tasks-db's DatabaseBackend: real ``db_worker`` processes and producer processes on
one SQLite file, against the suite's ZooKeeper."""

import json
import os
import signal
import subprocess
import sys
import time
from itertools import pairwise

import pytest

from tests.support.helpers import ROOT, wait_until
from tests.tasks.conftest import REQUIRES

pytest.importorskip("django_tasks_db")

pytestmark = [pytest.mark.zk, pytest.mark.timeout(150)]

pytest.importorskip(**REQUIRES, exc_type=ImportError)


class Harness:
    def __init__(self, tmp_path, hosts: str, namespace: str) -> None:
        self.log = tmp_path / "runs.log"
        self.env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            DJANGO_SETTINGS_MODULE="tests.support.djtasks_settings",
            ZKLOCKS_TEST_TASKS_DB=str(tmp_path / "tasks.sqlite3"),
            ZKLOCKS_TEST_HOSTS=hosts,
            ZKLOCKS_TEST_NAMESPACE=namespace,
            ZKLOCKS_TEST_TASK_LOG=str(self.log),
        )
        self.workers: list[subprocess.Popen] = []
        self.tmp_path = tmp_path
        self.run(["-m", "django", "migrate", "-v", "0"])

    def run(self, args: list[str], timeout: float = 60) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def producer(self, task: str, key: str, count: int = 1, seconds: float = 0.5) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.djtasks_cli", "enqueue", task, key, "--count", str(count),
             "--seconds", str(seconds)],
            cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip

    @staticmethod
    def ids(proc: subprocess.Popen) -> list[str]:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
        return json.loads(out)

    def enqueue(self, task: str, key: str, count: int = 1, seconds: float = 0.5) -> list[str]:
        return self.ids(self.producer(task, key, count, seconds))

    def results(self) -> list[dict]:
        return json.loads(self.run(["-m", "tests.support.djtasks_cli", "results"]))

    def start_workers(self, n: int) -> None:
        for i in range(n):
            err = open(self.tmp_path / f"worker-{len(self.workers)}.err", "w")  # noqa: SIM115 - closed with the process
            self.workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "django",
                        "db_worker",
                        "--backend",
                        "db",
                        "--interval",
                        "0.1",
                        "--no-startup-delay",
                        "--worker-id",
                        f"w{i}",
                    ],
                    cwd=ROOT,
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,
                )  # fmt: skip
            )

    def kill_workers(self, sig: int = signal.SIGKILL) -> None:
        for w in self.workers:
            if w.poll() is None:
                try:
                    os.killpg(w.pid, sig)
                except ProcessLookupError:
                    pass
        for w in self.workers:
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait(5)
        self.workers.clear()

    def runs(self) -> list[tuple[str, int, float, float, str]]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            key, pid, start, end, token = line.split()
            out.append((key, int(pid), float(start), float(end), token))
        return out

    def finished(self, count: int) -> bool:
        rows = self.results()
        return len(rows) >= count and all(r["status"] in ("SUCCESSFUL", "FAILED") for r in rows)


@pytest.fixture
def harness(tmp_path, zklocks_settings, zk_server):
    alias = zklocks_settings()
    h = Harness(tmp_path, zk_server.hosts, alias["NAMESPACE"])
    yield h
    h.kill_workers(signal.SIGTERM)


def overlaps(runs) -> list:
    spans = sorted(runs, key=lambda r: r[2])
    return [(a, b) for a, b in pairwise(spans) if b[2] < a[3]]


def test_one_key_runs_once_at_a_time_across_workers(harness):
    # Three workers; six calls of one key and six of six keys, each 0.6 s.
    harness.start_workers(3)
    same = [harness.producer("db_locked", "same", count=3, seconds=0.6) for _ in range(2)]
    distinct = [harness.producer("db_locked", f"k{i}", seconds=0.6) for i in range(6)]
    for p in same + distinct:
        harness.ids(p)
    wait_until(lambda: harness.finished(12), timeout=90, interval=0.5)
    runs = harness.runs()
    same_runs = [r for r in runs if r[0] == "db:same"]
    distinct_runs = [r for r in runs if r[0] != "db:same"]
    assert len(distinct_runs) == 6
    # The control: more than one worker process ran them, so a second run of one key could have run beside the
    # first (whether two ran at the same moment is the machine's timing, which a loaded machine does not give).
    assert len({r[1] for r in distinct_runs}) >= 2, distinct_runs
    assert same_runs and not overlaps(same_runs), same_runs
    tokens = [int(r[4]) for r in sorted(same_runs, key=lambda r: r[2])]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    # Those not run were skipped (status SUCCESSFUL, nothing recorded) rather than run late.
    assert len(same_runs) < 6
    assert all(r["status"] == "SUCCESSFUL" for r in harness.results())


def test_unique_queued_keeps_one_row_per_key_across_producers(harness):
    # No worker yet: three producer processes at once, three enqueues each, of one key.
    procs = [harness.producer("db_unique", "u1", count=3) for _ in range(3)]
    ids = [i for p in procs for i in harness.ids(p)]
    assert len(ids) == 9 and len(set(ids)) == 1
    # The control: the same producers without unique_queued queue every call.
    procs = [harness.producer("db_locked", "u1", count=3) for _ in range(3)]
    plain = [i for p in procs for i in harness.ids(p)]
    assert len(set(plain)) == 9
    rows = harness.results()
    assert [r["id"] for r in rows if r["task"] == "db_unique"] == ids[:1]
    # Once it ran, the key queues again.
    harness.start_workers(2)
    wait_until(lambda: harness.finished(10), timeout=90, interval=0.5)
    (again,) = harness.enqueue("db_unique", "u1")
    assert again != ids[0]


def test_a_dead_worker_does_not_block_the_key(harness):
    harness.start_workers(2)
    (first,) = harness.enqueue("db_unique", "dead", seconds=60)
    from zklocks.tasks import markers

    wait_until(lambda: (markers.read("default", "dbu:dead") or ({},))[0].get("state") == "running", timeout=30)
    (same,) = harness.enqueue("db_unique", "dead", seconds=60)
    assert same == first  # running, and the same call: shared
    harness.kill_workers()  # SIGKILL: the row stays RUNNING, the lock goes with the session
    rows = {r["id"]: r for r in harness.results()}
    assert rows[first]["status"] == "RUNNING"
    deadline = time.monotonic() + 30
    while True:
        (later,) = harness.enqueue("db_unique", "dead", seconds=60)
        if later != first or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert later != first


def test_retry_enqueues_again_and_runs_after_the_holder(harness):
    harness.start_workers(2)
    procs = [harness.producer("db_retry", "r", seconds=1.5) for _ in range(2)]
    for p in procs:
        harness.ids(p)
    wait_until(lambda: len(harness.runs()) == 2, timeout=90, interval=0.5)
    runs = harness.runs()
    assert not overlaps(runs), runs
    assert len(harness.results()) >= 3  # the two calls and at least one retry

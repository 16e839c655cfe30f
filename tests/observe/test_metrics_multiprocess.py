"""Metrics in prometheus_client's multiprocess mode: several real processes, one exposition."""

import os
import subprocess
import sys

import pytest

from tests.support.helpers import ROOT, wait_until
from zklocks.conf import alias_config

pytestmark = pytest.mark.zk

EXPOSE = """
import sys
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
sys.stdout.write(generate_latest(registry).decode())
"""


def scrape(env) -> dict:
    """The multiprocess exposition, read the way zklocks.views.metrics reads it, from a fresh process."""
    out = subprocess.run([sys.executable, "-c", EXPOSE], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    samples = {}
    for line in out.stdout.splitlines():
        if line and not line.startswith("#"):
            key, _, val = line.rpartition(" ")
            samples[key] = float(val)
    return samples


def test_held_waiting_and_acquires_summed_over_processes(zk_server, tmp_path):
    mpdir = tmp_path / "prom"
    mpdir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), PROMETHEUS_MULTIPROC_DIR=str(mpdir))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    namespace = alias_config().namespace
    names = ["a", "b", "c", "a"]  # the last one waits behind the first

    def spawn(name: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.observe.mp_worker", zk_server.hosts, namespace, name],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    procs = [spawn(name) for name in names[:3]]
    held = 'zklocks_held{alias="default",kind="exclusive"}'
    waiting = 'zklocks_waiting{alias="default",kind="exclusive"}'
    acquired = 'zklocks_acquire_seconds_count{alias="default",kind="exclusive",result="acquired"}'
    connected = 'zklocks_sessions{alias="default",state="connected"}'
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "waiting"
            assert p.stdout.readline().strip() == "held"
        procs.append(spawn(names[3]))
        assert procs[3].stdout.readline().strip() == "waiting"
        wait_until(lambda: scrape(env).get(waiting) == 1, 10)
        samples = scrape(env)
        assert samples[held] == 3
        assert samples[acquired] == 3
        assert samples[connected] == 4
        procs[0].stdin.write("\n")
        procs[0].stdin.flush()
        assert procs[3].stdout.readline().strip() == "held"
        for p in procs[1:]:
            p.stdin.write("\n")
            p.stdin.flush()
        assert [p.wait(30) for p in procs] == [0, 0, 0, 0]
        from prometheus_client import multiprocess

        for p in procs:
            multiprocess.mark_process_dead(p.pid, str(mpdir))
        samples = scrape(env)
        assert samples[acquired] == 4
        assert samples['zklocks_hold_seconds_count{alias="default",kind="exclusive"}'] == 4
        assert samples.get(held, 0) == 0
        assert samples.get(waiting, 0) == 0
        assert samples.get(connected, 0) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)

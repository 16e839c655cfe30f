"""The demo for someone trying zklocks for the first time: a busy port is named, DEMO_PORT reaches the demo,
manage.py beside the demo finds its ZooKeeper, times show in a set TIME_ZONE, and a long hold can be
force-released from the admin (the same call as `manage.py zklocks_release`)."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.core.management import call_command

from zklocks import zk_lock

ROOT = Path(__file__).resolve().parents[2]


def demo_env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZKLOCKS_", "CELERY_", "DJANGO_", "DEMO_"))}
    return {**env, "ZKLOCKS_DEMO_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), **extra}


def test_a_busy_port_is_named_before_anything_starts(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "demo_project.run", "--port", str(port), "--exit-after", "1"],
            cwd=ROOT,
            env=demo_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=90,
            start_new_session=True,
        )
    assert result.returncode == 1
    assert (
        f"demo: failed: port {port} is busy (another demo or runserver?): stop it, or run `make demo "
        f"DEMO_PORT={port + 1}` (python -m demo_project.run --port {port + 1})\n"
    ) in result.stdout
    assert "ZooKeeper: started" not in result.stdout
    assert time.monotonic() - started < 10


def test_make_demo_passes_demo_port():
    out = subprocess.run(
        ["make", "-n", "demo", "DEMO_PORT=8001"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    assert "-m demo_project.run --port 8001" in out


def test_manage_py_beside_the_demo_finds_its_services(tmp_path):
    (tmp_path / "services.json").write_text(
        json.dumps({"ZKLOCKS_HOSTS": "127.0.0.1:40123", "CELERY_BROKER_URL": "redis://127.0.0.1:40124/0"})
    )
    code = (
        "import demo_project.settings as s; "
        "print(s.ZKLOCKS['default']['HOSTS'], s.CELERY_BROKER_URL, s.TIME_ZONE, s.DEMO_LONG_HOLD)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=demo_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert out.stdout == "127.0.0.1:40123 redis://127.0.0.1:40124/0 UTC 120.0\n", out.stderr
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=demo_env(tmp_path, ZKLOCKS_HOSTS="zk9:2181"),  # the environment still wins
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.split()[0] == "zk9:2181"


@pytest.mark.zk
def test_the_long_hold_ends_when_force_released():
    from demo_project.shop.holding import hold_until_released

    box = {}
    held = threading.Event()

    def job():
        with zk_lock("search:reindex") as lock:
            held.set()
            box["result"] = hold_until_released(lock, 60, step=0.2)

    t = threading.Thread(target=job)
    started = time.monotonic()
    t.start()
    assert held.wait(10)
    call_command("zklocks_release", "search:reindex", "--yes", stdout=open(os.devnull, "w"))
    t.join(10)
    assert box == {"result": "released"}
    assert time.monotonic() - started < 10

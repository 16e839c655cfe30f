"""`make demo` headless: the demo starts ZooKeeper, Redis, a Celery worker, the web server and the load
generator; the admin page shows live locks (a Celery task among the holders); SIGINT stops everything."""

import http.cookiejar
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from tests.support.helpers import ROOT

pytestmark = [pytest.mark.celery, pytest.mark.timeout(180)]


class Browser:
    """Just enough of a browser for the admin: cookies and the CSRF token."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=30) as response:
            return response.read().decode()

    def login(self, username: str, password: str) -> None:
        page = self.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        data = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": token, "username": username, "password": password, "next": "/admin/"}
        ).encode()
        request = urllib.request.Request(
            self.base + "/admin/login/", data=data, headers={"Referer": self.base + "/admin/login/"}
        )
        with self.opener.open(request, timeout=30) as response:
            assert "/admin/login/" not in response.url, "login failed"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_make_demo_headless(tmp_path):
    env = {
        k: v for k, v in os.environ.items() if k not in ("ZKLOCKS_HOSTS", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
    }
    env.update(ZKLOCKS_DEMO_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo_project.run", "--port", "0", "--exit-after", "150"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def reader():
        for line in proc.stdout:
            lines.append(line)
            if "ready at" in line:
                ready.set()

    threading.Thread(target=reader, daemon=True).start()
    pids = {}
    try:
        assert ready.wait(90), "".join(lines)
        login = json.loads((tmp_path / "login.json").read_text())
        assert any(login["password"] in line for line in lines)  # printed for the user
        pids = json.loads((tmp_path / "pids.json").read_text())
        assert set(pids) == {"zookeeper", "redis", "celery", "beat-1", "beat-2", "web", "load"}

        browser = Browser(login["url"])
        browser.login(login["username"], login["password"])
        seen_holder = seen_task = seen_queue = seen_beat = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (seen_holder and seen_task and seen_queue and seen_beat):
            page = browser.get("/admin/zklocks/lock/")
            # The beats' election: the leader holds, the other beat waits as a candidate.
            seen_beat = seen_beat or bool(
                re.search(r"demo-beat.*?zk-kind\">election</td>.*?zk-queue-length\">1<", page, re.S)
            )
            seen_holder = seen_holder or bool(
                re.search(r'<td class="zk-holder"><div class="zk-holder-entry">.*?pid \d+', page, re.S)
            )
            seen_task = seen_task or "task demo." in page
            seen_queue = seen_queue or bool(re.search(r'<td class="zk-queue-length">[1-9]', page))
            time.sleep(0.5)
        assert seen_holder, "no live holder on the admin page"
        assert seen_queue, "no queue on the admin page"
        assert seen_task, "no Celery task among the holders"
        assert seen_beat, "the beats' election (a leader and one standby) is not on the admin page"
        shop = json.loads(urllib.request.urlopen(login["url"] + "/catalog.json", timeout=30).read())
        assert any(p["orders"] for p in shop["products"])
        exposition = urllib.request.urlopen(login["url"] + "/metrics", timeout=30).read().decode()
        assert re.search(
            r'zklocks_acquire_seconds_count\{alias="default",kind="\w+",result="acquired"\} [1-9]', exposition
        )
        health = json.loads(urllib.request.urlopen(login["url"] + "/ht/?format=json", timeout=30).read())
        assert health and set(health.values()) == {"OK"}, health

        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(pid) for pid in pids.values()):
            time.sleep(0.2)
        assert not [name for name, pid in pids.items() if alive(pid)]
        assert "stopped everything it started" in "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in pids.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

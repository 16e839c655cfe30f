"""The demo shop under concurrent requests: the reservation endpoint never oversells and never fails, with
ATOMIC_REQUESTS on, because its lock is released only after the commit (release_on_commit=True)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from tests.support.helpers import ROOT
from zklocks.testing import free_port

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def shop(zk_server, tmp_path):
    """The demo site on a dev server of its own, against the suite's ZooKeeper and a fresh SQLite file."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(
        ZKLOCKS_HOSTS=zk_server.hosts,
        ZKLOCKS_NAMESPACE=f"/zklocks-shop-{uuid.uuid4().hex[:8]}",
        ZKLOCKS_DEMO_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="demo_project.settings",
        DEMO_WORK_DELAY="0.01",
        DEMO_READ_DELAY="0",
        DEMO_AFTER_DELAY="0.05",
        ZKLOCKS_SESSION_TIMEOUT="4",
        PYTHONUNBUFFERED="1",
    )

    def manage(*args):
        subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=120,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    manage("migrate", "--noinput", "-v", "0")
    manage("demo_setup", "--stock", "15")
    port = free_port()
    log = open(tmp_path / "web.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/catalog.json", timeout=5).read()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "web.log").read_text()
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)
        log.close()


def post(url):
    request = urllib.request.Request(url, data=b"quantity=1", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def stock(url, sku):
    products = json.loads(urllib.request.urlopen(url + "/catalog.json", timeout=30).read())["products"]
    return next(p for p in products if p["sku"] == sku)


def test_concurrent_reservations_never_oversell(shop):
    results = []
    barrier = threading.Barrier(10)  # the dev server's listen backlog is 10: 10 buyers, 4 requests each

    def buyer():
        barrier.wait(30)
        for _ in range(4):
            results.append(post(shop + "/reserve/tea/"))

    threads = [threading.Thread(target=buyer) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    statuses = sorted(status for status, _ in results)
    # Exactly the 15 units in stock were sold; everyone else was told "sold out"; nobody got an error.
    assert statuses == [201] * 15 + [409] * 25, [r for r in results if r[0] not in (201, 409)]
    assert all(body["error"] == "sold out" and body["left"] == 0 for status, body in results if status == 409)
    # The holders ran one after another, in token order: each saw the stock the previous one committed.
    sold = sorted((body["token"], body["left"]) for status, body in results if status == 201)
    assert [left for _, left in sold] == list(range(14, -1, -1))
    tea = stock(shop, "tea")
    assert tea["stock"] == 0 and tea["reserved"] == 15 and tea["orders"] == 15
    assert tea["fence"] == sold[-1][0]


def test_restock_and_shared_readers(shop):
    readers = []

    def read():
        readers.append(stock(shop, "tea")["stock"])

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    request = urllib.request.Request(shop + "/restock/", data=b"units=5", method="POST")
    assert json.loads(urllib.request.urlopen(request, timeout=60).read())["ok"]
    for t in threads:
        t.join(60)
    assert len(readers) == 8 and set(readers) <= {15, 20}  # before or after the restock, never in between
    assert stock(shop, "tea")["stock"] == 20
    assert post(shop + "/reserve/no-such-thing/")[0] == 404

"""Beat in the admin and in ``zklocks_status --beat``, against two real ``celery beat`` processes (a worker and
Redis too; see tests/celery/test_beat.py): the leader and its token, the standby, and for each entry its last send
(time, token, host), its next due time and its catch-up policy. The page is read through Django's test client
and once in a real headless Chromium.
"""

from __future__ import annotations

import io
import json
import socket
import time
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, override_settings

from tests.celery.test_beat import PERSISTENT, Deployment
from tests.support.beat_schedules import CATCH_UP
from tests.support.browser import chromium_page
from tests.support.helpers import wait_until
from zklocks.celery import beat_status

pytestmark = [pytest.mark.zk, pytest.mark.django_db(transaction=True)]

PAGE = "/admin/zklocks/lock/beat/"
POLICIES = {name: policy or "once" for name, policy in CATCH_UP.items()}


@pytest.fixture
def allow_orm_beside_playwright(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.mark.browser
@pytest.mark.timeout(150)
def test_beat_page_and_status_command_show_the_election_and_every_entry(
    zk_server, redis_server, zklocks_settings, live_server, allow_orm_beside_playwright
):
    # The server's longest session (4 s), not the fault tests' 2 s: a CPU-starved machine must not move the
    # leadership between the looks this test compares (it did once, with two copies of the suite side by side).
    ensemble = SimpleNamespace(hosts=zk_server.hosts, servers=[zk_server])
    d = Deployment(ensemble, redis_server.url, PERSISTENT, session_timeout=4.0)
    d.environ["ZKLOCKS_TEST_BEAT_CATCHUP"] = "1"  # five entries every 2 s, one per catch-up policy
    election = d.environ["ZKLOCKS_TEST_BEAT_ELECTION"]
    zklocks_settings(NAMESPACE=d.env.namespace)
    beat_settings = override_settings(ZKLOCKS_BEAT={"ELECTION": election})
    beat_settings.enable()
    try:
        d.worker.start()
        d.beats = [d.new_beat("beat0"), d.new_beat("beat1")]
        wait_until(lambda: len(d.leaders()) == 1, timeout=30, interval=0.05)
        wait_until(lambda: {r["stamp"]["entry"] for r in d.records()} == set(POLICIES), timeout=20, interval=0.1)

        def complete():
            # Read until the view is whole and agrees with the beats' own logs (a loaded machine may move the
            # leadership once while the test starts).
            v = beat_status.read()
            ours = [e for e in v["entries"] if e["name"] in POLICIES]  # (Celery adds celery.backend_cleanup)
            if len(ours) != len(POLICIES) or not all(e["next_due"] and e["last_token"] for e in ours):
                return None
            leaders = d.leaders()
            if len(leaders) != 1 or not v["leader"] or v["leader"]["pid"] != leaders[0].proc.pid:
                return None
            if v["leader"]["token"] != d.leader_token(leaders[0]) or len(v["standbys"]) != 1:
                return None
            if any(e["last_token"] != v["leader"]["token"] for e in ours):
                return None
            return v, leaders[0]

        view, leader = wait_until(complete, timeout=20, interval=0.2)
        (standby,) = [b for b in d.beats if b is not leader]
        token = d.leader_token(leader)
        now = time.time()
        assert view["leader"]["token"] == token and view["leader"]["pid"] == leader.proc.pid
        assert view["leader"]["host"] == socket.gethostname()
        assert [s["pid"] for s in view["standbys"]] == [standby.proc.pid]
        assert view["standbys"][0]["token"] > token
        for entry in [e for e in view["entries"] if e["name"] in POLICIES]:
            assert entry["catch_up"] == POLICIES[entry["name"]], entry
            assert entry["last_token"] == token and entry["last_host"] == socket.gethostname()[:64], entry
            assert now - 3.5 < entry["last_sent_at"] <= now + 0.5, entry
            assert now - 1.5 < entry["next_due"] < now + 3.5, entry
        # The next due time is never the send just made: the leader rewrites its status right after a send, and
        # a look that falls between the claims of one tick and that write (some ms) shows no next due time.
        stale = []  # looks that saw an entry whose next due time is its last send
        for _ in range(20):
            ours = [e for e in beat_status.read()["entries"] if e["name"] in POLICIES]
            if any(e["next_due"] and e["last_sent_at"] and e["next_due"] <= e["last_sent_at"] for e in ours):
                stale.append(ours)
            time.sleep(0.2)
        assert stale == []

        # The admin page, through Django's test client.
        admin = User.objects.create_superuser("admin", password="pw-for-browser")
        client = Client()
        client.force_login(admin)
        html = client.get(PAGE).content.decode()
        assert f'<span class="zk-beat-token">{token}</span>' in html
        assert f"pid {standby.proc.pid}" in html
        for name, policy in POLICIES.items():
            assert f"<code>{name}</code>" in html and f'<td class="zk-beat-catch-up">{policy}</td>' in html
        assert 'class="zk-beat-link"' in client.get("/admin/zklocks/lock/").content.decode()

        # zklocks_status --beat, as JSON and as a table.
        out = io.StringIO()
        call_command("zklocks_status", "--beat", "--json", stdout=out)
        shown = json.loads(out.getvalue())
        assert shown["leader"]["token"] == token and set(POLICIES) <= {e["name"] for e in shown["entries"]}
        out = io.StringIO()
        call_command("zklocks_status", "--beat", stdout=out)
        text = out.getvalue()
        assert f"(token {token}, leading for" in text and f"pid {standby.proc.pid}" in text
        assert all(name in text and policy in text for name, policy in POLICIES.items())

        # One look in a real browser: log in, follow the link from the lock list.
        with chromium_page() as page:
            page.goto(live_server.url + "/admin/zklocks/lock/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "pw-for-browser")
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/zklocks/lock/")
            page.click("a.zk-beat-link")
            page.wait_for_url("**" + PAGE)
            assert page.inner_text(".zk-beat-token") == str(token)
            assert page.locator("tr.zk-beat-entry").count() == len(view["entries"])
    except BaseException:
        print(d.logs())
        raise
    finally:
        beat_settings.disable()
        d.close()

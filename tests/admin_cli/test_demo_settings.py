"""The demo's settings: a random SECRET_KEY unless one is given, DEBUG only when asked for, and the admin's static
files served by the demo's web server with DEBUG off."""

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from tests.support.helpers import ROOT, wait_until
from zklocks.testing import free_port

pytestmark = pytest.mark.timeout(120)


def demo_settings(**env):
    base = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "DJANGO_DEBUG")}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, demo_project.settings as s; print(json.dumps([s.SECRET_KEY, s.DEBUG]))",
        ],
        cwd=ROOT,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(proc.stdout)


def test_a_random_secret_key_and_debug_off_unless_asked_for(tmp_path):
    empty = str(tmp_path / "no-demo-yet")
    (key1, debug1), (key2, debug2) = demo_settings(ZKLOCKS_DEMO_DIR=empty), demo_settings(ZKLOCKS_DEMO_DIR=empty)
    assert key1 != key2 and len(key1) >= 50 and "not-secret" not in key1
    assert debug1 is False and debug2 is False
    assert demo_settings(DJANGO_SECRET_KEY="given", DJANGO_DEBUG="1") == ["given", True]
    assert demo_settings(DJANGO_DEBUG="0", ZKLOCKS_DEMO_DIR=empty)[1] is False


def test_the_key_make_demo_keeps_is_the_key_of_every_later_process(tmp_path):
    """`make demo` draws its key once and keeps it with its data: ZooKeeper keeps the lock nodes between runs, and
    they grant the identity derived from that key (a `manage.py` command in another terminal needs it too)."""
    from demo_project.run import Demo

    demo = Demo.__new__(Demo)  # only its data directory: nothing is started
    demo.data = tmp_path
    first = demo.secret_key()
    assert demo.secret_key() == first and len(first) >= 50
    assert oct((tmp_path / "secret_key").stat().st_mode & 0o777) == "0o600"
    assert demo_settings(ZKLOCKS_DEMO_DIR=str(tmp_path))[0] == first


def test_the_demo_web_server_serves_the_admin_static_files_with_debug_off(tmp_path):
    from demo_project.run import web_argv

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_DEBUG", "DJANGO_SETTINGS_MODULE")}
    env.update(
        DJANGO_SETTINGS_MODULE="demo_project.settings",
        ZKLOCKS_DEMO_DIR=str(tmp_path),
        PYTHONPATH=str(ROOT),
        ZKLOCKS_HOSTS=f"127.0.0.1:{free_port()}",
    )
    log = open(tmp_path / "web.log", "wb")
    server = subprocess.Popen(web_argv(port), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/static/admin/css/base.css"

        def fetch():
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    return response.status, response.read()
            except OSError:
                return None

        status, body = wait_until(fetch, timeout=60, interval=0.3)
        assert status == 200 and b"body" in body
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nope-404", timeout=5).close()
        assert info.value.code == 404
        page = info.value.read()
        assert b"URLconf" not in page and b"DEBUG = True" not in page, page[:500]  # not Django's DEBUG page
    finally:
        server.terminate()
        server.wait(20)
        log.close()

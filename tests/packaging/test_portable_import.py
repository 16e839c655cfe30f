"""``import zklocks`` where ``select`` has no ``poll`` and ``socket`` no ``MSG_DONTWAIT`` (as on Windows): sessions
use kazoo's own select, without the short read path, and still lock."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zklocks import LockNotAcquired, zk_lock

pytestmark = pytest.mark.zk

ROOT = Path(__file__).resolve().parents[2]

# Windows' select module: select.select only; and its socket module: no MSG_DONTWAIT. Removed before anything
# imports zklocks, kazoo or selectors.
SCRIPT = """
import select
for name in dir(select):
    if name in ("poll", "epoll", "devpoll", "kqueue", "kevent") or name.startswith(("POLL", "EPOLL", "KQ_")):
        delattr(select, name)
import socket  # after: it imports selectors
delattr(socket, "MSG_DONTWAIT")

import json, sys
import django
django.setup()
from django.test import override_settings
override_settings(ZKLOCKS={"default": json.loads(sys.argv[1])}).enable()

import selectors
import zklocks
from zklocks.client import iohandler
from zklocks.client.pools import connections

assert not iohandler.HAS_POLL and iohandler.DEFAULT_HANDLER is iohandler.PollingHandler
assert selectors.DefaultSelector is selectors.SelectSelector
with zklocks.zk_lock("portable", timeout=10) as lock:
    client = connections["default"].session().client
    print(json.dumps({
        "held": lock.is_held,
        "handler": type(client.handler).__name__,
        "short_read": "_read" in vars(client._connection),
    }), flush=True)
    sys.stdin.readline()  # the test tries the lock from its own process meanwhile
print(json.dumps({"released": not lock.is_held}), flush=True)
zklocks.close_all()
"""


def test_without_poll_sessions_use_kazoos_select_and_lock(zklocks_settings):
    alias = zklocks_settings()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, json.dumps(alias)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()
        assert line, child.communicate(timeout=30)[1]
        assert json.loads(line) == {"held": True, "handler": "PollingHandler", "short_read": False}
        with pytest.raises(LockNotAcquired):  # held by the child, on the same server and namespace
            with zk_lock("portable", blocking=False):
                pass
        out, err = child.communicate("\n", timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == {"released": True}
    with zk_lock("portable", timeout=5) as lock:  # released by the child
        assert lock.is_held

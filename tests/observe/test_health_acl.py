"""The health check under READ_ACL="auth", against the suite's real server: it names no lock, host or pid unless
told to, and a wrong password fails it."""

import asyncio
import os
import re
import socket
import time
import uuid

import pytest
from django.test import override_settings

from zklocks import zk_lock
from zklocks.client.pools import close_all
from zklocks.health import ZooKeeperHealthCheck

pytestmark = pytest.mark.zk

RIGHT = [("digest", "app:s3cret")]
WRONG = [("digest", "app:guess")]
NAME = "user:4711"


@pytest.fixture
def secured(zklocks_settings):
    """``zklocks_settings`` with a namespace below a root of the test's own: an alias with AUTH creates missing
    ancestors with its ACL, which must not close the suite's shared /zklocks-test to the other tests."""
    namespace = f"/zklocks-health-{uuid.uuid4().hex[:10]}/locks"
    return lambda **options: zklocks_settings(**{"NAMESPACE": namespace, **options})


def run_check():
    return asyncio.run(ZooKeeperHealthCheck().get_result())


def held_too_long(**health):
    """The check's error while NAME has been held past MAX_HOLD_SECONDS."""
    with override_settings(ZKLOCKS_HEALTH={"MAX_HOLD_SECONDS": 0.3, **health}):
        with zk_lock(NAME):
            time.sleep(0.8)
            result = run_check()
    assert result.error is not None
    return str(result.error).removeprefix("Unavailable: ")


def details(text):
    return [d for d in (NAME, socket.gethostname(), f"pid {os.getpid()}") if d in text]


def test_an_auth_only_alias_counts_the_locks_held_too_long_without_naming_them(secured):
    secured(AUTH=RIGHT, READ_ACL="auth")
    text = held_too_long()
    assert details(text) == [], text
    # "the longest": the hold's age when the check ran, 1 s on a quiet machine, more on a loaded one
    assert re.match(
        r"alias 'default': 1 lock\(s\) held for longer than MAX_HOLD_SECONDS=0\.3 \(the longest \d+s\); names, hosts "
        r"and pids not shown, as the alias's ACL keeps them from other readers",
        text,
    ), text
    assert details(held_too_long(SHOW_LOCK_DETAILS=True)) == [NAME, socket.gethostname(), f"pid {os.getpid()}"]


def test_a_world_readable_alias_names_them_unless_told_not_to(secured):
    secured(AUTH=RIGHT)
    assert details(held_too_long()) == [NAME, socket.gethostname(), f"pid {os.getpid()}"]
    assert details(held_too_long(SHOW_LOCK_DETAILS=False)) == []


def test_a_wrong_password_fails_the_check_when_the_acl_needs_it_to_read(secured):
    alias = secured(AUTH=RIGHT, READ_ACL="auth")
    assert run_check().error is None  # no namespace yet: it is made on first use
    with zk_lock("made-by-the-right-password"):
        pass
    assert run_check().error is None
    close_all()
    secured(**{**alias, "AUTH": WRONG})
    error = str(run_check().error).removeprefix("Unavailable: ")
    assert error == (
        "zklocks alias 'default': ZooKeeper refused to run the request (NoAuth). Check the alias's AUTH credentials "
        "and the ACL of its NAMESPACE."
    ), error
    # With READ_ACL="world" a read proves nothing: the check stays a connectivity check there.
    close_all()
    secured(**{**alias, "AUTH": WRONG, "READ_ACL": "world"})
    assert run_check().error is None

"""Error texts a new user meets first: a bad HOSTS value (E003) and a missing settings.ZKLOCKS at run time; and
the texts of a lost lock, each naming the lock, its alias and why."""

import logging

import pytest
from django.core import checks
from django.test import override_settings

from tests.support.helpers import wait_until
from zklocks import LockLost, ZkConfigError, lock_path, zk_leader, zk_lock
from zklocks.client.pools import connections
from zklocks.conf import validate


def e003(hosts):
    return [(p.msg, p.hint) for p in validate({"default": {"HOSTS": hosts}})[1] if p.id == "zklocks.E003"]


@pytest.mark.parametrize(
    ("hosts", "msg"),
    [
        ("zk1:2181;zk2:2181", "HOSTS 'zk1:2181;zk2:2181': 'zk1:2181;zk2:2181' is not a host[:port]"),
        ("zk1:99999", "HOSTS 'zk1:99999': port 99999 of 'zk1:99999' is not between 1 and 65535"),
        ("zk1:2181,", "HOSTS 'zk1:2181,': an empty host between commas"),
        ("zk://zk1:2181", "HOSTS 'zk://zk1:2181': 'zk://zk1:2181' is not a host[:port]"),
        (2181, "HOSTS 2181: must be a str or a list of str, not int"),
        (["zk1", 2], "HOSTS ['zk1', 2]: must be a str or a list of str, not a list holding int"),
        ("", "HOSTS '': is empty"),
    ],
)
def test_e003_shows_the_value_and_what_is_wrong(hosts, msg):
    assert e003(hosts) == [
        (f"ZKLOCKS['default']: {msg}.", 'Give "host:port[,host:port...]" or a list of "host:port" strings.')
    ]


def test_e003_missing_hosts():
    assert [(p.msg) for p in validate({"default": {}})[1] if p.id == "zklocks.E003"] == [
        "ZKLOCKS['default']: HOSTS is missing."
    ]


def test_missing_setting_at_run_time_says_so():
    with override_settings():
        from django.conf import settings

        del settings.ZKLOCKS
        with pytest.raises(ZkConfigError) as info:
            zk_lock("report").acquire(timeout=0.1)
        assert str(info.value) == (
            'settings.ZKLOCKS is not set. Add ZKLOCKS = {"default": {"HOSTS": "127.0.0.1:2181"}} to your settings.'
        )
        assert [m.id for m in checks.run_checks() if m.id == "zklocks.E001"] == ["zklocks.E001"]


def test_lock_lost_names_the_lock_the_alias_and_the_reason():
    error = LockLost(name="report", alias="reports", reason="expired")
    assert str(error) == "lock 'report' (alias 'reports') was lost (expired)"
    assert (error.name, error.alias, error.reason) == ("report", "reports", "expired")


@pytest.mark.zk
def test_lock_lost_texts(kz):
    with pytest.raises(LockLost) as info:
        zk_lock("report").ensure_held()
    assert str(info.value) == "lock 'report' (alias 'default') is not held by this thread or task"
    assert info.value.alias == "default" and info.value.reason == "not held"
    with pytest.raises(LockLost) as info:
        zk_leader("nightly").ensure_leader()
    assert str(info.value) == "election 'nightly' (alias 'default'): this owner is not the leader"

    lock = zk_lock("report")
    lock.acquire()
    try:
        for child in kz.get_children(lock_path("report")):  # a force-release
            kz.delete(f"{lock_path('report')}/{child}")
        with pytest.raises(LockLost) as info:
            lock.ensure_held()
        assert str(info.value) == "lock 'report' (alias 'default') was lost (deleted)"
        with pytest.raises(LockLost) as info:
            lock.acquire()  # re-entering a lost hold
        assert str(info.value) == (
            "lock 'report' (alias 'default') is already held by this thread or task and was lost (deleted); "
            "release() it before acquiring it again"
        )
    finally:
        lock.release()


@pytest.mark.zk
def test_a_lost_session_names_its_locks(zk_server, zk_expire, caplog):
    caplog.set_level(logging.WARNING, logger="zklocks")
    first, second = zk_lock("billing/b"), zk_lock("billing/a")
    first.acquire()
    second.acquire()
    try:
        zk_expire(zk_server.hosts, connections["default"].session())
        wait_until(lambda: not first.is_held and not second.is_held, 10)
        with pytest.raises(LockLost) as info:
            first.ensure_held()
        reason = info.value.reason
        assert reason in ("expired", "suspended")  # "suspended": the lease ran out before the expiry arrived
        assert str(info.value) == f"lock 'billing/b' (alias 'default') was lost ({reason})"
        warnings = wait_until(lambda: [r.getMessage() for r in caplog.records if "lost (" in r.getMessage()], 5)
        # The session's own report may come later, when the expiry has arrived: its reason is its own.
        assert len(warnings) == 1, warnings
        assert any(
            warnings[0] == f"zklocks: session of alias 'default' lost ({why}); 2 lock(s) lost: 'billing/a', 'billing/b'"
            for why in ("expired", "suspended")
        ), warnings
    finally:
        first.release()
        second.release()

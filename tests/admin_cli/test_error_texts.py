"""Error texts a new user meets first: a bad HOSTS value (E003) and a missing settings.ZKLOCKS at run time."""

import pytest
from django.core import checks
from django.test import override_settings

from zklocks import ZkConfigError, zk_lock
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

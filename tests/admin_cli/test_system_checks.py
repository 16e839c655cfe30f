"""System checks: exact run_checks() output for each kind of misconfiguration."""

import pytest
from django.core import checks
from django.core.checks import Error, Warning
from django.test import override_settings

from zklocks import ZkConfigError, conf, zk_lock

OK = {"HOSTS": "127.0.0.1:2181"}


def run(value):
    with override_settings(ZKLOCKS=value):
        return [m for m in checks.run_checks() if m.id and m.id.startswith("zklocks.")]


def test_valid_settings_pass():
    assert run({"default": {"HOSTS": ["zk1:2181", "zk2:2181"], "NAMESPACE": "/a/b", "POOL_SIZE": 2}}) == []


def test_missing_setting():
    with override_settings():
        from django.conf import settings

        del settings.ZKLOCKS
        messages = [m for m in checks.run_checks() if m.id and m.id.startswith("zklocks.")]
    assert messages == [
        Error(
            "settings.ZKLOCKS is not set.",
            hint='Add ZKLOCKS = {"default": {"HOSTS": "127.0.0.1:2181"}} to your settings.',
            id="zklocks.E001",
        )
    ]


def test_no_default_alias_and_alias_not_a_dict():
    assert run({"other": "zk:2181"}) == [
        Error(
            "settings.ZKLOCKS has no 'default' alias.",
            hint="Name one of your connections 'default'.",
            id="zklocks.E001",
        ),
        Error(
            "ZKLOCKS['other']: must be a dict of options.",
            hint='Use e.g. {"HOSTS": "127.0.0.1:2181"}.',
            id="zklocks.E002",
        ),
    ]


@pytest.mark.parametrize(
    "hosts,wrong",
    [
        (None, "HOSTS is missing"),
        ("", "HOSTS '': is empty"),
        ("zk1:2181,", "HOSTS 'zk1:2181,': an empty host between commas"),
        (42, "HOSTS 42: must be a str or a list of str, not int"),
        (["zk1:2181", 3], "HOSTS ['zk1:2181', 3]: must be a str or a list of str, not a list holding int"),
        ("bad host:1", "HOSTS 'bad host:1': 'bad host:1' is not a host[:port]"),
    ],
)
def test_invalid_hosts(hosts, wrong):
    value = {} if hosts is None else {"HOSTS": hosts}
    assert run({"default": value}) == [
        Error(
            f"ZKLOCKS['default']: {wrong}.",
            hint='Give "host:port[,host:port...]" or a list of "host:port" strings.',
            id="zklocks.E003",
        )
    ]


@pytest.mark.parametrize("namespace", ["zklocks", "/zk/", "/", "/a/../b", "/a b", 5])
def test_bad_namespace(namespace):
    assert run({"default": {**OK, "NAMESPACE": namespace}}) == [
        Error(
            f"ZKLOCKS['default']: NAMESPACE {namespace!r} is not a valid ZooKeeper path.",
            hint='Use an absolute path such as "/zklocks" (letters, digits, "-_.:", no trailing "/").',
            id="zklocks.E004",
        )
    ]


def test_bad_timeouts_pool_and_options():
    assert run(
        {
            "default": {
                **OK,
                "SESSION_TIMEOUT": 0,
                "CONNECT_TIMEOUT": "5",
                "POOL_SIZE": 0,
                "AUTH": "user:pw",
                "OPTIONS": [],
                "COLOUR": "red",
            }
        }
    ) == [
        Warning(
            "ZKLOCKS['default']: unknown option(s) COLOUR.",
            hint="Known options: ACL, AUTH, CONNECT_TIMEOUT, HOSTS, LAYOUT, NAMESPACE, OPTIONS, POOL_SIZE, READ_ACL, "
            "REAP_INTERVAL, SESSION_TIMEOUT, TICK_TIME.",
            id="zklocks.W001",
        ),
        Error(
            "ZKLOCKS['default']: SESSION_TIMEOUT must be a positive number of seconds, not 0.",
            hint="For example 10.0.",
            id="zklocks.E005",
        ),
        Error(
            "ZKLOCKS['default']: CONNECT_TIMEOUT must be a positive number of seconds, not '5'.",
            hint="For example 5.0.",
            id="zklocks.E006",
        ),
        Error(
            "ZKLOCKS['default']: POOL_SIZE must be an integer >= 1, not 0.",
            hint="Most processes need 1; raise it for many threads holding locks at once.",
            id="zklocks.E007",
        ),
        Error(
            "ZKLOCKS['default']: AUTH must be a list of (scheme, credential) pairs.",
            hint='For example [("digest", "user:secret")].',
            id="zklocks.E008",
        ),
        Error(
            "ZKLOCKS['default']: OPTIONS must be a dict of KazooClient keyword arguments.",
            hint='For example {"use_ssl": True, "ca": "/etc/zk/ca.pem"}.',
            id="zklocks.E009",
        ),
    ]


@pytest.mark.parametrize("tick", [0, -1, "2", True, 5.5])
def test_bad_tick_time(tick):
    assert run({"default": {**OK, "SESSION_TIMEOUT": 10, "TICK_TIME": tick}}) == [
        Error(
            f"ZKLOCKS['default']: TICK_TIME must be a positive number of seconds, at most SESSION_TIMEOUT/2, "
            f"not {tick!r}.",
            hint="Give the servers' tickTime from zoo.cfg in seconds (tickTime=2000 is 2.0), or leave it out: "
            "zklocks then assumes SESSION_TIMEOUT/2.",
            id="zklocks.E016",
        ),
    ]
    assert run({"default": {**OK, "SESSION_TIMEOUT": 10, "TICK_TIME": 2}}) == []


def test_decorator_with_unknown_alias_is_reported():
    @zk_lock("job", using="reports")
    def job():
        pass

    try:
        assert run({"default": OK}) == [
            Error(
                f"{__name__}.test_decorator_with_unknown_alias_is_reported.<locals>.job uses the zklocks alias "
                "'reports', which settings.ZKLOCKS does not define.",
                hint="Define ZKLOCKS['reports'] or pass one of: default.",
                id="zklocks.E012",
            )
        ]
        assert run({"default": OK, "reports": OK}) == []
    finally:
        conf._declared_aliases.remove(
            ("reports", f"{__name__}.test_decorator_with_unknown_alias_is_reported.<locals>.job")
        )


def test_runtime_errors_are_clear():
    with override_settings(ZKLOCKS={"default": OK}):
        with pytest.raises(ZkConfigError, match="unknown zklocks alias 'nope'.*configured: 'default'"):
            zk_lock("x", using="nope").acquire()
    with override_settings(ZKLOCKS={"default": {"HOSTS": ""}}):
        with pytest.raises(ZkConfigError, match="HOSTS '': is empty"):
            zk_lock("x").acquire()


def test_config_is_cached_and_rebuilt_on_setting_changed():
    with override_settings(ZKLOCKS={"default": {**OK, "NAMESPACE": "/one"}}):
        assert conf.alias_config().namespace == "/one"
        assert conf.get_config() is conf.get_config()
        with override_settings(ZKLOCKS={"default": {**OK, "NAMESPACE": "/two"}}):
            assert conf.alias_config().namespace == "/two"
        assert conf.alias_config().namespace == "/one"


def test_options_acl_and_digest_credentials_are_checked():
    assert run(
        {
            "default": {
                **OK,
                "OPTIONS": {"use_sll": True, "hosts": "x:1", "timeout": 3, "ca": "/ca.pem"},
                "ACL": ["open"],
                "AUTH": [("digest", "user-without-password")],
            }
        }
    ) == [
        Error(
            "ZKLOCKS['default']: AUTH: a digest credential must be 'user:password'.",
            hint='For example [("digest", "user:secret")].',
            id="zklocks.E008",
        ),
        Error(
            "ZKLOCKS['default']: OPTIONS use_sll: not a KazooClient argument.",
            hint="Accepted: ca, certfile, check_hostname, command_retry, connection_retry, handler, keyfile, "
            "keyfile_password, logger, randomize_hosts, read_only, sasl_options, use_ssl, verify_certs.",
            id="zklocks.E013",
        ),
        Error(
            "ZKLOCKS['default']: OPTIONS hosts, timeout: set by zklocks itself.",
            hint="Use the alias's own settings instead (HOSTS, SESSION_TIMEOUT).",
            id="zklocks.E013",
        ),
        Error(
            "ZKLOCKS['default']: ACL must be a non-empty list of kazoo.security.ACL.",
            hint='For example [make_digest_acl("user", "secret", all=True)]; or leave it out and set AUTH.',
            id="zklocks.E014",
        ),
    ]


@pytest.mark.parametrize("hosts", ["zk1:65535", "[::1]:2181", "zk1", "[::1]", "a:1,b:2"])
def test_valid_hosts_and_ports(hosts):
    assert run({"default": {"HOSTS": hosts}}) == []


@pytest.mark.parametrize("hosts", ["zk1:0", "zk1:65536", "zk1:2181,zk2:99999"])
def test_ports_out_of_range(hosts):
    assert [m.id for m in run({"default": {"HOSTS": hosts}})] == ["zklocks.E003"]

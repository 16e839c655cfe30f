"""System checks: exact run_checks() output for each kind of misconfiguration."""

import os
import subprocess
import sys

import pytest
from django.core import checks
from django.core.checks import Error, Warning
from django.test import override_settings

from tests.support.helpers import ROOT
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
            hint="Known options: ACL, AUTH, CONNECT_TIMEOUT, HOSTS, LAYOUT, LOCK_DELAY, NAMESPACE, OPTIONS, POOL_SIZE, "
            "READ_ACL, READ_ONLY, REAP_INTERVAL, SESSION_TIMEOUT, TICK_TIME.",
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
            "ZKLOCKS['default']: AUTH must be a list of (scheme, credential) pairs, or \"open\".",
            hint='For example [("digest", "user:secret")]; leave it out for an identity derived from SECRET_KEY.',
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


def test_an_alias_typo_in_a_view_is_found_though_nothing_imported_the_view():
    """manage.py check imports the URLconf, and with it the views that declare their aliases, whichever check
    runs first (Django's URL check imports it too, in an order nobody fixes): ours alone is run here."""
    import sys

    from zklocks.checks import check_settings

    assert "tests.support.typo_views" not in sys.modules
    try:
        with override_settings(ZKLOCKS={"default": OK}, ROOT_URLCONF="tests.support.typo_urls"):
            messages = check_settings()
        assert [(m.id, m.msg) for m in messages] == [
            (
                "zklocks.E012",
                "tests.support.typo_views.report uses the zklocks alias 'reprots', which settings.ZKLOCKS does not "
                "define.",
            )
        ]
    finally:
        conf._declared_aliases[:] = [d for d in conf._declared_aliases if d[0] != "reprots"]


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


def test_unknown_alias_option_suggests_the_closest_known_one():
    known = "Known options: ACL, AUTH, CONNECT_TIMEOUT, HOSTS, LAYOUT, LOCK_DELAY, NAMESPACE, OPTIONS, POOL_SIZE, "
    known += "READ_ACL, READ_ONLY, REAP_INTERVAL, SESSION_TIMEOUT, TICK_TIME."
    assert run({"default": {**OK, "SESION_TIMEOUT": 5, "namespace": "/x"}}) == [
        Warning(
            "ZKLOCKS['default']: unknown option(s) SESION_TIMEOUT, namespace.",
            hint=f"SESION_TIMEOUT: did you mean SESSION_TIMEOUT? namespace: did you mean NAMESPACE? {known}",
            id="zklocks.W001",
        )
    ]


def run_other(**values):
    """The zklocks messages of run_checks() with the given (non-ZKLOCKS) settings."""
    with override_settings(**values):
        return [m for m in checks.run_checks() if m.id and m.id.startswith("zklocks.")]


def test_optional_settings_that_are_valid_pass():
    assert (
        run_other(
            ZKLOCKS_HEALTH={"MAX_HOLD_SECONDS": 600},
            ZKLOCKS_TRACING=False,
            ZKLOCKS_METRICS=True,
            ZKLOCKS_METRICS_FAMILY="tests.observe.test_metrics.family_of",
            ZKLOCKS_UNAVAILABLE_RETRY_AFTER=0,
        )
        == []
    )
    assert run_other(ZKLOCKS_HEALTH=None, ZKLOCKS_METRICS_FAMILY=len, ZKLOCKS_UNAVAILABLE_RETRY_AFTER=30) == []


HEALTH_HINT = 'For example {"MAX_HOLD_SECONDS": 600}; leave MAX_HOLD_SECONDS out to not check how long locks are held.'


@pytest.mark.parametrize(
    "value,wrong",
    [
        (600, "settings.ZKLOCKS_HEALTH must be a dict, not 600."),
        ({"MAX_HOLD_SECONDS": 0}, "ZKLOCKS_HEALTH: MAX_HOLD_SECONDS must be a positive number of seconds, not 0."),
        ({"MAX_HOLD_SECONDS": -5}, "ZKLOCKS_HEALTH: MAX_HOLD_SECONDS must be a positive number of seconds, not -5."),
        (
            {"MAX_HOLD_SECONDS": "600"},
            "ZKLOCKS_HEALTH: MAX_HOLD_SECONDS must be a positive number of seconds, not '600'.",
        ),
        (
            {"MAX_HOLD_SECONDS": True},
            "ZKLOCKS_HEALTH: MAX_HOLD_SECONDS must be a positive number of seconds, not True.",
        ),
    ],
)
def test_bad_health_setting(value, wrong):
    assert run_other(ZKLOCKS_HEALTH=value) == [Error(wrong, hint=HEALTH_HINT, id="zklocks.E050")]


@pytest.mark.parametrize("value", [1, "yes", "False"])
def test_show_lock_details_must_be_a_bool(value):
    assert run_other(ZKLOCKS_HEALTH={"SHOW_LOCK_DETAILS": value}) == [
        Error(
            f"ZKLOCKS_HEALTH: SHOW_LOCK_DETAILS must be True, False or None, not {value!r}.",
            hint="None (the default) names locks, hosts and pids only for aliases anyone may read; True names them "
            "for every alias, False for none.",
            id="zklocks.E050",
        )
    ]
    assert run_other(ZKLOCKS_HEALTH={"SHOW_LOCK_DETAILS": True, "MAX_HOLD_SECONDS": 5}) == []


def test_unknown_health_key_suggests_the_closest_known_one():
    assert run_other(ZKLOCKS_HEALTH={"MAX_HOLD": 60, "COLOUR": "red"}) == [
        Warning(
            "ZKLOCKS_HEALTH: unknown option(s) COLOUR, MAX_HOLD; the health check does not read them.",
            hint="MAX_HOLD: did you mean MAX_HOLD_SECONDS? Known options: MAX_HOLD_SECONDS, SHOW_LOCK_DETAILS.",
            id="zklocks.W050",
        )
    ]


@pytest.mark.parametrize(
    "setting,pid,what",
    [
        ("ZKLOCKS_TRACING", "zklocks.E051", "OpenTelemetry spans"),
        ("ZKLOCKS_METRICS", "zklocks.E052", "Prometheus metrics"),
    ],
)
@pytest.mark.parametrize("value", [0, "False", None])
def test_tracing_and_metrics_switches_must_be_booleans(setting, pid, what, value):
    assert run_other(**{setting: value}) == [
        Error(
            f"settings.{setting} must be True or False, not {value!r}.",
            hint=f"Only False turns the {what} off: {value!r} leaves them on.",
            id=pid,
        )
    ]


FAMILY_HINT = (
    'Give a function that maps a lock name to a bounded label, or its dotted path ("myproject.metrics.lock_family"). '
    "Until then the metrics have no family label."
)


@pytest.mark.parametrize(
    "value,wrong",
    [
        (3, "settings.ZKLOCKS_METRICS_FAMILY must be a callable or its dotted path, not 3."),
        (
            "zklocks.contrib.metrics.no_such_family",
            "settings.ZKLOCKS_METRICS_FAMILY 'zklocks.contrib.metrics.no_such_family' cannot be imported: "
            'Module "zklocks.contrib.metrics" does not define a "no_such_family" attribute/class.',
        ),
        (
            "no_such_module.family",
            "settings.ZKLOCKS_METRICS_FAMILY 'no_such_module.family' cannot be imported: "
            "No module named 'no_such_module'.",
        ),
        (
            "zklocks.contrib.metrics.SESSION_STATES",
            "settings.ZKLOCKS_METRICS_FAMILY 'zklocks.contrib.metrics.SESSION_STATES' names ('connected', 'suspended', "
            "'lost'), which is not callable.",
        ),
    ],
)
def test_bad_metrics_family(value, wrong):
    assert run_other(ZKLOCKS_METRICS_FAMILY=value) == [Error(wrong, hint=FAMILY_HINT, id="zklocks.E053")]


@pytest.mark.parametrize("value", [-1, "5", 2.5, None, True])
def test_bad_retry_after(value):
    assert run_other(ZKLOCKS_UNAVAILABLE_RETRY_AFTER=value) == [
        Error(
            f"settings.ZKLOCKS_UNAVAILABLE_RETRY_AFTER must be a whole number of seconds >= 0, not {value!r}.",
            hint="It is the Retry-After header of ZkUnavailableMiddleware's 503 answers; for example 5 (the default).",
            id="zklocks.E054",
        )
    ]


def test_a_bad_metrics_family_is_reported_by_check_not_raised_by_ready(tmp_path):
    """A bad ZKLOCKS_METRICS_FAMILY used to crash every manage.py command in AppConfig.ready()."""
    (tmp_path / "bad_family_settings.py").write_text(
        'from tests.settings import *  # noqa: F403\nZKLOCKS_METRICS_FAMILY = "no_such_module.family"\n'
    )
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="bad_family_settings", PYTHONPATH=f"{tmp_path}:{ROOT}")

    def manage(*args):
        return subprocess.run(
            [sys.executable, "-m", "django", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )

    check = manage("check")
    assert check.returncode == 1
    assert "Traceback" not in check.stderr, check.stderr
    assert "zklocks.E053" in check.stderr and "no_such_module.family" in check.stderr, check.stderr
    # Metrics stay on, without the family label.
    shell = manage("shell", "-c", "from zklocks.contrib import metrics; print('family:', metrics.installed().family)")
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.strip().splitlines()[-1] == "family: None"


@pytest.mark.parametrize("delay", [-1, "15", True, float("nan"), float("inf"), 86_401, None])
def test_bad_lock_delay(delay):
    assert run({"default": {**OK, "LOCK_DELAY": delay}}) == [
        Error(
            f"ZKLOCKS['default']: LOCK_DELAY must be a number of seconds between 0 and 86400, not {delay!r}.",
            hint="Give the seconds nobody may hold a lock after its holder vanished without releasing it, "
            "e.g. 15.0; 0 (the default) turns lock-delay off.",
            id="zklocks.E085",
        ),
    ]
    assert run({"default": {**OK, "LOCK_DELAY": 15}}) == []
    assert run({"default": {**OK, "LOCK_DELAY": 0.0}}) == []


def test_lock_delay_under_curators_layout_warns():
    assert run({"default": {**OK, "LOCK_DELAY": 15, "LAYOUT": "curator"}}) == [
        Warning(
            "ZKLOCKS['default']: LOCK_DELAY is set on an alias with LAYOUT 'curator', where no holder marks its "
            "release: every handoff counts as unclean and waits the full lock-delay.",
            hint="Use LOCK_DELAY with LAYOUT 'kazoo', or set it to 0 (see docs/design.md §15).",
            id="zklocks.W085",
        ),
    ]
    assert run({"default": {**OK, "LOCK_DELAY": 0, "LAYOUT": "curator"}}) == []


def test_deploy_check_warns_about_an_alias_others_may_write():
    """W007 (check --deploy, from settings alone): an open alias, and an ACL with an ip: range or a foreign digest,
    let someone other than the alias hand a lock over; a digest identity of its own does not, nor the identity
    an alias without AUTH derives from SECRET_KEY."""
    from kazoo.security import ACL, Id, Permissions, make_digest_acl

    from zklocks.checks import check_guarded_aliases

    own = ("digest", "app:s3cret")
    loopback = ACL(Permissions.ALL, Id("ip", "127.0.0.0/8"))
    reader = ACL(Permissions.READ, Id("world", "anyone"))
    foreign = make_digest_acl("other", "pw", write=True)
    settings = {
        "default": dict(OK),
        "open": {**OK, "NAMESPACE": "/o", "AUTH": "open"},
        "guarded": {**OK, "NAMESPACE": "/g", "AUTH": [own]},
        "guarded_reads": {
            **OK,
            "NAMESPACE": "/r",
            "AUTH": [own],
            "ACL": [make_digest_acl("app", "s3cret", all=True), reader],
        },
        "ip": {**OK, "NAMESPACE": "/i", "AUTH": [own], "ACL": [make_digest_acl("app", "s3cret", all=True), loopback]},
        "foreign": {
            **OK,
            "NAMESPACE": "/f",
            "AUTH": [own],
            "ACL": [make_digest_acl("app", "s3cret", all=True), foreign],
        },
    }
    with override_settings(ZKLOCKS=settings):
        messages = check_guarded_aliases()
    assert all(m.id == "zklocks.W007" for m in messages)
    by_alias = {m.msg.split("'")[1]: m.msg for m in messages}
    assert sorted(by_alias) == ["foreign", "ip", "open"]
    assert 'AUTH is "open"' in by_alias["open"]
    assert "ip:127.0.0.0/8" in by_alias["ip"]
    assert "digest:other:" in by_alias["foreign"]


def test_an_acl_entry_with_admin_alone_is_not_guarded():
    """ADMIN lets its holder set the node's ACL, and so give itself WRITE and DELETE."""
    from kazoo.security import ACL, Id, Permissions, make_digest_acl

    from zklocks.client.kazoo_options import outside_writers

    cfg = conf.validate({"default": {**OK, "AUTH": [("digest", "app:s3cret")]}})[0]["default"]
    admin = ACL(Permissions.ADMIN, Id("ip", "10.0.0.0/8"))
    assert outside_writers([make_digest_acl("app", "s3cret", all=True)], cfg) == []
    assert outside_writers([make_digest_acl("app", "s3cret", all=True), admin], cfg) == ["ip:10.0.0.0/8"]


NOT_INSTALLED = """
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=[{apps}], SECRET_KEY="k", ZKLOCKS={{"default": {{"HOSTS": "127.0.0.1:1"}}}})
django.setup()
from zklocks import conf
print(sorted(conf.get_config()[0]))
"""


@pytest.mark.parametrize("installed", [False, True])
def test_zklocks_missing_from_installed_apps_is_said_on_first_use(installed):
    code = NOT_INSTALLED.format(apps='"zklocks"' if installed else "")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "['default']"  # it works either way
    assert ('"zklocks" is not in INSTALLED_APPS' in done.stderr) is not installed, done.stderr


@pytest.mark.parametrize("installed", [False, True])
def test_zklocks_missing_from_installed_apps_is_a_system_check_error_once_imported(installed):
    code = NOT_INSTALLED.format(apps='"zklocks"' if installed else "").replace(
        "from zklocks import conf\nprint(sorted(conf.get_config()[0]))",
        "import zklocks\nfrom django.core import checks\nprint([m.id for m in checks.run_checks() if m.is_serious()])",
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert ("zklocks.E000" in done.stdout) is not installed, done.stdout

"""Configuration checks for holes: nested namespaces (zklocks.E042) and the metrics or health view open to anyone
in a deployment (zklocks.W070)."""

import pytest
from django.core import checks
from django.core.checks import Error, Warning
from django.test import override_settings

from zklocks.ops.security_checks import PROTECT_HINT


def messages(deploy=False, **settings):
    """The zklocks.E042 and W070 messages `manage.py check [--deploy]` shows (the checks that talk to ZooKeeper
    are left out: they have tests of their own)."""
    from zklocks import checks as zk_checks
    from zklocks.ops import security_checks

    with override_settings(**settings):
        found = zk_checks.check_settings()
        if deploy:
            found += security_checks.check_exposed_views()
        return [m for m in found if m.id in ("zklocks.E042", "zklocks.W070") and not m.is_silenced()]


def test_both_checks_are_registered():
    registered = checks.registry.registry.get_checks(include_deployment_checks=False)
    deploy = checks.registry.registry.get_checks(include_deployment_checks=True)
    names = {c.__name__ for c in registered}
    assert "check_settings" in names and "check_exposed_views" not in names
    assert "check_exposed_views" in {c.__name__ for c in deploy}


NESTED_HINT = (
    'Give every alias a NAMESPACE that is neither inside nor above another alias\'s, e.g. "/zklocks/web" and '
    '"/zklocks/reports" (siblings), or one NAMESPACE shared by both aliases.'
)


def test_a_namespace_inside_another_alias_namespace_on_a_shared_server_is_an_error():
    zklocks = {
        "default": {"HOSTS": "zk1:2181,zk2:2181", "NAMESPACE": "/locks"},
        "reports": {"HOSTS": ["zk2:2181", "zk3:2181"], "NAMESPACE": "/locks/reports"},
    }
    assert messages(ZKLOCKS=zklocks) == [
        Error(
            "ZKLOCKS['reports']: NAMESPACE '/locks/reports' lies inside alias 'default''s NAMESPACE '/locks' on the "
            "same ZooKeeper servers: each alias takes the other's nodes for its own locks, and their reapers "
            "delete them (a holder gets LockLost).",
            hint=NESTED_HINT,
            id="zklocks.E042",
        )
    ]


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        ("ZK1", "zk1:2181"),  # case and the default port
        ("localhost:2181", "127.0.0.1"),  # two spellings of loopback
        ("[::1]:2182,zk2", "127.0.0.1:2182"),
        ("0x7f000001:2181", "127.0.0.1"),  # the forms the resolver accepts
        ("2130706433", "localhost:2181"),
        ("127.1", "[::1]"),
    ],
)
def test_one_server_spelled_two_ways_is_one_server(outer, inner):
    zklocks = {
        "default": {"HOSTS": outer, "NAMESPACE": "/locks"},
        "reports": {"HOSTS": inner, "NAMESPACE": "/locks/reports"},
    }
    assert [m.id for m in messages(ZKLOCKS=zklocks)] == ["zklocks.E042"]


@pytest.mark.parametrize(
    "other",
    [
        {"HOSTS": "zk1:2181", "NAMESPACE": "/locks"},  # the same namespace: one set of locks, shared
        {"HOSTS": "zk1:2181", "NAMESPACE": "/locks-reports"},  # a prefix of the string, not of the path
        {"HOSTS": "zk1:2181", "NAMESPACE": "/other/locks"},
        {"HOSTS": "zk9:2181", "NAMESPACE": "/locks/reports"},  # another ensemble
        {"HOSTS": "zk1:2182", "NAMESPACE": "/locks/reports"},  # another port: another server
    ],
)
def test_siblings_shared_namespaces_and_other_ensembles_pass(other):
    assert messages(ZKLOCKS={"default": {"HOSTS": "zk1:2181", "NAMESPACE": "/locks"}, "reports": other}) == []


def w070(path, what):
    text = (
        "every lock family, alias and session count."
        if what == "metrics"
        else "the state of ZooKeeper and, with ZKLOCKS_HEALTH['MAX_HOLD_SECONDS'], which locks are held too long."
    )
    name = "zklocks' metrics view" if what == "metrics" else "the ZooKeeper health check"
    return Warning(
        f"{path} ({name}) answers anonymous requests: anyone who reaches the site reads {text}",
        hint=PROTECT_HINT,
        id="zklocks.W070",
    )


def test_open_metrics_and_health_views_are_reported_in_a_deployment():
    assert messages(deploy=True, SILENCED_SYSTEM_CHECKS=[]) == [w070("/metrics", "metrics"), w070("/ht/", "health")]
    found = messages(deploy=True, SILENCED_SYSTEM_CHECKS=[], ROOT_URLCONF="tests.support.open_urls")
    assert found == [w070("/ops/prometheus", "metrics"), w070("/ht/", "health")]
    # Behind the site's own HTTPS redirect and host list the probe still reaches the views.
    found = messages(
        deploy=True, SILENCED_SYSTEM_CHECKS=[], SECURE_SSL_REDIRECT=True, ALLOWED_HOSTS=[".example.com", "x.org"]
    )
    assert found == [w070("/metrics", "metrics"), w070("/ht/", "health")]


def test_protected_views_debug_and_the_test_settings_are_quiet():
    assert messages(deploy=True, SILENCED_SYSTEM_CHECKS=[], ROOT_URLCONF="tests.support.protected_urls") == []
    assert messages(deploy=True, SILENCED_SYSTEM_CHECKS=[], DEBUG=True) == []
    assert messages(deploy=True) == []  # the test project silences it (it serves both to its tests)
    assert messages(deploy=False, SILENCED_SYSTEM_CHECKS=[]) == []  # a deploy check only


def test_the_probe_runs_no_health_check_and_builds_no_exposition(client):
    response = client.options("/metrics")
    assert response.status_code == 200 and response.content == b"" and "GET" in response["Allow"]

"""The servers' zoo.cfg against the lease (zklocks/client/serverconf.py): without TICK_TIME a lease proof waits half the
session timeout for the leader's PING, which is a tick only while every server negotiates at least two of the
longest tick. ``zklocks_check`` and the deploy check E017 refuse what the lease cannot cover."""

import pytest
from django.core import checks
from django.test import override_settings

from tests.support.helpers import run_zklocks_check
from zklocks.client import serverconf
from zklocks.client.pools import close_all
from zklocks.client.serverconf import ServerConf
from zklocks.testing import ZkServer

CONF = """clientPort=2181
dataDir=/var/lib/zookeeper/version-2
tickTime=2000
maxClientCnxns=60
minSessionTimeout=1000
maxSessionTimeout=40000
serverId=1
"""


def test_parse_reads_the_session_bounds_and_fills_zookeepers_defaults():
    assert serverconf.parse("zk1:2181", CONF) == ServerConf("zk1:2181", 2000, 1000, 40000)
    defaults = "tickTime=3000\nminSessionTimeout=-1\nmaxSessionTimeout=-1\n"
    assert serverconf.parse("zk1:2181", defaults) == ServerConf("zk1:2181", 3000, 6000, 60000)
    assert serverconf.parse("zk1:2181", "conf is not executed because it is not in the whitelist.\n") is None


def test_a_server_negotiates_within_its_bounds():
    s = ServerConf("a", 2000, 1000, 6000)
    assert (s.negotiates(0.5), s.negotiates(3.0), s.negotiates(20.0)) == (1.0, 3.0, 6.0)


def test_split_hosts():
    assert serverconf.split_hosts("zk1:2182, zk2,[::1]:2183,[::1]") == [
        ("zk1", 2182),
        ("zk2", 2181),
        ("::1", 2183),
        ("::1", 2181),
    ]


def test_zookeepers_defaults_are_covered_without_tick_time():
    servers = [ServerConf(f"s{i}", 2000, 4000, 40000) for i in range(3)]
    assert serverconf.lease_problems(servers, 10.0, None) == ([], [])
    assert serverconf.lease_problems(servers, 1.0, None) == ([], [])  # clamped up to 4 s = 2 ticks


def test_a_min_session_timeout_below_two_ticks_needs_tick_time():
    servers = [ServerConf("s0", 2000, 2000, 40000), ServerConf("s1", 2000, 1000, 40000)]
    problems, notes = serverconf.lease_problems(servers, 3.0, None)
    assert problems == [
        "s0 negotiates a 3s session (minSessionTimeout 2000 ms, maxSessionTimeout 40000 ms), less than twice the "
        "tickTime of s0 (2000 ms): without TICK_TIME, lease proofs wait 1.5s for the leader's PING, shorter than "
        "a tick; set TICK_TIME=2"
    ]
    assert notes == []  # both give 3 s
    assert serverconf.lease_problems(servers, 3.0, 2.0) == ([], [])  # TICK_TIME covers it


def test_a_rolling_change_of_tick_time_counts_the_longest_tick_of_any_server():
    """Any server may lead, and the leader's tick paces the PINGs: s0's 4 s sessions are two of its own ticks
    but not two of s1's."""
    servers = [ServerConf("s0", 2000, 4000, 40000), ServerConf("s1", 3000, 6000, 60000)]
    problems, notes = serverconf.lease_problems(servers, 4.0, None)
    assert len(problems) == 1 and "set TICK_TIME=3" in problems[0]
    assert notes and "s0 4s, s1 6s" in notes[0]
    problems, _ = serverconf.lease_problems(servers, 4.0, 2.0)
    assert problems == [
        "TICK_TIME=2s is shorter than the tickTime of s1 (3000 ms): lease proofs would not wait for the leader's "
        "PING; set TICK_TIME=3"
    ]


def test_servers_that_negotiate_different_timeouts_are_a_note():
    servers = [ServerConf("a", 200, 400, 2000), ServerConf("b", 200, 400, 20000)]
    problems, notes = serverconf.lease_problems(servers, 20.0, 0.2)
    assert problems == []
    assert notes == [
        "the servers negotiate different session timeouts for SESSION_TIMEOUT=20s (a 2s, b 20s): a session's lease "
        "counts on the shortest it has negotiated on any connection; give all servers the same minSessionTimeout "
        "and maxSessionTimeout once the rolling change is over"
    ]


def alias(hosts, **extra):
    return override_settings(
        ZKLOCKS={
            "default": {
                "HOSTS": hosts,
                "NAMESPACE": "/zklocks-server-conf",
                "SESSION_TIMEOUT": 0.3,
                "CONNECT_TIMEOUT": 2.0,
                "REAP_INTERVAL": 0,
                "AUTH": "open",  # the server's conf is checked here; the ACL audit in test_zklocks_check.py
                **extra,
            }
        }
    )


@pytest.fixture(scope="module")
def short_min():
    """tickTime 200 ms with minSessionTimeout 200 ms (legal in 3.8): sessions of one tick."""
    with ZkServer(tick_time=200, extra={"minSessionTimeout": "200"}) as server:
        yield server


def test_zklocks_check_and_the_deploy_check_refuse_sessions_shorter_than_two_ticks(short_min):
    with alias(short_min.hosts):
        try:
            lines, failed = run_zklocks_check()
            problem = (
                f"{short_min.hosts} negotiates a 0.3s session (minSessionTimeout 200 ms, maxSessionTimeout 4000 ms), "
                f"less than twice the tickTime of {short_min.hosts} (200 ms): without TICK_TIME, lease proofs wait "
                "0.15s for the leader's PING, shorter than a tick; set TICK_TIME=0.2"
            )
            assert f"default: FAILED {problem}" in lines
            assert failed == "zklocks_check: 1 problem(s) found"
            deploy = [m for m in checks.run_checks(include_deployment_checks=True) if m.id == "zklocks.E017"]
            assert [m.msg for m in deploy] == [f"ZKLOCKS['default']: {problem}."]
        finally:
            close_all()
    with alias(short_min.hosts, TICK_TIME=0.2, SESSION_TIMEOUT=0.4):
        try:
            lines, failed = run_zklocks_check()
            assert failed is None, lines
            assert (
                "default: ok tickTime 200 ms, session 0.4s on 1 server(s): the lease waits a whole tick for the "
                "leader (TICK_TIME=0.2s)"
            ) in lines
        finally:
            close_all()


def test_a_server_that_does_not_answer_conf_is_a_note():
    with ZkServer(tick_time=200, extra={"4lw.commands.whitelist": "srvr"}) as server:
        with alias(server.hosts, SESSION_TIMEOUT=2.0):
            try:
                lines, failed = run_zklocks_check()
                assert failed is None, lines
                assert (
                    f"default: note tickTime and session bounds not checked: {server.hosts} does not answer `conf` "
                    "(add it to 4lw.commands.whitelist)"
                ) in lines
                assert not [m for m in checks.run_checks(include_deployment_checks=True) if m.id == "zklocks.E017"]
            finally:
                close_all()

"""Prometheus metrics of locks and sessions, against the suite's real ZooKeeper server."""

import threading

import pytest
from prometheus_client import CollectorRegistry

from tests.support.helpers import wait_until
from tests.support.threads import in_thread
from zklocks import LockTimeout, ZkUnavailable, zk_lock, zk_semaphore
from zklocks.client.pools import connections
from zklocks.contrib import metrics

pytestmark = pytest.mark.zk


@pytest.fixture
def registry():
    registry = CollectorRegistry()
    m = metrics.start(metrics.Metrics(registry))
    yield registry
    metrics.stop(m)


def value(registry, name, **labels):
    return registry.get_sample_value(name, labels) or 0.0


def test_acquire_results_hold_time_and_gauges(registry):
    lock = zk_lock("orders/1")
    with lock:
        assert value(registry, "zklocks_held", alias="default", kind="exclusive") == 1
        with lock:  # reentrant: one more attempt, still one hold
            pass
        assert value(registry, "zklocks_held", alias="default", kind="exclusive") == 1
        assert in_thread(zk_lock("orders/1").acquire, False) is False

        waiter_started = threading.Event()

        def wait():
            waiter_started.set()
            with pytest.raises(LockTimeout):
                with zk_lock("orders/1", timeout=0.6):
                    pass

        t = threading.Thread(target=wait)
        t.start()
        waiter_started.wait(5)
        wait_until(lambda: value(registry, "zklocks_waiting", alias="default", kind="exclusive") == 1, 5)
        t.join(10)
        assert value(registry, "zklocks_waiting", alias="default", kind="exclusive") == 0
    assert value(registry, "zklocks_held", alias="default", kind="exclusive") == 0
    acquired = dict(alias="default", kind="exclusive", result="acquired")
    assert value(registry, "zklocks_acquire_seconds_count", **acquired) == 2
    assert (
        value(registry, "zklocks_acquire_seconds_count", alias="default", kind="exclusive", result="not_acquired") == 1
    )
    timeouts = dict(alias="default", kind="exclusive", result="timeout")
    assert value(registry, "zklocks_acquire_seconds_count", **timeouts) == 1
    assert value(registry, "zklocks_acquire_seconds_sum", **timeouts) >= 0.55
    assert value(registry, "zklocks_hold_seconds_count", alias="default", kind="exclusive") == 1
    # names never become label values
    from prometheus_client import generate_latest

    assert b"orders" not in generate_latest(registry)


def test_shared_and_semaphore_kinds(registry):
    with zk_lock("r", shared=True), zk_semaphore("pool", 2):
        assert value(registry, "zklocks_held", alias="default", kind="shared") == 1
        assert value(registry, "zklocks_held", alias="default", kind="semaphore") == 1
    assert value(registry, "zklocks_hold_seconds_count", alias="default", kind="semaphore") == 1


def test_unavailable(registry, zklocks_settings):
    zklocks_settings(HOSTS="127.0.0.1:1", CONNECT_TIMEOUT=0.3)
    with pytest.raises(ZkUnavailable):
        zk_lock("x").acquire()
    assert (
        value(registry, "zklocks_acquire_seconds_count", alias="default", kind="exclusive", result="unavailable") == 1
    )
    assert value(registry, "zklocks_waiting", alias="default", kind="exclusive") == 0


def test_lost_hold_and_session_states(registry, zk_server, zk_expire):
    lock = zk_lock("expiring")
    lock.acquire()
    session = connections["default"].session()
    assert value(registry, "zklocks_sessions", alias="default", state="connected") >= 1
    connected = value(registry, "zklocks_sessions", alias="default", state="connected")
    zk_expire(zk_server.hosts, session)
    wait_until(lambda: value(registry, "zklocks_lost_total", alias="default", reason="expired") == 1, 10)
    assert value(registry, "zklocks_held", alias="default", kind="exclusive") == 0
    wait_until(lambda: value(registry, "zklocks_sessions", alias="default", state="lost") == 1, 5)
    assert value(registry, "zklocks_sessions", alias="default", state="connected") == connected - 1
    lock.release()
    assert value(registry, "zklocks_held", alias="default", kind="exclusive") == 0  # not counted twice
    assert value(registry, "zklocks_hold_seconds_count", alias="default", kind="exclusive") == 1
    with zk_lock("after"):  # the pool replaces the lost session
        pass
    assert value(registry, "zklocks_sessions", alias="default", state="lost") == 0
    assert value(registry, "zklocks_sessions", alias="default", state="connected") == connected


def family_of(name: str) -> str:
    return name.split("/", 1)[0]


def test_family_label_from_dotted_path():
    registry = CollectorRegistry()
    m = metrics.start(metrics.Metrics(registry, family=metrics.resolve_family("tests.observe.test_metrics.family_of")))
    try:
        for i in range(5):
            with zk_lock(f"invoice/{i}"):
                pass
        with zk_lock("report/x"):
            pass
    finally:
        metrics.stop(m)
    labels = dict(alias="default", kind="exclusive", result="acquired")
    assert value(registry, "zklocks_acquire_seconds_count", family="invoice", **labels) == 5
    assert value(registry, "zklocks_acquire_seconds_count", family="report", **labels) == 1


def test_family_label_values_are_bounded_and_the_rest_folded_into_other(caplog):
    """A family function that returns something per lock (here the whole name) makes at most FAMILY_LIMIT series
    per metric; the acquires past them still count, as family="other"."""
    registry = CollectorRegistry()
    m = metrics.start(metrics.Metrics(registry, family=lambda name: name))
    extra = 30
    try:
        for i in range(metrics.FAMILY_LIMIT + extra):
            with zk_lock(f"user:{i}"):
                pass
        with zk_lock("user:0"):  # a value seen before the bound keeps its own series
            pass
    finally:
        metrics.stop(m)
    families = {
        sample.labels["family"]
        for family in registry.collect()
        if family.name == "zklocks_acquire_seconds"
        for sample in family.samples
    }
    assert len(families) == metrics.FAMILY_LIMIT + 1 and metrics.OTHER_FAMILY in families
    labels = dict(alias="default", kind="exclusive", result="acquired")
    assert value(registry, "zklocks_acquire_seconds_count", family="other", **labels) == extra
    assert value(registry, "zklocks_acquire_seconds_count", family="user:0", **labels) == 2
    assert value(registry, "zklocks_hold_seconds_count", family="other", alias="default", kind="exclusive") == extra
    warnings = [r for r in caplog.records if "ZKLOCKS_METRICS_FAMILY gave more than" in r.getMessage()]
    assert len(warnings) == 1


def test_family_must_be_callable():
    from zklocks import ZkConfigError

    with pytest.raises(ZkConfigError, match="ZKLOCKS_METRICS_FAMILY"):
        metrics.resolve_family(3)


def test_view_serves_the_default_registry(client):
    with zk_lock("viewed"):
        pass
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    body = response.content.decode()
    assert 'zklocks_acquire_seconds_count{alias="default",kind="exclusive",result="acquired"}' in body
    assert "# TYPE zklocks_held gauge" in body


FAMILY_WORKER = """
import sys
from zklocks.contrib.metrics import OTHER_FAMILY, _Bounded
bounded = _Bounded(lambda name: name, sys.argv[1])
print(sum(bounded(f"{sys.argv[2]}{i}") != OTHER_FAMILY for i in range(80)))
"""


def test_the_family_bound_holds_across_the_processes_of_a_multiprocess_directory(tmp_path):
    """Four worker processes once left 401 distinct values: in multiprocess mode the admitted values are shared
    in a file of the directory, so four processes of 80 new values each admit FAMILY_LIMIT between them."""
    import subprocess
    import sys

    command = [sys.executable, "-c", FAMILY_WORKER, str(tmp_path)]
    procs = [subprocess.Popen([*command, prefix], stdout=subprocess.PIPE, text=True) for prefix in "abcd"]
    admitted = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert sum(admitted) == metrics.FAMILY_LIMIT, admitted
    lines = (tmp_path / metrics.SHARED_FAMILIES).read_bytes().splitlines()
    assert len(lines) == len(set(lines)) == metrics.FAMILY_LIMIT

"""Semaphores under faults: connection loss during the lease create, reaper sweeps racing acquire, tiny timeouts.

Every public call raises only zklocks exceptions and leaves no lease node behind.
"""

import threading

import pytest

from tests.support.helpers import raw_client, wait_until, zk_settings
from zklocks import LockNotAcquired, LockTimeout, ZkLocksError, lock_path, zk_semaphore
from zklocks.ops.reaper import sweep
from zklocks.testing.proxy import TcpProxy

pytestmark = pytest.mark.zk

CREATE2 = 15  # the lease and the internal mutex are created with create2 (include_data=True)


def use(hosts, **options):
    return zk_settings(hosts, "/sem-faults", **{"SESSION_TIMEOUT": 3.0, **options})


def lease_nodes(hosts, name):
    client = raw_client(hosts)
    try:
        path = lock_path(name)
        return [c for c in client.get_children(path) if "__lease__" in c] if client.exists(path) else []
    finally:
        client.stop()


def test_connection_loss_during_the_lease_create_recovers_and_leaves_no_orphan(own_zk):
    proxy = TcpProxy("127.0.0.1", own_zk.port).start()
    try:
        with use(proxy.hosts):
            with zk_semaphore("printers", 2):
                pass  # the session, the semaphore node and its mutex exist now
            # The mutex create is the first create2 of the next acquire, the lease create the second.
            proxy.drop_after_next_request((CREATE2,), skip=1)
            with zk_semaphore("printers", 2, timeout=8) as sem:
                assert proxy.dropped.is_set()
                assert sem.is_held
                nodes = lease_nodes(own_zk.hosts, "printers")
                assert len(nodes) == 1 and sem.token is not None, nodes  # our own lease, found by its guid
            wait_until(lambda: lease_nodes(own_zk.hosts, "printers") == [], timeout=5)
    finally:
        proxy.stop()


def test_connection_loss_during_the_mutex_create_recovers_too(own_zk):
    proxy = TcpProxy("127.0.0.1", own_zk.port).start()
    try:
        with use(proxy.hosts):
            with zk_semaphore("scanners", 1):
                pass
            proxy.drop_after_next_request((CREATE2,))
            with zk_semaphore("scanners", 1, timeout=8) as sem:
                assert proxy.dropped.is_set()
                assert sem.is_held
                assert len(lease_nodes(own_zk.hosts, "scanners")) == 1
            wait_until(lambda: lease_nodes(own_zk.hosts, "scanners") == [], timeout=5)
    finally:
        proxy.stop()


@pytest.mark.parametrize("blocking", [True, False])
def test_reaper_sweeps_racing_acquire_raise_nothing_raw(zk_server, zklocks_settings, blocking):
    alias = zklocks_settings()
    namespace = alias["NAMESPACE"]
    stop = threading.Event()
    sweeps = [0]

    def reaper():
        client = raw_client(zk_server.hosts)
        try:
            while not stop.is_set():
                sweep(client, namespace)
                sweeps[0] += 1
        finally:
            client.stop()

    thread = threading.Thread(target=reaper, daemon=True)
    thread.start()
    errors = []
    try:
        for _ in range(150):
            sem = zk_semaphore("reaped", 2, timeout=5, blocking=blocking)
            try:
                assert sem.acquire()
                sem.release(wait=True)
            except Exception as exc:  # noqa: BLE001 -- anything but a clean acquire is recorded
                errors.append(exc)
    finally:
        stop.set()
        thread.join(10)
    assert sweeps[0] > 10
    assert errors == [], {type(e).__name__ for e in errors}
    assert lease_nodes(zk_server.hosts, "reaped") == []


def test_concurrent_deletes_of_the_semaphore_node_raise_nothing_raw(zk_server, zklocks_settings):
    zklocks_settings()
    path = lock_path("deleted")
    stop = threading.Event()

    def deleter():
        client = raw_client(zk_server.hosts)
        try:
            while not stop.is_set():
                for node in (f"{path}/__mutex__", path):
                    try:
                        client.delete(node)
                    except Exception:  # noqa: BLE001 -- not empty, or gone already
                        pass
        finally:
            client.stop()

    thread = threading.Thread(target=deleter, daemon=True)
    thread.start()
    errors = []
    try:
        for _ in range(150):
            sem = zk_semaphore("deleted", 1, timeout=5)
            try:
                sem.acquire()
                sem.release(wait=True)
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
    finally:
        stop.set()
        thread.join(10)
    assert errors == [], {type(e).__name__ for e in errors}
    assert lease_nodes(zk_server.hosts, "deleted") == []


@pytest.mark.parametrize("timeout", [0.001, 0.0001, 0])
def test_tiny_timeouts_raise_lock_timeout_or_acquire(zklocks_settings, zk_server, timeout):
    zklocks_settings()
    with zk_semaphore("tiny", 1):  # held elsewhere: a waiter could only time out
        outcome = []

        def attempt():
            try:
                outcome.append(zk_semaphore("tiny", 1).acquire(timeout=timeout))
            except BaseException as exc:  # noqa: BLE001
                outcome.append(exc)

        for _ in range(20):
            t = threading.Thread(target=attempt)
            t.start()
            t.join(10)
    assert outcome and all(o is False for o in outcome), outcome
    # A fresh name: the tiny deadline passes while the semaphore node itself is being created.
    outcome = []
    for i in range(20):
        try:
            sem = zk_semaphore(f"tiny-fresh-{i}", 1)
            if sem.acquire(timeout=timeout):
                sem.release(wait=True)
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)
    assert outcome == [], outcome
    result = []
    t = threading.Thread(target=lambda: result.append(_enter_or_error("tiny", timeout)))
    with zk_semaphore("tiny", 1):
        t.start()
        t.join(10)
    assert isinstance(result[0], LockTimeout), result
    assert "'tiny'" in str(result[0]) and "'default'" in str(result[0])
    wait_until(lambda: lease_nodes(zk_server.hosts, "tiny") == [], timeout=5)


def _enter_or_error(name, timeout):
    try:
        zk_semaphore(name, 1, timeout=timeout).__enter__()
    except ZkLocksError as exc:
        return exc
    except BaseException as exc:  # noqa: BLE001
        return AssertionError(f"not a zklocks error: {exc!r}")
    return AssertionError("acquired a held semaphore")


def test_non_blocking_semaphore_error_names_the_lock_and_alias(zklocks_settings):
    zklocks_settings()
    with zk_semaphore("named", 1):
        result = []
        t = threading.Thread(target=lambda: result.append(_enter_or_error_nb("named")))
        t.start()
        t.join(10)
    assert isinstance(result[0], LockNotAcquired)
    assert "'named'" in str(result[0]) and "'default'" in str(result[0])


def _enter_or_error_nb(name):
    try:
        zk_semaphore(name, 1, blocking=False).__enter__()
    except BaseException as exc:  # noqa: BLE001
        return exc
    return None

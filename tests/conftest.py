import pytest

pytest_plugins = ["zklocks.testing.pytest_plugin", "tests.support.celery_harness"]


@pytest.fixture(autouse=True)
def _zk(request):
    """Tests marked ``zk`` get settings.ZKLOCKS pointed at the suite's own ZooKeeper server."""
    if request.node.get_closest_marker("zk"):
        request.getfixturevalue("zklocks_settings")


def pytest_addoption(parser):
    parser.addoption(
        "--chaos-long", action="store_true", default=False, help="run the long form of the chaos suite (make chaos)"
    )


@pytest.fixture
def kz(zk_server):
    """A raw kazoo client of the test's own on the suite's server (not a zklocks session)."""
    from tests.support.helpers import raw_client

    client = raw_client(zk_server.hosts)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def busy_orders():
    """'orders:7' held by thread 'web-1' (as task shop.charge) with two waiters queued behind it."""
    from tests.support.threads import busy_orders_lock, stop_all

    holder, waiters = busy_orders_lock()
    yield holder, waiters
    stop_all(holder, waiters)


@pytest.fixture
def own_zk():
    """A standalone server of the test's own, for faults that would disturb the shared one."""
    from zklocks.testing import ZkServer

    server = ZkServer(tick_time=100)
    server.start()
    yield server
    server.cleanup()

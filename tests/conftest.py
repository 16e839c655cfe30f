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
def own_zk():
    """A standalone server of the test's own, for faults that would disturb the shared one."""
    from zklocks.testing import ZkServer

    server = ZkServer(tick_time=100)
    server.start()
    yield server
    server.cleanup()

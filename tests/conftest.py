import pytest

pytest_plugins = ["zklocks.testing.pytest_plugin", "tests.celery_harness"]


@pytest.fixture(autouse=True)
def _zk(request):
    """Tests marked ``zk`` get settings.ZKLOCKS pointed at the suite's own ZooKeeper server."""
    if request.node.get_closest_marker("zk"):
        request.getfixturevalue("zklocks_settings")


def pytest_addoption(parser):
    parser.addoption("--chaos-long", action="store_true", default=False,
                     help="run the long form of the chaos suite (make chaos)")

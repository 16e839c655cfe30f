import asyncio
import gc
import logging
import sys

import pytest

pytest_plugins = ["zklocks.testing.pytest_plugin", "tests.support.celery_harness"]


@pytest.fixture(autouse=True)
def _zk(request):
    """Tests marked ``zk`` get settings.ZKLOCKS pointed at the suite's own ZooKeeper server."""
    if request.node.get_closest_marker("zk"):
        request.getfixturevalue("zklocks_settings")


class _UnreadErrors(logging.Handler):
    """asyncio's reports of a future or task whose error nobody read: each is a leak of the library's (an
    outcome set on a future its waiter had left) or of a test's."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "never retrieved" in record.getMessage():
            self.messages.append(record.getMessage())


class _LoopsMade:
    """How many asyncio event loops this process has made: a test that made one (itself, or through the code it
    drives) gets a collection at its end. A full collection costs about 45 ms: the other tests go without."""

    count = 0
    _init = asyncio.BaseEventLoop.__init__

    @classmethod
    def install(cls) -> None:
        def counted(loop, *args, **kwargs):
            cls.count += 1
            cls._init(loop, *args, **kwargs)

        asyncio.BaseEventLoop.__init__ = counted


_LoopsMade.install()


@pytest.fixture(autouse=True)
def _no_unread_async_errors(request):
    """Fail the test in which asyncio reports an error never retrieved. After a test that made an event loop, a
    collection makes the report come now, in the test that left it, and not in whichever test next collects the
    garbage."""
    handler = _UnreadErrors()
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    loops_before = _LoopsMade.count
    try:
        yield
        if _LoopsMade.count != loops_before:
            failed = getattr(request.node, "rep_call", None)
            if failed is not None and failed.failed:
                # pytest keeps a failed test's traceback (sys.last_*), and with it the test's frames and futures:
                # let them go now, or the next test would collect them and be blamed.
                for name in ("last_exc", "last_type", "last_value", "last_traceback"):
                    if hasattr(sys, name):
                        setattr(sys, name, None)
            gc.collect()
    finally:
        logger.removeHandler(handler)
    if handler.messages:
        pytest.fail(f"asyncio reported errors never retrieved: {handler.messages[:3]}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.rep_call = report  # for the fixtures' teardown: whether the test itself failed
    return report


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


# A 100 ms tick caps sessions at 2 s (20 ticks); these servers grant up to 20 s.
LONG_SESSIONS = {"maxSessionTimeout": "20000"}


def _standalone(extra=None):
    """A standalone server of its own for the fixture that yields from this, stopped with it."""
    from zklocks.testing import ZkServer

    server = ZkServer(tick_time=100, extra=extra)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def own_zk():
    """A standalone server of the test's own, for faults that would disturb the shared one."""
    yield from _standalone()


@pytest.fixture
def own_long_zk():
    """own_zk, granting sessions up to 20 s."""
    yield from _standalone(LONG_SESSIONS)


@pytest.fixture(scope="module")
def long_sessions_zk():
    """A standalone server of the module's own that grants sessions up to 20 s, for faults against a
    SESSION_TIMEOUT longer than CONNECT_TIMEOUT."""
    yield from _standalone(LONG_SESSIONS)


# -- markers by what a test starts, and the two tiers (CONTRIBUTING.md, "Two tiers") --

# A test gets a marker for each real component it starts beyond the suite's shared server, so that a contributor
# can choose (``-m 'not ensemble'``): through a fixture it asks for, or a constructor its own code calls.
_FIXTURE_MARKS = {
    "zk_ensemble": "ensemble",
    "own_zk": "ensemble",
    "own_long_zk": "ensemble",
    "long_sessions_zk": "ensemble",
    "ensemble": "ensemble",
    "ens": "ensemble",
    "cut_off": "ensemble",
    "redis_server": "celery",
    "celery_app": "celery",
}
_SOURCE_MARKS = {
    "ZkEnsemble(": "ensemble",
    "ZkServer(": "ensemble",
    "running_workers(": "celery",
    "chromium_page(": "browser",
}


def _starts(item) -> set[str]:
    import inspect

    marks = {mark for name, mark in _FIXTURE_MARKS.items() if name in getattr(item, "fixturenames", ())}
    function = getattr(item, "function", None)
    try:
        source = inspect.getsource(function) if function is not None else ""
    except (OSError, TypeError):
        source = ""
    marks.update(mark for text, mark in _SOURCE_MARKS.items() if text in source)
    return marks


def pytest_collection_modifyitems(config, items):
    from tests.tiers import in_full_tier_only

    for item in items:
        for mark in _starts(item):
            item.add_marker(mark)
        if in_full_tier_only(item.nodeid):
            item.add_marker("full")

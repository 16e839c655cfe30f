"""pytest fixtures backed by real ZooKeeper servers (Debian's ``zookeeper`` package and a JVM).

Setup in your project (pytest-django provides Django's settings to the tests):

    pip install pytest pytest-django
    # pytest.ini (or [tool.pytest.ini_options] in pyproject.toml)
    [pytest]
    DJANGO_SETTINGS_MODULE = proj.settings
    # conftest.py at the project root
    pytest_plugins = ["zklocks.testing.pytest_plugin"]

Fixtures:

- ``zk_server``: a standalone server for the whole run (tickTime 200 ms: sessions from 0.4 s to 4 s).
- ``zk_ensemble``: a 3-node ensemble on loopback, fresh for each test that asks for it.
- ``zk_expire``: ``zk_expire(hosts, kazoo_client_or_session)`` expires that session for real.
- ``zklocks_settings``: ``settings.ZKLOCKS`` pointed at ``zk_server`` with a fresh namespace per test;
  a callable that returns the alias dict and accepts overrides, e.g. ``zklocks_settings(SESSION_TIMEOUT=1)``.
  Tests that do not ask for it keep the project's own ZKLOCKS.

A run ended by SIGTERM (``timeout``, a CI runner's cancel) stops as on Ctrl-C: the fixtures' servers are stopped
before pytest exits, never left running.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid

import pytest

from .. import forking
from .ensemble import ZkEnsemble
from .server import ZkServer, expire_session

_runner_pid = 0  # the pytest process that installed _terminated


def _terminated(signum, frame) -> None:
    if os.getpid() != _runner_pid:
        # A forked child (a multiprocessing pool's worker) inherited the handler: SIGTERM must end it as it
        # would have without us. Raised inside the pool's cross-process lock, KeyboardInterrupt left that lock
        # taken and the pool's terminate() joined its other worker for ever.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the clean-up that follows must not be cut short
    raise KeyboardInterrupt(f"signal {signum}")


def _default_in_child() -> None:  # a reset after fork (zklocks.forking)
    try:
        if signal.getsignal(signal.SIGTERM) is _terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # not the child's main thread: _terminated itself passes the signal on
        pass


def pytest_configure(config) -> None:
    """SIGTERM ends the run as Ctrl-C does, so that session fixtures (servers in process groups of their own,
    which outlive a killed parent) are torn down. Left alone where someone else handles SIGTERM. Only in the
    pytest process: a process forked from it gets the default action back."""
    global _runner_pid
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        _runner_pid = os.getpid()
        signal.signal(signal.SIGTERM, _terminated)
        forking.register(_default_in_child)


@pytest.fixture(scope="session")
def zk_server():
    """A standalone ZooKeeper for the whole run (tickTime 200 ms: sessions of 0.4 to 4 s). ``.hosts`` is its
    "127.0.0.1:port"; ``stop()``, ``kill()``, ``pause()`` and ``restart()`` simulate outages."""
    server = ZkServer(tick_time=200)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def zk_ensemble():
    """A fresh 3-node ensemble on loopback for this test (``.hosts``, ``.leader()``, ``.servers``)."""
    ensemble = ZkEnsemble(3, tick_time=200)
    try:
        ensemble.start()
        yield ensemble
    finally:
        ensemble.cleanup()


@pytest.fixture
def zk_expire():
    """``zk_expire(hosts, session_or_kazoo_client)``: expire that ZooKeeper session for real, as the server does
    when a client stays away past its session timeout (e.g. ``connections["default"].session()``)."""

    def expire(hosts: str, target) -> None:
        client = getattr(target, "client", target)
        expire_session(hosts, client.client_id)

    return expire


def _open_parent(server, path: str) -> None:
    """Make ``path`` with ZooKeeper's open ACL, once per server: the first alias to use it would otherwise make it
    with its own ACL, and tests of other identities (another SECRET_KEY, an AUTH) could not make their namespaces
    below it."""
    made = server.__dict__.setdefault("_zklocks_open_parents", set())
    if path in made:
        return
    from kazoo.client import KazooClient

    client = KazooClient(hosts=server.hosts, timeout=4.0)
    client.start(timeout=10)
    try:
        client.ensure_path(path)
    finally:
        client.stop()
        client.close()
    made.add(path)


@pytest.fixture
def zklocks_settings(zk_server):
    """settings.ZKLOCKS = {"default": {...}} pointed at ``zk_server`` for this test: a fresh NAMESPACE
    (/zklocks-test/<random>), SESSION_TIMEOUT and CONNECT_TIMEOUT 2 s, REAP_INTERVAL 0, TICK_TIME the server's
    tickTime. Call it to change
    options, ``zklocks_settings(SESSION_TIMEOUT=3)``, or to add aliases,
    ``zklocks_settings(EXTRA_ALIASES={"reports": {...}})``; it returns the default alias's dict. Afterwards the
    project's settings come back and every zklocks session is closed."""
    from django.test import override_settings

    from zklocks.client.pools import close_all

    _open_parent(zk_server, "/zklocks-test")
    namespace = f"/zklocks-test/{uuid.uuid4().hex[:12]}"
    overrides: list = []

    def configure(**options):
        alias = {
            "HOSTS": zk_server.hosts,
            "NAMESPACE": namespace,
            "SESSION_TIMEOUT": 2.0,
            "CONNECT_TIMEOUT": 2.0,
            "REAP_INTERVAL": 0,
            "TICK_TIME": zk_server.tick_time / 1000,  # the server's own: fresher lease proofs (see lease.py)
        }
        alias.update(options)
        extra = alias.pop("EXTRA_ALIASES", {})
        override = override_settings(ZKLOCKS={"default": alias, **extra})
        override.enable()
        overrides.append(override)
        return alias

    configure()
    yield configure
    for override in reversed(overrides):
        override.disable()
    close_all()

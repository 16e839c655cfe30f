"""Runs the stateful model (machine.py) against a server of its own, and on a 3-node ensemble (quorum.py).

Bounded in ``make test-all``, on the same programs every run (Hypothesis derandomized: a CI run tests what the
last one tested, and a failure there is a change, not a new draw); ``ZKLOCKS_MODEL_RANDOM=1`` draws new programs,
and ``ZKLOCKS_MODEL_EXAMPLES=200 ZKLOCKS_MODEL_STEPS=30`` runs it long. A failure is printed as the shrunk
program of rules that broke a promise.
"""

import contextlib
import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.machine import SESSION_TIMEOUT, LockModel, World
from tests.model.quorum import EnsembleServers, QuorumLockModel
from tests.support.helpers import raw_client
from zklocks.testing import ZkEnsemble, ZkServer
from zklocks.testing.proxy import TcpProxy

EXAMPLES = int(os.environ.get("ZKLOCKS_MODEL_EXAMPLES", "12"))
STEPS = int(os.environ.get("ZKLOCKS_MODEL_STEPS", "10"))
QUORUM_EXAMPLES = int(os.environ.get("ZKLOCKS_MODEL_QUORUM_EXAMPLES", "6"))  # an ensemble's restarts take longer

pytestmark = [pytest.mark.model, pytest.mark.timeout(int(os.environ.get("ZKLOCKS_MODEL_TIMEOUT", "1500")))]


@contextlib.contextmanager
def linked(servers, port: int):
    """The model's world on ``servers``: this process reaches ``port`` through a proxy (the link a blip cuts), the
    observer reaches ``servers.hosts`` directly."""
    proxy = TcpProxy("127.0.0.1", port).start()
    try:
        observer = raw_client(servers.hosts, timeout=SESSION_TIMEOUT)
        try:
            yield World(servers, proxy, observer)
        finally:
            observer.stop()
            observer.close()
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def world():
    server = ZkServer(tick_time=200)
    try:
        server.start()
        with linked(server, server.port) as made:
            yield made
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def quorum_world():
    """A 3-node ensemble whose server links can be cut; this process is pinned to server 0 through a proxy."""
    ensemble = ZkEnsemble(3, tick_time=200, server_links=True)
    try:
        ensemble.start()
        with linked(EnsembleServers(ensemble, pinned=0), ensemble.servers[0].port) as made:
            yield made
    finally:
        ensemble.cleanup()


def run_model(machine, examples: int) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=os.environ.get("ZKLOCKS_MODEL_RANDOM", "") != "1",
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.generate, Phase.shrink]
            if os.environ.get("ZKLOCKS_MODEL_SHRINK", "1") == "1"
            else [Phase.generate],
            print_blob=True,
            report_multiple_bugs=False,
        ),
    )


def test_lock_model(world):
    LockModel.world = world
    run_model(LockModel, EXAMPLES)


def test_lock_model_on_an_ensemble(quorum_world):
    QuorumLockModel.world = quorum_world
    run_model(QuorumLockModel, QUORUM_EXAMPLES)

"""Runs the stateful model (machine.py) against a server of its own.

Bounded in ``make test-all``, on the same programs every run (Hypothesis derandomized: a CI run tests what the
last one tested, and a failure there is a change, not a new draw); ``ZKLOCKS_MODEL_RANDOM=1`` draws new programs,
and ``ZKLOCKS_MODEL_EXAMPLES=200 ZKLOCKS_MODEL_STEPS=30`` runs it long. A failure is printed as the shrunk
program of rules that broke a promise.
"""

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.machine import SESSION_TIMEOUT, LockModel, World
from tests.support.helpers import raw_client
from zklocks.testing import ZkServer
from zklocks.testing.proxy import TcpProxy

EXAMPLES = int(os.environ.get("ZKLOCKS_MODEL_EXAMPLES", "12"))
STEPS = int(os.environ.get("ZKLOCKS_MODEL_STEPS", "10"))

pytestmark = [pytest.mark.model, pytest.mark.timeout(int(os.environ.get("ZKLOCKS_MODEL_TIMEOUT", "1500")))]


@pytest.fixture(scope="module")
def world():
    server = ZkServer(tick_time=200)
    server.start()
    proxy = TcpProxy("127.0.0.1", server.port).start()
    observer = raw_client(server.hosts, timeout=SESSION_TIMEOUT)
    try:
        yield World(server, proxy, observer)
    finally:
        observer.stop()
        observer.close()
        proxy.stop()
        server.cleanup()


def test_lock_model(world):
    LockModel.world = world
    run_state_machine_as_test(
        LockModel,
        settings=settings(
            max_examples=EXAMPLES,
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

import importlib
import threading
import time

import pytest

# Each test module skips itself (a visible skip) when Django's tasks framework is missing: see REQUIRES.
REQUIRES = {"modname": "zklocks.tasks.compat", "reason": "needs Django >= 6.0 or the django-tasks backport"}


@pytest.fixture
def djtasks(zklocks_settings):
    """settings.TASKS of tests.support.djtasks applied, the module imported, its records cleared."""
    from django.test import override_settings

    from tests.support.djtasks_conf import TASKS

    with override_settings(TASKS=TASKS):
        module = importlib.import_module("tests.support.djtasks")
        module.RUNS.clear()
        module.GATES.clear()
        module.ENTERED.clear()
        module.ACTIVE.clear()
        module.PEAK.clear()
        yield module
        for gate in module.GATES.values():
            gate.set()


@pytest.fixture
def outcomes():
    """The (task, outcome, task_id) of every task_deduplicated signal sent during the test."""
    from zklocks import signals

    seen: list[tuple[str, str, str | None]] = []
    lock = threading.Lock()

    def receiver(sender, task, outcome, name, alias, task_id, **kwargs):
        with lock:
            seen.append((task, outcome, task_id))

    signals.task_deduplicated.connect(receiver, weak=False)
    yield seen
    signals.task_deduplicated.disconnect(receiver)


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()

"""Helpers to test code that uses zklocks against real ZooKeeper servers.

``zklocks.testing.server`` starts servers and ensembles; ``zklocks.testing.pytest_plugin`` offers fixtures:
add ``pytest_plugins = ["zklocks.testing.pytest_plugin"]`` to your conftest.py.
"""

from .server import ZkEnsemble, ZkServer, expire_session, four_letter, free_port, mntr

__all__ = ["ZkServer", "ZkEnsemble", "expire_session", "four_letter", "free_port", "mntr"]

"""Helpers to test code that uses zklocks against real ZooKeeper servers.

``zklocks.testing.server`` starts servers and ``zklocks.testing.ensemble`` ensembles;
``zklocks.testing.pytest_plugin`` offers fixtures: add ``pytest_plugins = ["zklocks.testing.pytest_plugin"]`` to
your conftest.py. ``python -m zklocks.testing.server`` runs a local ZooKeeper for development.

The names load on first use, so that ``python -m zklocks.testing.server`` runs the module only once.
"""

from typing import Any

__all__ = ["ZkServer", "ZkEnsemble", "ZkStartError", "expire_session", "four_letter", "free_port", "mntr"]


def __getattr__(name: str) -> Any:
    if name == "ZkEnsemble":
        from .ensemble import ZkEnsemble

        return ZkEnsemble
    if name in __all__:
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

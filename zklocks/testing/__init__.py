"""Helpers to test code that uses zklocks against real ZooKeeper servers: the public test API, the pytest plugin
(``pytest_plugin``), ZkServer (``server``), ZkEnsemble with its link faults between servers (``ensemble``, ``links``)
and TcpProxy (``proxy``: link faults between a client and a server). docs/testing.md and docs/api.md describe all but
TcpProxy. The other modules serve these; what only this project's own suite needs (Redis, Apache Curator contenders) is
in its ``tests/support``.

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

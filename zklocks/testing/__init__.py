"""Helpers to test code that uses zklocks against real ZooKeeper servers: the public test API.

- ``zklocks.testing.pytest_plugin``: fixtures (a session-wide server, ``settings.ZKLOCKS`` per test, ensembles,
  session expiry); add ``pytest_plugins = ["zklocks.testing.pytest_plugin"]`` to your conftest.py.
- ``zklocks.testing.server``: :class:`ZkServer` (with ``seed()`` snapshots), ``expire_session``, the four-letter
  words, ``free_port``; ``python -m zklocks.testing.server`` runs a local ZooKeeper for development.
- ``zklocks.testing.ensemble``: :class:`ZkEnsemble`, with link faults between its servers
  (``server_links=True``, ``zklocks.testing.links``).
- ``zklocks.testing.proxy``: :class:`TcpProxy`, link faults between a client and a server.

The other modules serve these. What only this project's own suite needs (Redis, Apache Curator contenders) is
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

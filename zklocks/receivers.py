"""Receivers wired in AppConfig.ready()."""

from __future__ import annotations

from . import conf
from .celery import conf as celery_conf
from .client.pools import connections
from .handles.stopping import query_checkpoint


def on_setting_changed(*, setting: str, **kwargs) -> None:
    """``override_settings(ZKLOCKS=...)`` takes effect: forget the config and rebuild sessions lazily."""
    if setting in ("ZKLOCKS", "SECRET_KEY", "SECRET_KEY_FALLBACKS"):  # the last two: the derived identity
        conf.reset()
        celery_conf.reset_beat()  # USING is checked against the aliases
        connections.close_all(wait=True)
    elif setting == "ZKLOCKS_CELERY":
        celery_conf.reset()
    elif setting == "ZKLOCKS_BEAT":
        celery_conf.reset_beat()


def on_connection_created(*, connection, **kwargs) -> None:
    """Every database connection gets the checkpoint of ``on_lost="cancel"``: a query of a stopped holder raises
    LockLost instead of running (handles/stopping.py)."""
    if query_checkpoint not in connection.execute_wrappers:
        # First, the outermost: Django's execute_wrapper() context manager pops the last entry as it leaves, and
        # a connection opened inside one must not lose the user's wrapper instead of keeping ours.
        connection.execute_wrappers.insert(0, query_checkpoint)

"""Receivers wired in AppConfig.ready()."""

from __future__ import annotations

from . import conf
from .celery import conf as celery_conf
from .client.pools import connections


def on_setting_changed(*, setting: str, **kwargs) -> None:
    """``override_settings(ZKLOCKS=...)`` takes effect: forget the config and rebuild sessions lazily."""
    if setting == "ZKLOCKS":
        conf.reset()
        celery_conf.reset_beat()  # USING is checked against the aliases
        connections.close_all(wait=True)
    elif setting == "ZKLOCKS_CELERY":
        celery_conf.reset()
    elif setting == "ZKLOCKS_BEAT":
        celery_conf.reset_beat()

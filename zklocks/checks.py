"""Django system checks for settings.ZKLOCKS and for lock decorators that name an unknown alias.

Stable ids: zklocks.E001 (no/invalid ZKLOCKS), E002 (alias not a dict / bad alias key), E003 (HOSTS),
E004 (NAMESPACE), E005 (SESSION_TIMEOUT), E006 (CONNECT_TIMEOUT), E007 (POOL_SIZE), E008 (AUTH),
E009 (OPTIONS), E010 (READ_ACL), E011 (REAP_INTERVAL), E012 (decorator or task uses an unknown alias),
W001 (unknown option).
"""

from __future__ import annotations

from django.core import checks

from . import conf

# (alias, where) recorded by decorators at import time, so a typo is caught by `manage.py check`.
declared_aliases: list[tuple[str, str]] = []


def check_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    _, problems = conf.validate(_raw_setting())
    messages: list[checks.CheckMessage] = []
    for p in problems:
        cls = checks.Warning if p.id.startswith("zklocks.W") else checks.Error
        messages.append(cls(p.msg, hint=p.hint, id=p.id))
    raw = _raw_setting()
    known = set(raw) if isinstance(raw, dict) else set()
    for alias, where in dict.fromkeys(declared_aliases):
        if alias not in known and alias != conf.DEFAULT_ALIAS:  # a missing 'default' is E001 already
            messages.append(checks.Error(
                f"{where} uses the zklocks alias {alias!r}, which settings.ZKLOCKS does not define.",
                hint=f"Define ZKLOCKS[{alias!r}] or pass one of: {', '.join(sorted(known)) or 'none'}.",
                id="zklocks.E012",
            ))
    return messages


def _raw_setting():
    from django.conf import settings

    return getattr(settings, "ZKLOCKS", None)

"""System checks of configurations that open a hole: nested namespaces (zklocks.E042, pure: settings only) and the
metrics or health view answering an anonymous ``OPTIONS`` request through the whole middleware stack in a
deployment (zklocks.W070, a deploy check). See docs/security.md, "Nested namespaces" and "Metrics and health pages".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from django.core import checks

from .. import conf


def nested_namespaces(configs: dict[str, conf.AliasConfig]) -> list[checks.CheckMessage]:
    """E042: an alias whose NAMESPACE lies inside another alias's on a server they share (docs/security.md, "Nested
    namespaces"; its first use is refused too, in client/pools.py, since gunicorn and Celery never run checks)."""
    out: list[checks.CheckMessage] = []
    for alias, other in conf.nested(configs, resolve=True):
        cfg, ocfg = configs[alias], configs[other]
        out.append(
            checks.Error(
                f"ZKLOCKS[{alias!r}]: NAMESPACE {cfg.namespace!r} lies inside alias {other!r}'s NAMESPACE "
                f"{ocfg.namespace!r} on the same ZooKeeper servers: each alias takes the other's nodes for its "
                "own locks, and their reapers delete them (a holder gets LockLost).",
                hint="Give every alias a NAMESPACE that is neither inside nor above another alias's, e.g. "
                '"/zklocks/web" and "/zklocks/reports" (siblings), or one NAMESPACE shared by both aliases.',
                id="zklocks.E042",
            )
        )
    return out


# -- W070: the metrics and health views --

PROTECT_HINT = (
    'Wrap the view in an access check, e.g. path("ht/", staff_member_required(HealthCheckView.as_view(...))) '
    "(django.contrib.admin.views.decorators), or serve it only where your monitoring reaches it (an internal "
    'port or a proxy rule) and add "zklocks.W070" to SILENCED_SYSTEM_CHECKS. See docs/security.md.'
)


def _target(callback: Any) -> str | None:
    """'metrics' or 'health' for a URL callback that ends in zklocks' metrics view or a health view running the
    ZooKeeper check, whatever decorators wrap it; else None."""
    from .. import views

    seen = 0
    func = callback
    while func is not None and seen < 50:
        if func is views.metrics:
            return "metrics"
        view_class = getattr(func, "view_class", None)
        if view_class is not None and _is_health_view(view_class, getattr(func, "view_initkwargs", {})):
            return "health"
        func = getattr(func, "__wrapped__", None)
        seen += 1
    return None


def _is_health_view(view_class: type, initkwargs: dict) -> bool:
    try:
        from health_check.views import HealthCheckView
    except ImportError:  # pragma: no cover - the extra is not installed
        return False
    if not issubclass(view_class, HealthCheckView):
        return False
    listed = initkwargs.get("checks", getattr(view_class, "checks", ()))
    return "ZooKeeperHealthCheck" in repr(list(listed))


_PLAIN_REGEX = re.compile(r"^\^?([A-Za-z0-9_./\-]*)\$?\Z")


def _literal(pattern: Any) -> str | None:
    """The path a URL pattern matches when it has no parameters, else None."""
    from django.urls.resolvers import RegexPattern, RoutePattern

    if isinstance(pattern, RoutePattern):
        route = str(pattern)
        return None if "<" in route else route
    if isinstance(pattern, RegexPattern):
        found = _PLAIN_REGEX.match(str(pattern))
        return found.group(1).replace("\\", "") if found else None
    return None


def _walk(patterns: list, prefix: str = "") -> Iterator[tuple[str, str]]:
    from django.urls import URLPattern, URLResolver

    for entry in patterns:
        piece = _literal(entry.pattern)
        if piece is None:
            continue
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + piece)
        elif isinstance(entry, URLPattern):
            what = _target(entry.callback)
            if what is not None:
                yield "/" + prefix + piece, what


def _host() -> str | None:
    from django.conf import settings

    for host in settings.ALLOWED_HOSTS:
        if host == "*":
            return "localhost"
        host = host.lstrip(".")
        if host and "*" not in host:
            return host
    return None


def exposed_views() -> list[tuple[str, str, int]]:
    """(path, 'metrics' or 'health', status) for each such view that answers an anonymous OPTIONS with 2xx."""
    from django.test import Client
    from django.urls import get_resolver

    host = _host()
    if host is None:
        return []  # no host is allowed: no request reaches any view
    client = Client(raise_request_exception=False, HTTP_HOST=host)
    found = []
    for path, what in _walk(get_resolver().url_patterns):
        status = client.options(path, secure=True).status_code
        if 200 <= status < 300:
            found.append((path, what, status))
    return found


def check_exposed_views(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Deploy check W070 (only with DEBUG off): the metrics or health view reachable without access control."""
    from django.conf import settings

    if settings.DEBUG:
        return []
    names = {"metrics": "zklocks' metrics view", "health": "the ZooKeeper health check"}
    return [
        checks.Warning(
            f"{path} ({names[what]}) answers anonymous requests: anyone who reaches the site reads "
            + (
                "every lock family, alias and session count."
                if what == "metrics"
                else "the state of ZooKeeper "
                "and, with ZKLOCKS_HEALTH['MAX_HOLD_SECONDS'], which locks are held too long."
            ),
            hint=PROTECT_HINT,
            id="zklocks.W070",
        )
        for path, what, _status in exposed_views()
    ]

"""``ZkUnavailableMiddleware``: a view that lets ZkUnavailable escape answers 503 with Retry-After, not 500
(docs/locks.md, "When ZooKeeper is down"): an outage, not a bug, so clients and load balancers should retry later.
It logs a warning (logger ``zklocks``) with the request's method and path; every other exception goes on as before.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpResponse

from .exceptions import ZkUnavailable

log = logging.getLogger("zklocks")


class ZkUnavailableMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, ZkUnavailable):
            return None
        # %r: the path is the client's, and a newline in it would forge a log line
        log.warning("zklocks: ZooKeeper unavailable for %s %r: %s", request.method, request.path, exception)
        response = HttpResponse(
            "ZooKeeper is unavailable; try again shortly.\n", status=503, content_type="text/plain; charset=utf-8"
        )
        response["Retry-After"] = str(retry_after())
        return response


def retry_after() -> int:
    """The configured Retry-After, or 5 when it is not a whole number of seconds (manage.py check reports it as
    zklocks.E054): a bad setting must not turn the outage's 503 into a 500."""
    value = getattr(settings, "ZKLOCKS_UNAVAILABLE_RETRY_AFTER", 5)
    if not is_seconds(value):
        log.error("zklocks: ZKLOCKS_UNAVAILABLE_RETRY_AFTER=%r is not a number of seconds; sending 5", value)
        return 5
    return value


def is_seconds(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

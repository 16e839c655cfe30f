"""Views for projects to mount: ``path("metrics", zklocks.views.metrics)``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from .contrib import metrics as _metrics


def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition (of every process in prometheus_client's multiprocess mode).

    Serves the whole default registry, so a project without django-prometheus gets its other metrics too.
    ``OPTIONS`` builds no exposition (the deploy check zklocks.W070 asks with it whether anyone may call the view).
    """
    if request.method == "OPTIONS":
        return HttpResponse(headers={"Allow": "GET, HEAD, OPTIONS"})
    try:
        body, content_type = _metrics.exposition()
    except RuntimeError as exc:
        return HttpResponse(str(exc), status=501, content_type="text/plain")
    return HttpResponse(body, content_type=content_type)

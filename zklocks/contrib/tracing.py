"""OpenTelemetry spans of acquires (``zklocks.acquire``), when opentelemetry-api is installed (a no-op otherwise);
``settings.ZKLOCKS_TRACING = False`` turns them off. Attributes: docs/observability.md, "Tracing (OpenTelemetry)".
"""

from __future__ import annotations

from typing import Any

from ..client import observe

try:
    from opentelemetry import trace
except ImportError:  # pragma: no cover - opentelemetry-api is not installed
    trace = None  # type: ignore[assignment]

SPAN_NAME = "zklocks.acquire"


class Tracing(observe.Observer):
    def __init__(self, tracer_provider: Any = None) -> None:
        if trace is None:
            raise RuntimeError("zklocks tracing needs opentelemetry-api")
        from .. import __version__

        self.tracer = trace.get_tracer("zklocks", __version__, tracer_provider=tracer_provider)

    def acquire_started(self, attempt: observe.Attempt) -> Any:
        return self.tracer.start_span(
            SPAN_NAME,
            attributes={
                "zklocks.lock.name": attempt.name,
                "zklocks.lock.alias": attempt.alias,
                "zklocks.lock.kind": str(attempt.kind),
            },
        )

    def acquire_ended(self, attempt: observe.Attempt, span: Any) -> None:
        if span is None:
            return
        if not span.is_recording():
            span.end()  # a non-recording span (no tracer provider): its attributes would go nowhere
            return
        span.set_attribute("zklocks.result", attempt.result or "")
        span.set_attribute("zklocks.wait_seconds", attempt.wait)
        if attempt.token is not None:
            span.set_attribute("zklocks.token", attempt.token)
        if attempt.result == observe.UNAVAILABLE and attempt.error is not None:
            span.record_exception(attempt.error)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(attempt.error)))
        span.end()


_installed: Tracing | None = None


def install() -> Tracing | None:
    """Trace acquires from now on, if opentelemetry-api is importable and ZKLOCKS_TRACING is not False."""
    global _installed
    from django.conf import settings

    if trace is None or getattr(settings, "ZKLOCKS_TRACING", True) is False:
        return None
    if _installed is None:
        _installed = Tracing()
        observe.register(_installed)
    return _installed

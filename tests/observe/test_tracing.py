"""OpenTelemetry spans of acquires, recorded by the SDK's in-memory exporter."""

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.threads import in_thread
from zklocks import ZkUnavailable, zk_lock, zk_semaphore
from zklocks.client import observe
from zklocks.contrib.tracing import Tracing

pytestmark = pytest.mark.zk


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider)
    observe.register(tracing)
    yield exporter, provider.get_tracer("test")
    observe.unregister(tracing)


def acquires(exporter):
    return [s for s in exporter.get_finished_spans() if s.name == "zklocks.acquire"]


def test_acquire_span_nested_under_the_current_span(spans):
    exporter, tracer = spans
    with tracer.start_as_current_span("task") as parent:
        with zk_lock("orders/7") as lock:
            token = lock.token
            assert in_thread(zk_lock("orders/7").acquire, False) is False  # not nested: another thread
    (acquired, refused) = sorted(acquires(exporter), key=lambda s: s.attributes["zklocks.result"])
    assert acquired.parent.span_id == parent.get_span_context().span_id
    assert acquired.context.trace_id == parent.get_span_context().trace_id
    assert dict(acquired.attributes) == {
        "zklocks.lock.name": "orders/7",
        "zklocks.lock.alias": "default",
        "zklocks.lock.kind": "exclusive",
        "zklocks.result": "acquired",
        "zklocks.token": token,
        "zklocks.wait_seconds": acquired.attributes["zklocks.wait_seconds"],
    }
    assert 0 <= acquired.attributes["zklocks.wait_seconds"] < 5
    assert refused.attributes["zklocks.result"] == "not_acquired"
    assert "zklocks.token" not in refused.attributes
    assert refused.parent is None


def test_timeout_semaphore_and_unavailable(spans, zklocks_settings):
    exporter, _ = spans
    with zk_semaphore("pool", 1):
        assert in_thread(zk_semaphore("pool", 1, timeout=0.3).acquire) is False
    results = {(s.attributes["zklocks.lock.kind"], s.attributes["zklocks.result"]) for s in acquires(exporter)}
    assert results == {("semaphore", "acquired"), ("semaphore", "timeout")}
    timed_out = next(s for s in acquires(exporter) if s.attributes["zklocks.result"] == "timeout")
    assert timed_out.attributes["zklocks.wait_seconds"] >= 0.25
    exporter.clear()
    zklocks_settings(HOSTS="127.0.0.1:1", CONNECT_TIMEOUT=0.3)
    with pytest.raises(ZkUnavailable):
        zk_lock("x").acquire()
    (span,) = acquires(exporter)
    assert span.attributes["zklocks.result"] == "unavailable"
    assert not span.status.is_ok
    assert span.events[0].name == "exception"


def test_async_acquire_is_nested_too(spans):
    import asyncio

    exporter, tracer = spans

    async def main():
        with tracer.start_as_current_span("request") as parent:
            async with zk_lock("async/1"):
                pass
        return parent

    parent = asyncio.run(main())
    (span,) = acquires(exporter)
    assert span.parent.span_id == parent.get_span_context().span_id

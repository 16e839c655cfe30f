"""Optional integrations: Prometheus metrics and OpenTelemetry tracing."""

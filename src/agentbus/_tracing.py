"""OpenTelemetry spans for sending, handling and plan steps: the ``otel`` extra, opt-in.

Off (the default), nothing of OpenTelemetry is imported and each hook is one ``None``
check. On (``AGENTBUS_TRACING=1``), spans follow OpenTelemetry's messaging conventions
and link across processes through the envelope's ``metadata.trace`` (a W3C
traceparent): each span's own traceparent goes on what is sent under it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from agentbus._exceptions import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "child_trace",
    "disable_tracing",
    "enable_tracing",
    "end_span",
    "start_span",
    "tracing_enabled",
]

_SYSTEM: Final = "rabbitmq"
_tracer: Tracer | None = None


def enable_tracing(
    provider: TracerProvider | None = None, *, trace_file: str | None = None
) -> None:
    """Create spans from now on, with ``provider`` (default: OpenTelemetry's global one).

    ``trace_file`` sets up a provider that appends each finished span to that file as a
    JSON line (for tests and for looking; production sends OTLP through the global one).

    Raises:
        ConfigurationError: OpenTelemetry is not installed (``pip install 'agentbus[otel]'``).
    """
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ConfigurationError(
            "tracing needs OpenTelemetry: pip install 'agentbus[otel]'"
        ) from exc
    if trace_file is not None:
        provider = _file_provider(trace_file)
    _tracer = trace.get_tracer("agentbus", tracer_provider=provider)


def disable_tracing() -> None:
    """Stop creating spans."""
    global _tracer
    _tracer = None


def tracing_enabled() -> bool:
    """Whether spans are being created."""
    return _tracer is not None


def start_span(name: str, kind: str, parent: str | None, attributes: dict[str, Any]) -> Span | None:
    """Start a span under the W3C traceparent ``parent``; None when tracing is off.

    ``kind`` is ``producer``, ``consumer`` or ``internal``.
    """
    if _tracer is None:
        return None
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = None
    if parent is not None:
        context = TraceContextTextMapPropagator().extract({"traceparent": parent})
    return _tracer.start_span(
        name,
        context=context,
        kind=SpanKind[kind.upper()],
        attributes={"messaging.system": _SYSTEM, **attributes},
    )


def child_trace(span: Span | None, trace: str | None) -> str | None:
    """The traceparent to send under ``span``: its own, or ``trace`` when there is none."""
    if span is None:
        return trace
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def end_span(span: Span | None, outcome: str = "success") -> None:
    """End ``span``, marked as an error unless ``outcome`` is ``success``."""
    if span is None:
        return
    if outcome != "success":
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", outcome)
        span.set_status(Status(StatusCode.ERROR, outcome))
    span.end()


def _file_provider(path: str) -> TracerProvider:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class _JsonLines(SpanExporter):
        def __init__(self) -> None:
            self._lock = threading.Lock()

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            lines = [json.dumps(_span_record(span)) + "\n" for span in spans]
            with self._lock, Path(path).open("a", encoding="utf-8") as out:
                out.writelines(lines)
            return SpanExportResult.SUCCESS

    provider = SdkTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_JsonLines()))
    return provider


def _span_record(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    parent = span.parent
    return {
        "name": span.name,
        "kind": span.kind.name.lower(),
        "trace_id": f"{context.trace_id:032x}" if context else None,
        "span_id": f"{context.span_id:016x}" if context else None,
        "parent_span_id": f"{parent.span_id:016x}" if parent else None,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name.lower(),
    }

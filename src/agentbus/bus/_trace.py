"""The trace context of the request being served, handed on to what its handler sends."""

from __future__ import annotations

import contextvars

__all__ = ["bind_trace", "current_trace"]

_trace: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentbus_trace", default=None)


def bind_trace(trace: str | None) -> None:
    """Make ``trace`` (a W3C traceparent) the current context's: the delivery's own task."""
    _trace.set(trace)


def current_trace() -> str | None:
    """The trace of the request being served here, if any: requests and events sent while
    serving it carry it on (``metadata.trace``), and a plan hands it to its subtasks."""
    return _trace.get()

"""What a bus serves and listens to: its request handler, service, broadcasts and events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeAlias

from agentbus._topology import topic_matches
from agentbus.envelopes import EventEnvelope, RequestEnvelope

__all__ = ["EventHandler", "RequestHandler", "Routes"]

RequestHandler: TypeAlias = Callable[[RequestEnvelope], Awaitable[Any]]
"""Serves a request: returns the result (or a ready reply envelope), or raises."""

EventHandler: TypeAlias = Callable[[EventEnvelope], Awaitable[None]]
"""Receives an event."""


class Routes:
    """The bus's table of what it serves, filled by ``serve`` and ``subscribe``.

    The bus owns it and the dispatcher reads it, delivery by delivery: serving starts
    after the bus opens, so the table changes while deliveries come in.
    """

    def __init__(self) -> None:
        self.handler: RequestHandler | None = None
        self.acks_early: Callable[[RequestEnvelope], bool] | None = None
        self.service: str | None = None
        self.broadcast_actions: set[str] = set()
        self.accepting = True
        self._events: list[tuple[str, EventHandler]] = []

    def __repr__(self) -> str:
        return (
            f"<Routes service={self.service!r} serving={self.handler is not None} "
            f"events={len(self._events)} accepting={self.accepting}>"
        )

    def serve(
        self, handler: RequestHandler, acks_early: Callable[[RequestEnvelope], bool] | None
    ) -> None:
        """Answer requests with ``handler``; ``acks_early`` picks those acked as they start."""
        self.handler = handler
        self.acks_early = acks_early

    def subscribe(self, pattern: str, handler: EventHandler) -> None:
        """Deliver events whose routing key matches ``pattern`` to ``handler``."""
        self._events.append((pattern, handler))

    def event_handlers(self, routing_key: str) -> Iterator[EventHandler]:
        """Yield the handlers subscribed to ``routing_key``, in the order they subscribed."""
        for pattern, handler in self._events:
            if topic_matches(pattern, routing_key):
                yield handler

    def acks_before_work(self, request: RequestEnvelope) -> bool:
        """Whether ``request`` is acknowledged as its work starts (long work)."""
        return self.acks_early is not None and self.acks_early(request)

"""Lifecycle state and counters of a bus."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Protocol

__all__ = ["BusState", "BusStats", "LatencyObserver"]


class LatencyObserver(Protocol):
    """Receives timings as they happen (Prometheus histograms: ``agentbus.Metrics``)."""

    def observe_request(self, action: str, outcome: str, seconds: float) -> None: ...

    def observe_handler(self, action: str, outcome: str, seconds: float) -> None: ...


class BusState(enum.Enum):
    """Where a bus is in its life."""

    NEW = "new"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(slots=True)
class BusStats:
    """Counters of what a bus has done since it opened."""

    published: int = 0
    publish_retries: int = 0
    consumed: int = 0
    requests_served: int = 0
    handler_errors: int = 0
    replies_matched: int = 0
    late_replies: int = 0
    unknown_replies: int = 0
    progress_replies: int = 0
    replies_dropped: int = 0
    duplicates: int = 0
    dedup_waits: int = 0
    """Copies of a request that waited for its run in another process (shared store)."""
    dedup_unavailable: int = 0
    """Calls to the shared de-duplication store that failed: the request was served on
    this process's window alone (fail open)."""
    expired_requests: int = 0
    dead_lettered: int = 0
    poison_dead_lettered: int = 0
    """Deliveries returned to a classic service queue more times than the delivery limit."""
    settle_failures: int = 0
    refused: int = 0
    """Deliveries refused by admission (CC/BCC, routing key, receiver, sender identity)."""
    rate_limited: int = 0
    """Requests answered ``rate_limited``: their sender was over its rate."""
    no_instance: int = 0
    """Requests failed early because nothing consumed the receiver's queue."""
    connections: int = 0
    """Connections made to the broker: the first, then one per reconnect."""
    node: str | None = None
    """The broker node (masked URL) the bus is, or last was, connected to."""
    published_by_type: Counter[str] = field(default_factory=Counter)
    consumed_by: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Deliveries by (message type, outcome)."""
    errors_sent: Counter[str] = field(default_factory=Counter)
    errors_received: Counter[str] = field(default_factory=Counter)
    refused_by: Counter[str] = field(default_factory=Counter)
    """Refused deliveries by reason (``agentbus.security.Refusal``)."""
    observer: LatencyObserver | None = None

    def as_dict(self) -> dict[str, int]:
        """Return the plain counters as a dict."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.type == "int"}

"""Lifecycle state and counters of a bus."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass

__all__ = ["BusState", "BusStats"]


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
    expired_requests: int = 0
    dead_lettered: int = 0
    settle_failures: int = 0

    def as_dict(self) -> dict[str, int]:
        """Return the counters as a plain dict."""
        return asdict(self)

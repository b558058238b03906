"""Feeds: high-rate messages taken raw and unacknowledged from a bounded queue of one's own.

Some messages are stale soon and said again soon: a heartbeat expires after a few
intervals, and the next one a second later says the same. Losing one is harmless, so a
feed skips the general path (a task per delivery, a full envelope validation, an ack
each): its queue is exclusive, unacknowledged and bounded (the oldest go first), and
each body is parsed once and handed over as a JSON object. Admission's identity checks
(``identity_refusal``) still apply, so a feed takes nothing a bus would refuse for
how it was sent.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import orjson

from agentbus._logging import get_logger
from agentbus.bus._stats import BusStats
from agentbus.security import identity_refusal

__all__ = ["DEFAULT_FEED_LENGTH", "Feed", "FeedHandler", "FeedState", "FeedStats"]

DEFAULT_FEED_LENGTH: Final = 100_000
"""How many messages a feed's queue holds before dropping the oldest."""

SHARED_FEED_EXPIRES: Final = 60.0
"""Seconds a shared feed's queue outlives its last consumer."""

FeedHandler: TypeAlias = Callable[[dict[str, Any]], None]
"""Takes each message's JSON object (parsed, not validated as an envelope); runs synchronously."""

_log = get_logger("agentbus.bus")


class FeedState(enum.Enum):
    """Where a feed is in its life."""

    OPEN = "open"
    CLOSED = "closed"


@dataclass(slots=True)
class FeedStats:
    """Counters of one feed."""

    received: int = 0
    invalid: int = 0
    """Messages that were not a JSON object: dropped."""
    refused: int = 0
    """Messages refused by admission (CC/BCC, sender identity): dropped."""


class Feed:
    """A pattern-bound feed a bus consumes; made by ``consume_feed``, closed with the bus."""

    def __init__(
        self,
        *,
        name: str,
        pattern: str,
        queue: str,
        handler: FeedHandler,
        verify_sender: bool,
        bus_stats: BusStats,
        shared: bool = False,
    ) -> None:
        self.name = name
        self.shared = shared
        """Whether the queue is shared by the instances of a service, each taking a part."""
        self.pattern = pattern
        self.queue = queue
        self.stats = FeedStats()
        self._handler = handler
        self._verify_sender = verify_sender
        self._bus_stats = bus_stats
        self._state = FeedState.OPEN
        self._stop: Callable[[], Awaitable[None]] | None = None

    def __repr__(self) -> str:
        return f"<Feed {self.name!r} pattern={self.pattern!r} state={self._state.value}>"

    @property
    def state(self) -> FeedState:
        """The feed's lifecycle state."""
        return self._state

    async def aclose(self) -> None:
        """Stop consuming the feed; its queue goes with the bus's connection."""
        if self._state is FeedState.CLOSED:
            return
        self._state = FeedState.CLOSED
        stop, self._stop = self._stop, None
        if stop is not None:
            await stop()

    def take(self, body: bytes, headers: Mapping[str, object] | None, user_id: str | None) -> None:
        """Admit one message and hand its JSON object to the handler (transports call this)."""
        if self._state is FeedState.CLOSED:
            return
        self.stats.received += 1
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            self.stats.invalid += 1
            _log.warning("feed message dropped", feed=self.name, error="not a JSON object")
            return
        reason = identity_refusal(
            headers, user_id, data.get("sender_id"), verify_sender=self._verify_sender
        )
        if reason is not None:
            self.stats.refused += 1
            self._bus_stats.refused += 1
            self._bus_stats.refused_by[reason] += 1
            _log.warning(
                "feed message refused",
                feed=self.name,
                reason=reason.value,
                sender_id=data.get("sender_id"),
                user_id=user_id,
            )
            return
        try:
            self._handler(data)
        except Exception:
            _log.exception("feed handler failed", feed=self.name)

    def _started(self, stop: Callable[[], Awaitable[None]]) -> None:
        self._stop = stop

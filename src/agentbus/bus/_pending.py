"""Requests in flight: one future per correlation id, and a memory of late ones."""

from __future__ import annotations

import asyncio
import enum
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from agentbus._logging import get_logger
from agentbus.envelopes import ErrorEnvelope, Question, ResponseEnvelope

__all__ = ["PendingRequests", "ProgressCallback", "QuestionHandler", "Reply", "ReplyOutcome"]

Reply: TypeAlias = ResponseEnvelope | ErrorEnvelope
ProgressCallback: TypeAlias = Callable[[ResponseEnvelope], None]
"""Called with each ``in_progress`` response to a request still waiting."""
QuestionHandler: TypeAlias = Callable[[Question], Awaitable[Any]]
"""Awaited with a question a skill asks; returns the answer (``request(on_question=)``)."""

_log = get_logger("agentbus.bus")


class ReplyOutcome(enum.Enum):
    """What became of a reply handed to ``PendingRequests.resolve``."""

    MATCHED = "matched"
    LATE = "late"
    UNKNOWN = "unknown"
    PROGRESS = "progress"


class PendingRequests:
    """Futures of requests awaiting replies, keyed by the request's message id."""

    def __init__(self, late_memory: int = 10_000) -> None:
        self._futures: dict[str, asyncio.Future[Reply]] = {}
        self._progress: dict[str, ProgressCallback] = {}
        self._expired: OrderedDict[str, None] = OrderedDict()
        self._late_memory = late_memory

    def __len__(self) -> int:
        return len(self._futures)

    def add(
        self, message_id: str, on_progress: ProgressCallback | None = None
    ) -> asyncio.Future[Reply]:
        # A future made earlier (``expect``) may already hold a reply that came first.
        future = self._futures.get(message_id)
        if future is None or future.cancelled():
            future = asyncio.get_running_loop().create_future()
            self._futures[message_id] = future
        if on_progress is not None:
            self._progress[message_id] = on_progress
        return future

    def discard(self, message_id: str) -> None:
        """Forget a request that ended; a reply that still comes is counted late."""
        future = self._futures.pop(message_id, None)
        self._progress.pop(message_id, None)
        if future is None:
            return
        if not future.done() or future.cancelled():
            future.cancel()
            self._expired[message_id] = None
            if len(self._expired) > self._late_memory:
                self._expired.popitem(last=False)

    def resolve(self, reply: Reply) -> ReplyOutcome:
        correlation_id = reply.metadata.correlation_id
        if correlation_id is None:
            return ReplyOutcome.UNKNOWN
        future = self._futures.get(correlation_id)
        if future is None or future.done():
            return ReplyOutcome.LATE if correlation_id in self._expired else ReplyOutcome.UNKNOWN
        if isinstance(reply, ResponseEnvelope) and reply.payload.status == "in_progress":
            callback = self._progress.get(correlation_id)
            if callback is not None:
                try:
                    callback(reply)
                except Exception:
                    _log.exception("progress callback failed", correlation_id=correlation_id)
            return ReplyOutcome.PROGRESS
        future.set_result(reply)
        return ReplyOutcome.MATCHED

    def fail_all(self, exc: BaseException) -> None:
        """Fail every request still waiting (the bus is closing)."""
        for future in self._futures.values():
            if not future.done():
                future.set_exception(exc)
        self._futures.clear()
        self._progress.clear()

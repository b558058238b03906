"""The dead-letter board: what the queue holds, refreshed when its count moves; replay, discard.

The board watches the queue's length with a passive declare (it touches no message)
and looks at the messages again only when the length changes or someone asks. Every
replay and discard is logged (the audit trail) and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection
from typing import Any, Final

from agentbus._exceptions import AgentBusError
from agentbus._logging import get_logger
from agentbus.bus import DeadLetter, DeadLetters, Settled
from agentbus.envelopes import utcnow

__all__ = ["DeadLetterBoard"]

_WATCH_EVERY: Final = 1.0  # s between two looks at the queue's length
_SHOWN: Final = 200  # dead letters listed at most

_log = get_logger("agentbus.dashboard")


class DeadLetterBoard:
    """The dead-letter queue as the page shows it; ``None`` queue: not available here."""

    def __init__(
        self,
        queue: DeadLetters | None,
        *,
        on_change: Callable[[], None],
        watch_every: float = _WATCH_EVERY,
    ) -> None:
        self._queue = queue
        self._on_change = on_change
        self._watch_every = watch_every
        self._letters: list[DeadLetter] = []
        self._count: int | None = None
        self._error: str | None = None
        self._checked_at: str | None = None
        self._lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        self.replayed = 0
        self.discarded = 0

    async def start(self) -> None:
        if self._queue is not None:
            self._watcher = asyncio.create_task(self._watch_forever())

    async def aclose(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher

    def snapshot(self) -> dict[str, Any]:
        return {
            "available": self._queue is not None,
            "count": self._count,
            "shown": len(self._letters),
            "letters": [letter.model_dump(mode="json") for letter in self._letters],
            "replayed": self.replayed,
            "discarded": self.discarded,
            "error": self._error,
            "checked_at": self._checked_at,
        }

    async def refresh(self) -> None:
        """Look at the queue again (every message stays in it)."""
        queue = self._require_queue()
        async with self._lock:
            try:
                self._count = await queue.count()
                self._letters = await queue.browse(limit=_SHOWN)
                self._error = None
            except AgentBusError as exc:
                self._error = f"{type(exc).__name__}: {exc}"
            self._checked_at = utcnow().isoformat()
        self._on_change()

    async def replay(self, ids: Collection[str], *, by: str) -> Settled:
        """Republish the chosen dead letters once each to their original routing keys."""
        queue = self._require_queue()
        async with self._lock:
            settled = await queue.replay(ids)
        self.replayed += len(settled.done)
        for message_id in settled.done:
            _log.info("dead letter replayed", message_id=message_id, by=by)
        for message_id, reason in settled.failed.items():
            _log.warning("dead letter not replayed", message_id=message_id, reason=reason, by=by)
        await self.refresh()
        return settled

    async def discard(self, ids: Collection[str], *, by: str) -> Settled:
        """Remove the chosen dead letters for good."""
        queue = self._require_queue()
        async with self._lock:
            settled = await queue.discard(ids)
        self.discarded += len(settled.done)
        for message_id in settled.done:
            _log.info("dead letter discarded", message_id=message_id, by=by)
        await self.refresh()
        return settled

    def _require_queue(self) -> DeadLetters:
        if self._queue is None:
            raise AgentBusError("the dead-letter queue is not available on this transport")
        return self._queue

    async def _watch_forever(self) -> None:
        assert self._queue is not None
        while True:
            try:
                count = await self._queue.count()
                if count != self._count or self._error is not None:
                    await self.refresh()
            except Exception as exc:  # the board keeps watching whatever the broker said
                if self._error is None:
                    _log.warning("dead-letter queue not readable", error=str(exc))
                    self._error = f"{type(exc).__name__}: {exc}"
                    self._on_change()
            await asyncio.sleep(self._watch_every)

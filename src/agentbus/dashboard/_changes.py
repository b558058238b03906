"""What changed on the board: a version per topic, and a way to wait for the next change."""

from __future__ import annotations

import asyncio
import collections
from typing import Final

__all__ = ["TOPICS", "Changes"]

TOPICS: Final = ("agents", "questions", "plans", "schedules", "traffic", "dead_letters")


class Changes:
    """Counts changes per topic; each waiter learns which topics moved since it last looked."""

    def __init__(self) -> None:
        self._versions: collections.Counter[str] = collections.Counter()
        self._moved = asyncio.Event()

    def touch(self, topic: str) -> None:
        """Say that ``topic`` changed; wake every waiter."""
        self._versions[topic] += 1
        # A fresh event per generation: each waiter holds the one it waits on.
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def versions(self) -> dict[str, int]:
        return {topic: self._versions[topic] for topic in TOPICS}

    async def wait(self, seen: dict[str, int], timeout: float) -> list[str]:
        """Return the topics whose version is not ``seen``; wait up to ``timeout`` for one."""
        moved = self._moved
        changed = [topic for topic in TOPICS if self._versions[topic] != seen.get(topic)]
        if changed:
            return changed
        try:
            async with asyncio.timeout(timeout):
                await moved.wait()
        except TimeoutError:
            return []
        return [topic for topic in TOPICS if self._versions[topic] != seen.get(topic)]

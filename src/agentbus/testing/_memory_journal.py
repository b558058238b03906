"""A journal on the in-memory broker: what a RabbitMQ stream is to the real bus."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

__all__ = ["MemoryJournal"]


class MemoryJournal:
    """A journal on the in-memory broker: a list every bus on it shares."""

    def __init__(
        self, records: list[tuple[datetime, bytes]], clock: Callable[[], datetime]
    ) -> None:
        self._records = records
        self._clock = clock

    async def append(self, record: dict[str, Any]) -> None:
        """Add ``record`` at the end (as JSON: what is read back is a copy)."""
        self._records.append((self._clock(), orjson.dumps(record)))

    async def read(self, since: datetime) -> list[dict[str, Any]]:
        """Return, in order, the records appended since ``since``."""
        return [orjson.loads(body) for at, body in self._records if at >= since]

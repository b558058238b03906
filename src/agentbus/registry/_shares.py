"""Registries sharing the heartbeats: each takes a part, and tells the others what it heard.

Registries started with ``share`` consume one heartbeat feed together (the ``registry``
group's: each beat goes to one of them) and publish, every ``DIGEST_EVERY`` seconds,
what they heard: the common beat as a short row, any other beat (a card, a change) whole.
Each registry takes the others' digests as beats, so every one of them knows every agent,
while each parses only its part of the raw beats off the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from agentbus._exceptions import AgentBusError, BusClosed
from agentbus._logging import get_logger
from agentbus.bus import Transport

__all__ = ["DIGEST", "DIGEST_EVERY", "BeatDigests", "beats_of"]

DIGEST: Final = "registry_beats"
"""The event a sharing registry publishes with the beats it heard."""
DIGEST_EVERY: Final = 0.25  # s between a registry's digests
_ROWS_PER_DIGEST: Final = 2000  # beats per message at most: a digest stays a few hundred KB
_ROW: Final = ("agent_id", "seq", "status", "in_flight", "service", "interval", "capacity",
               "card_digest")  # fmt: skip

_log = get_logger("agentbus.registry")


class BeatDigests:
    """The beats one registry heard itself, published to the others every ``DIGEST_EVERY``."""

    def __init__(self, bus: Transport, lag: Callable[[], float]) -> None:
        self._bus = bus
        self._lag = lag  # how late this registry takes its beats: the others wait it out too
        self._rows: list[list[Any]] = []
        self._whole: list[Mapping[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._publish_forever())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def add(self, data: Mapping[str, Any], *, common: bool) -> None:
        """Keep a beat this registry took off its feed for the next digest: a ``common``
        one (a known agent's, its card unchanged) as a row of the values the table keeps."""
        if common:
            self._rows.append([data.get(key) for key in _ROW])
        else:
            self._whole.append(data)

    async def _publish_forever(self) -> None:
        while True:
            await asyncio.sleep(DIGEST_EVERY)
            rows, self._rows = self._rows, []
            whole, self._whole = self._whole, []
            for start in range(0, max(len(rows), len(whole)), _ROWS_PER_DIGEST):
                part_rows = rows[start : start + _ROWS_PER_DIGEST]
                part_beats = whole[start : start + _ROWS_PER_DIGEST]
                part = {"rows": part_rows, "beats": part_beats, "lag": self._lag()}
                try:  # a digest lost costs what a beat lost does: the next one says it again
                    await self._bus.emit(DIGEST, part, persistent=False, mandatory=False)
                except BusClosed:
                    return
                except AgentBusError as exc:
                    _log.warning("heartbeat digest not sent", error=str(exc))
                    continue
                self.sent += len(part_rows) + len(part_beats)


def beats_of(data: Mapping[str, Any], malformed: Callable[[str], None]) -> Iterator[dict[str, Any]]:
    """The beats in a digest's ``event_data``, as the heartbeats' ``event_data`` would be."""
    rows, whole = data.get("rows"), data.get("beats")
    if not isinstance(rows, list) or not isinstance(whole, list):
        malformed("a digest without rows and beats")
        return
    for row in rows:
        if isinstance(row, list) and len(row) == len(_ROW):
            yield {key: value for key, value in zip(_ROW, row, strict=True) if value is not None}
        else:
            malformed("a digest row of the wrong shape")
    for beat in whole:
        if isinstance(beat, dict):
            yield beat
        else:
            malformed("a digest beat that is not an object")

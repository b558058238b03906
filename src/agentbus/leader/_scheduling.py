"""A leader's schedule skills: ``schedule_add``, ``schedule_list``, ``schedule_remove``.

Any leader takes them: it journals the change (the schedules journal is the store) and
tells every leader (``schedule_changed``), so the one ticking takes it in at once.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from agentbus._exceptions import AgentBusError, InvalidParameters
from agentbus.agents import Agent, skill
from agentbus.bus import Journal
from agentbus.envelopes import EventEnvelope
from agentbus.leader._schedule import Schedule
from agentbus.leader._schedule_book import (
    JOURNAL,
    MAX_AGE,
    Book,
    Entry,
    ScheduleListing,
    ScheduleRemoved,
    ScheduleState,
    read_book,
    schedule_state,
)
from agentbus.leader._ticker import SCHEDULE_CHANGED, Ticker

__all__ = ["ScheduleSkills"]


class ScheduleSkills(Agent):
    """The leader's schedules: its skills, and the ticking it takes its turn at."""

    _ticker: Ticker | None = None
    _schedule_journal: Journal | None = None
    _heard: collections.deque[tuple[float, dict[str, Any]]] | None = None

    async def _start_schedules(self) -> None:
        if not self.settings.schedules:
            return
        journal = await self.bus.journal(JOURNAL, max_age=MAX_AGE)
        self._schedule_journal = journal
        self._heard = collections.deque(maxlen=256)
        self._ticker = Ticker(
            self.bus, journal, leader_id=self.id, service=self.name, replay=self._replay
        )
        await self.bus.subscribe(f"broadcast.event.{SCHEDULE_CHANGED}", self._on_changed)
        await self._ticker.start()

    async def on_stop(self) -> None:
        if self._ticker is not None:
            await self._ticker.aclose()

    @skill
    async def schedule_add(self, schedule: Schedule, replace: bool = False) -> ScheduleState:
        """Add a schedule: a plan or a request run every N seconds, on a cron expression,
        or once; kept in the leaders' journal, each tick run once by one leader."""
        ticker = self._ticker_()
        book = await self._book()
        if schedule.name in book.entries and not replace:
            raise InvalidParameters(
                f"a schedule {schedule.name!r} exists (replace it with replace: true)",
                details={"name": schedule.name},
            )
        added = round(time.time() * 1000)
        fixed = schedule.fixed(added / 1000)
        dumped = fixed.model_dump(mode="json", by_alias=True, exclude_none=True)
        record = {"kind": "added", "schedule": dumped, "added": added}
        await ticker.writer.write(record)
        await self._tell_change(record)
        return schedule_state(Entry(fixed, added))

    @skill
    async def schedule_list(self) -> ScheduleListing:
        """Every schedule: its next tick and its last runs."""
        ticker = self._ticker_()
        book = await self._book()
        states = [schedule_state(entry) for entry in book.entries.values()]
        return ScheduleListing(leader=self.id, ticking=ticker.is_ticking, schedules=states)

    @skill
    async def schedule_remove(self, name: str) -> ScheduleRemoved:
        """Remove the schedule ``name``: no tick of it runs from now on."""
        ticker = self._ticker_()
        book = await self._book()
        entry = book.entries.get(name)
        if entry is None:
            return ScheduleRemoved(name=name, removed=False)
        record = {"kind": "removed", "name": name, "added": entry.added, "reason": "removed"}
        await ticker.writer.write(record)
        await self._tell_change(record)
        return ScheduleRemoved(name=name, removed=True)

    async def _tell_change(self, record: dict[str, Any]) -> None:
        self._heard_(record)
        change = "added" if record["kind"] == "added" else "removed"
        data = {"name": record.get("name") or record["schedule"]["name"], "change": change}
        await self.bus.emit(SCHEDULE_CHANGED, data | {"record": record}, mandatory=False)

    async def _on_changed(self, event: EventEnvelope) -> None:
        record = event.payload.event_data.get("record")
        if isinstance(record, dict) and record.get("kind") in ("added", "removed"):
            self._heard_(record)

    def _heard_(self, record: dict[str, Any]) -> None:
        if self._heard is not None:
            self._heard.append((time.monotonic(), record))
        if self._ticker is not None:
            self._ticker.changed(record)

    def _replay(self, book: Book, since: float) -> None:
        # After a read-back begun at ``since``: a change heard meanwhile may not have been
        # in what was read (what was written before the read began was).
        for at, record in self._heard or ():
            if at >= since:
                book.apply(record)

    async def _book(self) -> Book:
        ticker = self._ticker_()
        if ticker.book is not None:
            return ticker.book
        assert self._schedule_journal is not None
        began = time.monotonic()
        book = await read_book(self._schedule_journal)
        self._replay(book, began)
        return book

    def _ticker_(self) -> Ticker:
        if self._ticker is None:
            raise AgentBusError(f"{self!r} runs no schedules (the schedules setting is off)")
        return self._ticker

"""The schedules as the leaders' journal keeps them: added, removed, each tick fired.

One stream (``<exchange>.journal.schedules``) every leader reads back. A tick is
journaled (``fire``) before its run goes out and noted (``sent``) once it has: a leader
taking the ticking over finds what was fired, and sends again (under the same message
id, so de-duplication catches a copy) a tick whose run may not have gone. The ticking
leader writes a ``snapshot`` of every schedule now and then: a reader starts from the
latest one.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pydantic import BaseModel

from agentbus.bus import Journal
from agentbus.leader._schedule import Due, Schedule

__all__ = [
    "JOURNAL",
    "Book",
    "Entry",
    "ScheduleListing",
    "ScheduleRemoved",
    "ScheduleRun",
    "ScheduleState",
    "ScheduleWriter",
    "read_book",
    "schedule_state",
]

JOURNAL: Final = "schedules"
"""The journal leaders keep schedules in (``<exchange>.journal.schedules``)."""
MAX_AGE: Final = "7D"
"""How long the journal keeps a record: the longest all leaders may be gone."""
_WINDOW: Final = timedelta(minutes=15)  # read back this far first: a snapshot is in it
_FULL: Final = timedelta(days=7)
_RUNS_KEPT: Final = 10


class ScheduleRun(BaseModel):
    """One tick of a schedule, run."""

    tick: datetime
    run_id: str
    """The id of the run: the plan's id (a plan, a task), or the request's message id."""
    leader: str
    lag: float | None = None
    """Seconds from the tick's time to its run sent (None: not known to have gone)."""
    error: str | None = None


@dataclass(slots=True)
class Entry:
    """A schedule, when it was added, and its ticks fired."""

    schedule: Schedule
    added: int
    last: int | None = None
    runs: collections.deque[ScheduleRun] = field(
        default_factory=lambda: collections.deque(maxlen=_RUNS_KEPT)
    )
    unsent: dict[int, str] = field(default_factory=dict)
    """Ticks journaled as fired with no word that their run went out: tick to run id."""
    checked: int | None = None
    """The latest tick the ticking leader looked at (run, or skipped as missed)."""

    def due(self, now: int) -> Due:
        """The ticks to run at ``now`` (ms); the next look starts after them."""
        due = self.schedule.due(self._cursor(), self.added, now)
        if due.through is not None:
            self.checked = max(due.through, self.checked or due.through)
        return due

    def next_tick(self) -> int | None:
        """The next tick to look at (ms; it may be past), None if there is none."""
        cursor = self._cursor()
        if cursor is None:
            cursor = -1 if self.schedule.is_once else self.added
        return self.schedule.next_tick(cursor, self.added)

    def _cursor(self) -> int | None:
        marks = [mark for mark in (self.last, self.checked) if mark is not None]
        return max(marks) if marks else None

    def record(self) -> dict[str, Any]:
        """The entry as a snapshot keeps it."""
        return {
            "schedule": self.schedule.model_dump(mode="json", by_alias=True, exclude_none=True),
            "added": self.added,
            "last": self.last,
            "runs": [run.model_dump(mode="json") for run in self.runs],
            "unsent": {str(tick): run for tick, run in self.unsent.items()},
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Entry:
        """The entry a snapshot kept."""
        entry = cls(Schedule.model_validate(record["schedule"]), int(record["added"]))
        entry.last = record.get("last")
        entry.runs.extend(ScheduleRun.model_validate(run) for run in record.get("runs", ()))
        entry.unsent = {int(tick): run for tick, run in record.get("unsent", {}).items()}
        return entry


class Book:
    """Every schedule by name, as the records read so far say."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    def __repr__(self) -> str:
        return f"<Book schedules={len(self.entries)}>"

    def apply(self, record: dict[str, Any]) -> None:
        """Take one record into account."""
        kind = record.get("kind")
        name = str(record.get("name"))
        if kind == "snapshot":
            self.entries = {
                str(e["schedule"]["name"]): Entry.from_record(e) for e in record["entries"]
            }
        elif kind == "added":
            schedule = Schedule.model_validate(record["schedule"])
            known = self.entries.get(schedule.name)
            if known is None or known.added < int(record["added"]):  # not heard before
                self.entries[schedule.name] = Entry(schedule, int(record["added"]))
        elif kind == "removed":
            known = self.entries.get(name)
            if known is not None and known.added <= record.get("added", known.added):
                del self.entries[name]  # not one added again after the removal
        elif (entry := self.entries.get(name)) is not None:
            _apply_tick(entry, kind, record)

    def snapshot(self) -> dict[str, Any]:
        """A record that stands for every record so far."""
        entries = [entry.record() for entry in self.entries.values()]
        return {"kind": "snapshot", "entries": entries, "at": time.time()}


def _apply_tick(entry: Entry, kind: object, record: dict[str, Any]) -> None:
    tick = int(record["tick"])
    if kind == "fire":
        entry.last = tick if entry.last is None else max(entry.last, tick)
        entry.unsent[tick] = str(record["run"])
        entry.runs.append(
            ScheduleRun(tick=_time(tick), run_id=str(record["run"]), leader=str(record["leader"]))
        )
    elif kind == "sent":
        entry.unsent.pop(tick, None)
        for run in entry.runs:
            if run.run_id == record["run"]:
                run.lag, run.error = record.get("lag"), record.get("error")


async def read_book(journal: Journal) -> Book:
    """Read the schedules back: from the latest snapshot (of the last minutes, else of
    the journal's whole span)."""
    now = datetime.now(UTC)
    records = _records(await journal.read(now - _WINDOW))
    if not any(record.get("kind") == "snapshot" for record in records):
        records = _records(await journal.read(now - _FULL))
    start = max((i for i, r in enumerate(records) if r.get("kind") == "snapshot"), default=0)
    book = Book()
    for record in records[start : start + 1]:
        book.apply(record)
    # A change written by another leader as the snapshot was taken may be missing from
    # it: every change read is applied again (a change known already changes nothing).
    for record in records[:start]:
        if record.get("kind") in ("added", "removed"):
            book.apply(record)
    for record in records[start + 1 :]:
        book.apply(record)
    return book


def _records(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [record for entry in entries for record in entry.get("records", ())]


def _time(tick: int) -> datetime:
    return datetime.fromtimestamp(tick / 1000, UTC)


class ScheduleState(BaseModel):
    """A schedule, its next tick and its last runs."""

    name: str
    schedule: Schedule
    added_at: datetime
    next_tick: datetime | None
    last_tick: datetime | None
    runs: list[ScheduleRun]
    """The latest runs, oldest first."""


class ScheduleListing(BaseModel):
    """Every schedule, as a leader knows them."""

    leader: str
    ticking: bool
    """Whether that leader is the one running the ticks now."""
    schedules: list[ScheduleState]


class ScheduleRemoved(BaseModel):
    """What ``schedule_remove`` did."""

    name: str
    removed: bool


def schedule_state(entry: Entry) -> ScheduleState:
    """The entry as ``schedule_list`` shows it."""
    tick = entry.next_tick()
    return ScheduleState(
        name=entry.schedule.name,
        schedule=entry.schedule,
        added_at=_time(entry.added),
        next_tick=None if tick is None else _time(tick),
        last_tick=None if entry.last is None else _time(entry.last),
        runs=list(entry.runs),
    )


class ScheduleWriter:
    """Writes records to the schedules journal in order; records made while a write is out
    go together in the next one (one confirmed append per batch)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._batch: list[dict[str, Any]] = []
        self._written: asyncio.Future[None] | None = None
        self._writer: asyncio.Task[None] | None = None

    async def write(self, record: dict[str, Any]) -> None:
        """Add ``record``; return once the journal has it."""
        await self.note(record)

    def note(self, record: dict[str, Any]) -> asyncio.Future[None]:
        """Add ``record`` with the next write, without waiting for it."""
        if self._written is None:
            self._written = asyncio.get_running_loop().create_future()
        self._batch.append(record)
        written = self._written
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        return written

    async def flush(self) -> None:
        """Wait until every record so far is in the journal."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write(self) -> None:
        while self._batch:
            batch, written = self._batch, self._written
            self._batch, self._written = [], None
            assert written is not None
            try:
                await self._journal.append({"records": batch})
            except BaseException as exc:
                if not written.done():
                    written.set_exception(exc)
                    written.exception()  # retrieved: a note() does not await its batch
                raise
            if not written.done():
                written.set_result(None)

"""The ticking: one leader at a time runs the schedules, each tick once.

Every leader asks for the lease ``schedules`` (``Transport.lease``: on RabbitMQ a queue's
single active consumer and its token). The one that holds it reads the schedules back
from the journal, sends again each tick fired whose run may not have gone (same message
id), runs what is due under each schedule's missed-ticks policy, and ticks on. For each
tick it proves it still holds the lease (a round trip), journals the tick, and then sends
its run under an id made from the schedule and the tick: ``run_plan`` to the leaders (a
plan, or a request as a task, whose plan id that is), or the request itself. When its
connection goes, the broker gives the lease to the next leader, which goes on from the
journal. ``schedule_fired`` goes out, to everyone, for each tick run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from agentbus._exceptions import AgentBusError
from agentbus._logging import get_logger
from agentbus._topology import SCHEDULES_LEASE
from agentbus.bus import Journal, Lease, Transport
from agentbus.envelopes import RequestEnvelope
from agentbus.leader._client import TASK_SUBTASK
from agentbus.leader._schedule import Due, Schedule, tick_label
from agentbus.leader._schedule_book import Book, Entry, ScheduleWriter, read_book

__all__ = ["LEASE", "SCHEDULE_CHANGED", "SCHEDULE_FIRED", "Ticker", "run_id"]

LEASE: Final = SCHEDULES_LEASE
"""The lease the leaders take turns at ticking under."""
SCHEDULE_FIRED: Final = "schedule_fired"
"""The event a tick run sends, to everyone: the schedule, the tick, the run's id, lag."""
SCHEDULE_CHANGED: Final = "schedule_changed"
"""The event a schedule added or removed sends, to everyone (the ticking leader too)."""
_SNAPSHOT_EVERY: Final = 300.0  # s between two snapshots of the schedules in the journal
_RETRY: Final = 1.0  # s before a leader whose ticking failed asks for the lease again
_IDLE: Final = 3600.0  # s: the longest wait with nothing due (a change wakes it)

_log = get_logger("agentbus.leader")


def run_id(schedule: Schedule, tick: int) -> str:
    """The id of the run a tick makes: ``<schedule>-<tick time>``, the same on every leader."""
    return f"{schedule.name}-{tick_label(tick)}"


class Ticker:
    """Runs the schedules while this leader holds the lease, and waits in line otherwise."""

    def __init__(
        self,
        bus: Transport,
        journal: Journal,
        *,
        leader_id: str,
        service: str,
        replay: Callable[[Book, float], None],
    ) -> None:
        self._bus = bus
        self._journal = journal
        self._writer = ScheduleWriter(journal)
        self._leader_id = leader_id
        self._service = service
        self._replay = replay
        self._lease: Lease | None = None
        self._book: Book | None = None  # while ticking
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[Any]] = set()
        self.fired = 0

    def __repr__(self) -> str:
        return f"<Ticker leader={self._leader_id!r} ticking={self.is_ticking} fired={self.fired}>"

    @property
    def is_ticking(self) -> bool:
        """Whether this leader runs the schedules now."""
        return self._book is not None

    @property
    def book(self) -> Book | None:
        """The schedules, while this leader runs them."""
        return self._book

    @property
    def writer(self) -> ScheduleWriter:
        """Where records go."""
        return self._writer

    async def start(self) -> None:
        """Ask for the lease and tick whenever it is held."""
        self._lease = await self._bus.lease(LEASE)
        self._task = asyncio.create_task(self._run(self._lease))

    async def aclose(self) -> None:
        """Stop ticking and give the lease up (the next leader goes on)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._lease is not None:
            await self._lease.aclose()
        for sending in list(self._sending):
            sending.cancel()

    def changed(self, record: dict[str, Any]) -> None:
        """Take an ``added`` or ``removed`` record in (while ticking), and look again."""
        if self._book is not None:
            self._book.apply(record)
            self._wake.set()

    async def _run(self, lease: Lease) -> None:
        while True:
            await lease.acquired()
            ticking = asyncio.create_task(self._tick())
            lost = asyncio.create_task(lease.lost())
            try:
                await asyncio.wait({ticking, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (ticking, lost):
                    task.cancel()
                await asyncio.wait({ticking, lost})
                self._book = None
            failed = None if ticking.cancelled() else ticking.exception()
            if failed is not None:
                # Hand the ticking on (another leader may be better placed), and ask again
                # at the back of the line.
                _log.warning("ticking stopped", error=repr(failed))
                await lease.aclose()
                await asyncio.sleep(_RETRY)
                lease = self._lease = await self._ask_again()

    async def _ask_again(self) -> Lease:
        while True:
            try:
                return await self._bus.lease(LEASE)
            except AgentBusError as exc:
                _log.warning("lease not asked for", error=str(exc))
                await asyncio.sleep(_RETRY)

    async def _tick(self) -> None:
        began = time.monotonic()
        book = await read_book(self._journal)
        self._replay(book, began)  # changes heard while it was read
        self._book = book
        _log.info("schedules taken", schedules=len(book.entries), leader=self._leader_id)
        for entry in list(book.entries.values()):
            for tick, run in sorted(entry.unsent.items()):  # may not have gone: again
                await self._send(entry, tick, run)
        await self._writer.write(book.snapshot())
        snapshot_at = time.monotonic() + _SNAPSHOT_EVERY
        while True:
            now = _now()
            due = [(entry, entry.due(now)) for entry in list(book.entries.values())]
            await asyncio.gather(*(self._fire(e, d) for e, d in due if d.through is not None))
            if time.monotonic() > snapshot_at:
                self._writer.note(book.snapshot())
                snapshot_at = time.monotonic() + _SNAPSHOT_EVERY
            await self._sleep(book)

    async def _sleep(self, book: Book) -> None:
        now = _now()
        upcoming = [
            tick for entry in book.entries.values() if (tick := entry.next_tick()) is not None
        ]
        wait = min([(tick - now) / 1000 for tick in upcoming], default=_IDLE)
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(min(wait, _IDLE), 0))

    async def _fire(self, entry: Entry, due: Due) -> None:
        schedule = entry.schedule
        if due.skipped:
            _log.info("missed ticks skipped", schedule=schedule.name, skipped=due.skipped)
        assert self._lease is not None
        for index, tick in enumerate(due.ticks):
            run = run_id(schedule, tick)
            await self._lease.confirm()
            record = {"kind": "fire", "name": schedule.name, "tick": tick, "run": run}
            record["caught_up"] = index < due.caught_up
            await self._writer.write(record | {"leader": self._leader_id, "at": time.time()})
            self._book_apply(record | {"leader": self._leader_id})
            await self._send(entry, tick, run)
        if schedule.is_once:
            removed = {"kind": "removed", "name": schedule.name, "added": entry.added}
            removed["reason"] = "fired"
            await self._writer.write(removed)
            self._book_apply(removed)
            await self._tell(SCHEDULE_CHANGED, {"name": schedule.name, "change": "removed"})

    def _book_apply(self, record: dict[str, Any]) -> None:
        if self._book is not None:
            self._book.apply(record)

    async def _send(self, entry: Entry, tick: int, run: str) -> None:
        error = None
        try:
            await self._bus.publish(self._envelope(entry.schedule, run))
        except AgentBusError as exc:
            error = f"{type(exc).__name__}: {exc}"
            _log.warning("scheduled run not sent", schedule=entry.schedule.name, error=error)
        lag = round(time.time() - tick / 1000, 4)
        self.fired += 1
        name = entry.schedule.name
        sent = {"kind": "sent", "name": name, "tick": tick, "run": run, "lag": lag, "error": error}
        self._writer.note(sent)
        self._book_apply(sent)
        upcoming = entry.next_tick()
        fired = {"name": name, "tick": _iso(tick), "run_id": run, "lag": lag, "error": error}
        fired |= {"leader": self._leader_id, "next": None if upcoming is None else _iso(upcoming)}
        task = asyncio.create_task(self._tell(SCHEDULE_FIRED, fired))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _tell(self, event: str, data: dict[str, Any]) -> None:
        try:
            await self._bus.emit(event, data, persistent=False, mandatory=False)
        except AgentBusError as exc:
            _log.info("schedule news not sent", event_name=event, error=str(exc))

    def _envelope(self, schedule: Schedule, run: str) -> RequestEnvelope:
        # The message id is the run's: a second send of one tick (a take-over) is a copy
        # that the receivers' de-duplication recognises.
        receiver, action = self._service, "run_plan"
        parameters: dict[str, Any] = {}
        if schedule.plan is not None:
            plan = schedule.plan.model_dump(mode="json") | {"id": run}
            parameters = {"plan": plan}
        else:
            request = schedule.request
            assert request is not None
            if request.task:
                subtask: dict[str, Any] = {"id": TASK_SUBTASK, "service": request.service}
                subtask |= {"skill": request.action, "parameters": request.parameters}
                subtask |= {"timeout": request.timeout}
                parameters = {"plan": {"id": run, "subtasks": [subtask]}}
            else:
                receiver, action, parameters = request.service, request.action, request.parameters
        return RequestEnvelope.model_validate(
            {
                "message_id": f"schedule/{run}",
                "sender_id": self._leader_id,
                "receiver_id": receiver,
                "payload": {"action": action, "parameters": parameters},
            }
        )


def _iso(tick: int) -> str:
    return datetime.fromtimestamp(tick / 1000, UTC).isoformat()


def _now() -> int:
    return round(time.time() * 1000)

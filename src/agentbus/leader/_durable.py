"""Durable plans: a plan's steps journaled on the broker, so another leader can take it over.

A leader that dies mid-plan leaves its ``run_plan`` request unacknowledged: RabbitMQ gives
it to another leader instance (or to the restarted one). That leader reads the plan's
journal back and goes on from there: subtasks that succeeded are not run again, and those
in flight are asked again under the same message id (a worker's de-duplication answers a
finished one from memory rather than running it twice) while their answers, sent to the
plan's own reply queue, are still taken. Every record carries the plan's key, derived from
the ``run_plan`` request's message id, which the redelivery keeps.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from agentbus.bus import Journal
from agentbus.leader._aggregate import SubtaskStatus
from agentbus.leader._attempt import SubtaskError
from agentbus.leader._record import SubtaskRecord

__all__ = ["JOURNAL", "PlanJournal", "Restored", "Sent", "plan_key", "restore_record"]

JOURNAL: Final = "plans"
"""The journal leaders share (``<exchange>.journal.plans``)."""
_LOOK_BACK: Final = timedelta(minutes=5)  # read from this long before the request was sent


def plan_key(request_id: str) -> str:
    """The plan's key: short, an id, the same for every delivery of its request."""
    return hashlib.sha256(request_id.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Sent:
    """A subtask request sent and not yet answered, as the journal has it."""

    attempt: int
    message_id: str
    receiver: str


@dataclass(slots=True)
class Restored:
    """What the journal says of a plan another leader began."""

    leader: str
    settled: dict[str, dict[str, Any]] = field(default_factory=dict)
    in_flight: dict[str, Sent] = field(default_factory=dict)


class PlanJournal:
    """One plan's records in the leaders' journal; appends run in order, off the hot path."""

    def __init__(self, journal: Journal, key: str) -> None:
        self.key = key
        self._journal = journal
        self._writing: asyncio.Task[None] | None = None

    @property
    def reply_queue(self) -> str:
        """The name of the plan's reply queue (``Transport.reply_queue``)."""
        return f"plan-{self.key}"

    def message_id(self, subtask_id: str, attempt: int) -> str:
        """The request id of an attempt: the same whichever leader sends it."""
        return f"{self.key}/{subtask_id}/{attempt}"

    async def restore(self, sent_at: datetime) -> Restored | None:
        """Read the plan's records back; None if no leader began it."""
        since = min(sent_at, datetime.now(UTC)) - _LOOK_BACK
        restored: Restored | None = None
        for record in await self._journal.read(since):
            if record.get("plan") != self.key:
                continue
            kind = record.get("kind")
            if kind == "begun":
                restored = restored or Restored(leader=str(record.get("leader")))
            elif restored is not None and kind == "sent":
                sent = Sent(record["attempt"], record["message_id"], record["receiver"])
                restored.in_flight[record["subtask"]] = sent
            elif restored is not None and kind == "settled":
                restored.in_flight.pop(record["subtask"], None)
                restored.settled[record["subtask"]] = record
        return restored

    async def begun(self, leader: str) -> None:
        """Record that ``leader`` runs the plan."""
        await self._journal.append({"plan": self.key, "kind": "begun", "leader": leader})

    async def sent(self, subtask_id: str, attempt: int, message_id: str, receiver: str) -> None:
        """Record an attempt's request before it goes out."""
        await self._after_earlier()
        await self._journal.append(
            {
                "plan": self.key,
                "kind": "sent",
                "subtask": subtask_id,
                "attempt": attempt,
                "message_id": message_id,
                "receiver": receiver,
            }
        )

    def settled(self, record: SubtaskRecord) -> None:
        """Record a subtask's end, after what was recorded before (in the background)."""
        entry = {
            "plan": self.key,
            "kind": "settled",
            "subtask": record.id,
            "status": record.status.value,
            "result": record.result,
            "error": None if record.error is None else record.error.to_wire(),
            "attempts": record.attempts,
            "agents": record.agents,
            "started": record.started,
            "ended": record.ended,
            "usage": record.usage,
        }
        previous = self._writing

        async def write() -> None:
            if previous is not None:
                await asyncio.shield(previous)
            await self._journal.append(entry)

        self._writing = asyncio.ensure_future(write())

    async def flush(self) -> None:
        """Wait until every record so far is in the journal."""
        await self._after_earlier()

    async def _after_earlier(self) -> None:
        if self._writing is not None:
            await asyncio.shield(self._writing)


def restore_record(record: SubtaskRecord, entry: dict[str, Any]) -> None:
    """Make ``record`` what the journal's ``settled`` entry says."""
    record.status = SubtaskStatus(entry["status"])
    record.result = entry.get("result")
    error = entry.get("error")
    record.error = (
        None
        if error is None
        else SubtaskError(error["code"], error["message"], error.get("details"))
    )
    record.attempts = int(entry.get("attempts") or 0)
    record.agents = entry.get("agents")
    record.started = entry.get("started")
    record.ended = entry.get("ended")
    record.usage = entry.get("usage")

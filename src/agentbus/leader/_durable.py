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
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from agentbus.bus import Journal
from agentbus.envelopes import Question
from agentbus.leader._aggregate import SubtaskStatus
from agentbus.leader._attempt import SubtaskError
from agentbus.leader._plan import Plan
from agentbus.leader._record import SubtaskRecord, tally
from agentbus.leader._status import PlanState

__all__ = [
    "JOURNAL",
    "PlanJournal",
    "Restored",
    "Sent",
    "journaled_state",
    "lookup",
    "plan_key",
    "restore_record",
]

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
    """What the journal says of a plan a leader began: who runs it, what has settled,
    what is in flight, and whether it has ended."""

    leader: str
    plan: dict[str, Any] | None = None
    begun_at: float | None = None
    queue: str | None = None
    """The plan's reply queue, as its begun record names it."""
    settled: dict[str, dict[str, Any]] = field(default_factory=dict)
    in_flight: dict[str, Sent] = field(default_factory=dict)
    asking: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The steps waiting for an answer: their ``asked`` records (and ``answered``, once
    the answer came and before the step went on)."""
    origin: dict[str, Any] | None = None
    """Who asked for the plan, where its answer goes (``Origin.record``)."""
    expanded: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The fragments steps returned (plans made at run time), by step id."""
    parked: bool = False
    """Whether the plan parked (every step waits for people) and no leader runs it."""
    ended: bool = False


class PlanJournal:
    """One plan's records in the leaders' journal, in order. Records made while a write
    is out go together in the next one: one confirmed append per batch, not per record."""

    def __init__(self, journal: Journal, key: str, queue: str | None = None) -> None:
        self.key = key
        self.queue = queue or f"plan-{key}"
        """The plan's reply queue (``Transport.reply_queue``): its begun and asked records
        name it; a journal from before names none, and its queue is named after its key."""
        self._journal = journal
        self._batch: list[dict[str, Any]] = []
        self._batch_written: asyncio.Future[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._broken: BaseException | None = None  # a write failed: nothing after it goes

    @property
    def is_broken(self) -> bool:
        """Whether a write failed: nothing after it is written."""
        return self._broken is not None

    def message_id(self, subtask_id: str, attempt: int) -> str:
        """The request id of an attempt: the same whichever leader sends it."""
        return f"{self.key}/{subtask_id}/{attempt}"

    def answer_id(self, subtask_id: str, question_id: str) -> str:
        """The request id of the answer to an agent's question: the same whichever leader
        sends it."""
        return f"{self.key}/{subtask_id}/{question_id}"

    async def asked(
        self,
        subtask_id: str,
        question: dict[str, Any],
        asked: dict[str, Any] | None,
        began: float | None = None,
    ) -> None:
        """Record that a step waits for the answer to the plan's ``question`` (standing for
        the agent's question ``asked``; None for an approval step), and when the plan
        began (to read it back from); return once written."""
        record = {"kind": "asked", "subtask": subtask_id, "question": question, "asked": asked}
        await self._add(record | {"began": began, "queue": self.queue})

    async def answered(self, subtask_id: str, question_id: str, answer: dict[str, Any]) -> None:
        """Record the answer a step's question got (``value`` or ``declined``, ``by``);
        return once written (then it goes on to the agent)."""
        record = {"kind": "answered", "subtask": subtask_id, "question_id": question_id}
        await self._add(record | {"answer": answer})

    async def restore(self, sent_at: datetime) -> Restored | None:
        """Read the plan's records back; None if no leader began it."""
        since = min(sent_at, datetime.now(UTC)) - _LOOK_BACK
        restored: Restored | None = None
        for entry in await self._journal.read(since):
            if entry.get("plan") != self.key:
                continue
            for record in entry.get("records", ()):
                restored = _apply(restored, record)
        return restored

    def begin(
        self,
        leader: str,
        plan: dict[str, Any] | None,
        origin: dict[str, Any] | None = None,
        *,
        with_next: bool = False,
    ) -> asyncio.Future[None]:
        """Record that ``leader`` runs the plan (the plan itself, and who asked for it and
        where its answer goes, the first time); the future is done once written. Records
        added meanwhile go with it; ``with_next``: it waits for the next record (or a
        ``flush``) to go with, rather than being written at once."""
        record: dict[str, Any] = {"kind": "begun", "leader": leader, "at": time.time()}
        record["queue"] = self.queue
        if plan is not None:
            record |= {"plan_id": plan["id"], "plan": plan, "origin": origin}
        return self._add(record, write=not with_next)

    async def expanded(self, subtask_id: str, fragment: dict[str, Any]) -> None:
        """Record the fragment ``subtask_id`` returned, before it runs: a leader taking the
        plan over runs it on, rather than asking its planner again."""
        await self._add({"kind": "expanded", "subtask": subtask_id, "fragment": fragment})

    async def parked(self, questions: list[str]) -> None:
        """Record that the plan parked on ``questions`` (ids), and wait until the journal
        has every record: no leader runs it until an answer comes."""
        self._add({"kind": "parked", "questions": questions})
        await self.flush()

    async def ended(self, status: str) -> None:
        """Record that the plan ended, and wait until the journal has every record."""
        self._add({"kind": "ended", "status": status})
        await self.flush()

    async def sent(self, subtask_id: str, attempt: int, message_id: str, receiver: str) -> None:
        """Record an attempt's request; return once the journal has it (send it then)."""
        await self._add(
            {
                "kind": "sent",
                "subtask": subtask_id,
                "attempt": attempt,
                "message_id": message_id,
                "receiver": receiver,
            }
        )

    def settled(self, record: SubtaskRecord, *, last: bool = False) -> asyncio.Future[None]:
        """Record a subtask's end, written with the next batch (the future is done then;
        ``flush`` waits for it too). ``last``: the plan's last step, whose end is written with
        the plan's (``ended``), not at once."""
        return self._add(
            {
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
                "items": record.items,
            },
            write=not last,
        )

    async def flush(self) -> None:
        """Write what waits to go with the next record, and wait until every record so far
        is in the journal."""
        self._start()
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
        if self._broken is not None:
            raise self._broken

    def _add(self, record: dict[str, Any], *, write: bool = True) -> asyncio.Future[None]:
        if self._broken is not None:  # a record after one that is not in: not written either
            refused = asyncio.get_running_loop().create_future()
            refused.set_exception(self._broken)
            refused.exception()  # retrieved: settled() does not await its batch
            return refused
        if self._batch_written is None:
            self._batch_written = asyncio.get_running_loop().create_future()
        self._batch.append(record)
        written = self._batch_written
        if write:
            self._start()
        return written

    def _start(self) -> None:
        if self._batch and (self._writer is None or self._writer.done()):
            self._writer = asyncio.create_task(self._write())
            self._writer.add_done_callback(_retrieved)  # a failure is kept in _broken

    async def _write(self) -> None:
        while self._batch:
            batch, written = self._batch, self._batch_written
            self._batch, self._batch_written = [], None
            assert written is not None
            try:
                await self._journal.append({"plan": self.key, "records": batch})
            except BaseException as exc:
                # Not written: nor is what waits for the next batch, nor anything later (it
                # came after): a leader taking the plan over goes on from what is in.
                if isinstance(exc, Exception):
                    self._broken = exc
                waiting, self._batch, self._batch_written = self._batch_written, [], None
                for future in (written, waiting):
                    if future is not None and not future.done():
                        future.set_exception(exc)
                        future.exception()  # retrieved: settled() does not await its batch
                raise
            if not written.done():
                written.set_result(None)


def _retrieved(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


async def lookup(journal: Journal, plan_id: str, since: datetime) -> Restored | None:
    """The latest run of the plan ``plan_id`` that the journal holds since ``since``."""
    runs: dict[str, Restored | None] = {}
    latest: str | None = None
    for entry in await journal.read(since):
        key = str(entry.get("plan"))
        records = entry.get("records", ())
        if key not in runs:
            if not any(r.get("kind") == "begun" and r.get("plan_id") == plan_id for r in records):
                continue
            latest = key
            runs[key] = None
        for record in records:
            runs[key] = _apply(runs[key], record)
    return None if latest is None else runs[latest]


def _apply(restored: Restored | None, record: dict[str, Any]) -> Restored | None:
    kind = record.get("kind")
    if kind == "begun":
        restored = restored or Restored(leader="")
        restored.leader = str(record.get("leader"))
        restored.queue = record.get("queue") or restored.queue
        restored.parked = False
        if "plan" in record:
            restored.plan, restored.begun_at = record["plan"], record.get("at")
            restored.origin = record.get("origin")
        return restored
    if restored is None:
        return None
    if kind == "ended":
        restored.ended = True
    elif kind == "parked":
        restored.parked = True
    else:
        _apply_step(restored, kind, record)
    return restored


def _apply_step(restored: Restored, kind: object, record: dict[str, Any]) -> None:
    if kind == "sent":
        sent = Sent(record["attempt"], record["message_id"], record["receiver"])
        restored.in_flight[record["subtask"]] = sent
    elif kind == "settled":
        restored.in_flight.pop(record["subtask"], None)
        restored.asking.pop(record["subtask"], None)
        restored.settled[record["subtask"]] = record
    elif kind == "asked":
        restored.in_flight.pop(record["subtask"], None)
        restored.asking[record["subtask"]] = record
    elif kind == "expanded":  # the planner answered: its fragment runs now
        restored.in_flight.pop(record["subtask"], None)
        restored.expanded[record["subtask"]] = record["fragment"]
    elif kind == "answered":
        asking = restored.asking.get(record["subtask"])
        if asking is not None and asking["question"].get("question_id") == record["question_id"]:
            asking["answer"] = record["answer"]


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
    record.items = entry.get("items")


def _waiting_on(found: Restored, records: dict[str, SubtaskRecord]) -> list[Question]:
    # The steps waiting for an answer, and their questions.
    questions = []
    for subtask_id, asking in found.asking.items():
        if "answer" not in asking:
            records[subtask_id].status = SubtaskStatus.INPUT_REQUIRED
            questions.append(Question.model_validate(asking["question"]))
    return questions


def journaled_state(found: Restored) -> PlanState | None:
    """The plan's state as the journal has it (None without the plan's first record)."""
    if found.plan is None:
        return None
    plan = Plan.model_validate(found.plan)
    records = {s.id: SubtaskRecord(s.id, s.skill) for s in plan.subtasks}
    for subtask_id, entry in found.settled.items():
        restore_record(records[subtask_id], entry)
    for subtask_id, sent in found.in_flight.items():
        records[subtask_id].status = SubtaskStatus.RUNNING
        records[subtask_id].attempts = sent.attempt
    questions = _waiting_on(found, records)
    if not found.ended:
        return PlanState(
            plan_id=plan.id,
            state="waiting" if found.parked else "running",
            leader=found.leader,
            done=len(found.settled),
            total=len(records),
            subtasks=[record.outcome() for record in records.values()],
            questions=questions,
        )
    begun = found.begun_at or time.time()
    last = max((r.ended or begun for r in records.values()), default=begun)
    aggregate = tally(
        plan,
        records,
        started_at=datetime.fromtimestamp(begun, UTC),
        wall_time=last - begun,
        error=None,
    )
    return PlanState.ended(aggregate, found.leader)

"""How a leader holds its plans: each plan's runner, journal and reply queue, taken alone;
a plan that waits only for people parked, and resumed where an answer comes.

A leader runs a durable plan while it holds the plan's reply queue alone (an exclusive
consumer: the lock that keeps two leaders from running one plan) and one delivery that
brings the plan back if it dies: the ``run_plan`` request, or, for a plan resumed after it
parked, the ``resume_plan`` request an answer sent. A plan that parks lets both go and
answers ``run_plan`` ``in_progress``: its final answer goes, later, from whichever leader
ends it, to the origin the journal keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final

from agentbus._exceptions import (
    AgentBusError,
    BusClosed,
    ConnectionLost,
    QuestionClosed,
    QueueInUse,
    Unroutable,
)
from agentbus._logging import get_logger
from agentbus.agents import Deferred
from agentbus.bus import Journal, Topology, Transport, ack_after, reader_of
from agentbus.envelopes import (
    ANSWER_ACTION,
    BROADCAST,
    ErrorCode,
    RequestEnvelope,
    ResponseStatus,
)
from agentbus.leader._aggregate import (
    PLAN_PROGRESS,
    Aggregate,
    PlanStatus,
    Progress,
    ProgressReport,
)
from agentbus.leader._askers import Asker
from agentbus.leader._directory import SkillDirectory
from agentbus.leader._durable import PlanJournal, Restored, plan_key
from agentbus.leader._parking import Origin, PlanParked
from agentbus.leader._plan import Plan
from agentbus.leader._plan_queues import PlanQueues, Stop
from agentbus.leader._progress import ProgressSink
from agentbus.leader._questions import Given, PlanAsking, PlanQuestions
from agentbus.leader._run import PlanRunner
from agentbus.leader._status import Cancellation
from agentbus.leader._takeover import TakeOver

__all__ = ["RESUME_PLAN", "Conductor"]

RESUME_PLAN: Final = "resume_plan"
"""The leaders' own action that takes an answer to a parked plan and resumes it."""
_OUTLINE_MAX: Final = 1000  # subtasks: a larger plan's first progress report names none
_LOCK_WAIT: Final = 10.0  # s: a plan's queue a leader just lost (its connection) comes free

_log = get_logger("agentbus.leader")

Ended = Callable[[Aggregate], None]
"""Told of each plan that ended here (the leader's log, metrics and recent plans)."""


class Conductor:
    """Runs a leader's plans, and parks and resumes those that wait for people.

    Args:
        bus: The leader's transport.
        leader_id: The leader's agent id.
        service: The leader's service (where ``resume_plan`` goes).
        directory: Where capable agents are found.
        questions: The leader's open plan questions.
        journal: The leaders' journal (None: plans are not durable, and never park).
        park_after: Seconds a durable plan whose every step waits runs on before it parks.
        ended: Told of each plan that ended here.
    """

    def __init__(
        self,
        bus: Transport,
        *,
        leader_id: str,
        service: str,
        directory: SkillDirectory,
        questions: PlanQuestions,
        journal: Journal | None,
        park_after: float,
        ended: Ended,
    ) -> None:
        self.runners: set[PlanRunner] = set()
        self._bus = bus
        self._leader_id = leader_id
        self._service = service
        self._directory = directory
        self._questions = questions
        self._journal = journal
        self._park_after = park_after
        self._ended = ended
        self._queues = PlanQueues(bus)

    def __repr__(self) -> str:
        return f"<Conductor runners={len(self.runners)} durable={self._journal is not None}>"

    async def aclose(self) -> None:
        """Wait until the queues of the plans that ended here are gone."""
        await self._queues.aclose()

    async def run(self, plan: Plan, origin: Origin, *, redelivered: bool | None) -> Aggregate:
        """Run ``plan`` for the request ``origin`` to its end and return the aggregate.

        Raises:
            Deferred: the plan parked (every step waits for people), or another leader
                runs it: the request is answered ``in_progress``, its aggregate later.
        """
        if self._journal is None:
            runner = self._runner(plan, origin, None)
            return await self._conduct(runner, origin, None, None)
        journal = PlanJournal(self._journal, plan_key(origin.request_id))
        # A first delivery (never handed to a leader before) has nothing in the journal:
        # reading it back, every plan's records of the last minutes, is skipped.
        began = datetime.fromtimestamp(origin.began, UTC)
        restored = None if redelivered is False else await journal.restore(began)
        if restored is not None and restored.origin is not None:
            origin = Origin.from_record(restored.origin)  # as it began, under its first leader
        stop = await self._queue(journal, restored, origin, first=redelivered is False)
        # Begun here. The first time, written with the first step's record (nothing is sent
        # before the journal has both); a take-over's at once (it may send nothing for long).
        journal.begin(
            self._leader_id,
            plan.model_dump(mode="json") if restored is None else None,
            origin.record(),
            with_next=restored is None,
        )
        if restored is not None:
            _log.info(
                "plan taken over",
                plan_id=plan.id,
                leader_before=restored.leader,
                settled=len(restored.settled),
                in_flight=len(restored.in_flight),
            )
        runner = self._runner(plan, origin, journal, restored)
        return await self._conduct(runner, origin, journal, stop)

    async def resume(self, asker: Asker, question_id: str, given: Given) -> dict[str, Any]:
        """Take ``given``, the answer to the parked plan's question ``question_id``: resume
        the plan here and run it to its end (or its next park), its final answer to its
        origin; or, when another leader runs it now, hand the answer to that one."""
        assert self._journal is not None
        journal = PlanJournal(self._journal, asker.key, asker.queue)
        try:
            stop = await self._bus.reply_queue(journal.queue, hold=True, exclusive=True)
        except QueueInUse:
            return await self.forward(asker, question_id, given)
        try:
            answer = {"value": given.value, "declined": given.declined, "by": given.by}
            await journal.answered(asker.subtask_id, question_id, answer)
            began = datetime.fromtimestamp(asker.began or 0.0, UTC)
            restored = await journal.restore(began)
            if restored is None or restored.plan is None or restored.origin is None:
                raise QuestionClosed(
                    f"plan {asker.plan_id!r} is no longer in the leaders' journal",
                    details={"question_id": question_id, "reason": "unknown"},
                )
            await journal.begin(self._leader_id, None)
        except BaseException:
            await stop(False)
            raise
        plan = Plan.model_validate(restored.plan)
        origin = Origin.from_record(restored.origin)
        _log.info("plan resumed", plan_id=plan.id, question_id=question_id, by=given.by)
        runner = self._runner(plan, origin, journal, restored)
        try:
            aggregate = await self._conduct(runner, origin, journal, stop)
        except Deferred as parked:  # parked again: its origin hears so
            await self._tell(origin, parked.reply.payload.result, ResponseStatus.IN_PROGRESS)
            return {"plan_id": plan.id, "state": "waiting"}
        await self._tell(origin, aggregate.model_dump(mode="json"), ResponseStatus.SUCCESS)
        return {"plan_id": plan.id, "state": "ended", "status": aggregate.status.value}

    async def forward(self, asker: Asker, question_id: str, given: Given) -> dict[str, Any]:
        """Hand ``given`` to the leader that runs the plan now (its answer is this one's)."""
        parameters: dict[str, Any] = {"question_id": question_id}
        parameters |= {"decline": True} if given.declined else {"answer": given.value}
        if asker.leader == self._leader_id:
            raise AgentBusError(
                f"plan {asker.plan_id!r} is being taken over: answer again in a moment",
                code=ErrorCode.AGENT_UNAVAILABLE,
                details={"question_id": question_id, "plan_id": asker.plan_id},
            )
        reply = await self._bus.request(asker.leader, ANSWER_ACTION, parameters)
        result: dict[str, Any] = reply.result
        return result

    async def wake(self, asker: Asker, question_id: str, given: Given) -> None:
        """Send ``resume_plan`` for a parked plan to the leaders' service: the leader that
        takes it resumes the plan, holding that request as it would ``run_plan``."""
        parameters = {
            "plan_key": asker.key,
            "plan_id": asker.plan_id,
            "subtask_id": asker.subtask_id,
            "began": asker.began,
            "question_id": question_id,
            "answer": {"value": given.value, "declined": given.declined, "by": given.by},
        }
        request = {
            "message_id": f"{asker.key}/resume/{question_id}",
            "sender_id": self._leader_id,
            "receiver_id": self._service,
            "payload": {"action": RESUME_PLAN, "parameters": parameters},
        }
        await self._bus.publish(RequestEnvelope.model_validate(request))

    def _runner(
        self,
        plan: Plan,
        origin: Origin,
        journal: PlanJournal | None,
        restored: Restored | None = None,
    ) -> PlanRunner:
        takeover = None
        if journal is not None:
            reply_to = Topology(self._bus.settings.exchange).reply_queue(journal.queue)
            takeover = TakeOver(
                self._bus, journal, restored=restored, reply_to=reply_to, began=origin.began
            )
        asking = PlanAsking(self._questions, origin.request_id, self._park_after)
        return PlanRunner(
            self._bus,
            plan,
            directory=self._directory,
            progress=self._sink(origin, plan),
            takeover=takeover,
            asking=asking,
            requester=reader_of(origin.requester),
        )

    async def _queue(
        self, journal: PlanJournal, restored: Restored | None, origin: Origin, *, first: bool
    ) -> Stop | None:
        # The plan's reply queue, held alone, named in the journal.
        if first:  # its first delivery: nobody else runs it, nothing was sent
            journal.queue, stop = await self._queues.take()
            return stop
        journal.queue = restored.queue if restored and restored.queue else journal.queue
        if restored is not None and restored.ended and not restored.in_flight:
            return None  # it waits for no answer: its queue may serve another plan now
        return await self._hold(journal, restored, origin)

    async def _hold(
        self, journal: PlanJournal, restored: Restored | None, origin: Origin
    ) -> Callable[[bool], Awaitable[None]]:
        # The plan's queue, alone: while another leader holds it (it resumed the plan on
        # an answer), this request has nothing to run: its aggregate comes from there.
        expect = [sent.message_id for sent in (restored.in_flight if restored else {}).values()]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _LOCK_WAIT
        while True:
            try:
                # Held: an answer leaves the queue once the journal has what came of it.
                return await self._bus.reply_queue(
                    journal.queue, expect=expect, hold=True, exclusive=True
                )
            except QueueInUse:
                if loop.time() > deadline:
                    result = {"agent_id": self._leader_id, "state": "elsewhere"}
                    reply = origin.reply(self._leader_id, result, ResponseStatus.IN_PROGRESS)
                    raise Deferred(reply) from None
            await asyncio.sleep(0.2)

    async def _conduct(
        self,
        runner: PlanRunner,
        origin: Origin,
        journal: PlanJournal | None,
        stop: Stop | None,
    ) -> Aggregate:
        self.runners.add(runner)
        kept = False  # the plan's queue stays: another leader goes on, or an answer will
        ended: asyncio.Future[None] | None = None  # the plan's end, being written
        try:
            aggregate = await runner.run()
            if journal is not None:
                ended = await _end(journal, aggregate.status.value)
        except PlanParked as parked:
            assert journal is not None
            kept = True
            await journal.parked([question.question_id for question in parked.questions])
            _log.info("plan parked", plan_id=runner.plan.id, questions=len(parked.questions))
            reply = origin.parked(self._leader_id, runner.plan.id, parked.questions)
            raise Deferred(reply) from None
        except (ConnectionLost, BusClosed):
            # The broker went under the plan: the bus puts the request back (no answer), and
            # the leader that takes it goes on from the journal, with the plan's queue.
            kept = True
            raise
        except asyncio.CancelledError:
            if journal is not None and runner.cancellation is Cancellation.REQUESTED:
                # Cancelled by request, not handed over: no other leader is to go on with it.
                with contextlib.suppress(AgentBusError):
                    await journal.ended(PlanStatus.FAILED.value)
            raise
        finally:
            self.runners.discard(runner)
            if stop is not None and journal is not None:
                await self._let_go(journal.queue, stop, runner, ended=ended, kept=kept)
        self._ended(aggregate)
        return aggregate

    async def _let_go(
        self,
        queue: str,
        stop: Stop,
        runner: PlanRunner,
        *,
        ended: asyncio.Future[None] | None,
        kept: bool,
    ) -> None:
        if ended is None:  # the queue stays if another leader goes on, or an answer will come
            await stop(not (kept or runner.cancellation is Cancellation.HANDED_OVER))
            return
        # Ended: the plan's queue serves the next plan once the journal has the end.
        self._queues.give_back(queue, stop, ended)

    async def _tell(self, origin: Origin, result: Any, status: ResponseStatus) -> None:
        reply = origin.reply(self._leader_id, result, status)
        try:
            await self._bus.send_reply(reply, origin.reply_to)
        except Unroutable:
            _log.info("the plan's requester has gone", request_id=origin.request_id)
        except AgentBusError as exc:
            _log.warning("the plan's answer was not sent", error=str(exc))

    def _sink(self, origin: Origin, plan: Plan) -> ProgressSink:
        # The first report also names every subtask, so a follower lists the pending ones.
        outline: list[dict[str, Any]] | None = None
        if len(plan.subtasks) <= _OUTLINE_MAX:
            outline = [
                {"id": s.id, "skill": s.skill, "depends_on": s.depends_on} for s in plan.subtasks
            ]

        async def publish(batch: list[Progress]) -> None:
            nonlocal outline
            last = batch[-1]
            report = ProgressReport(
                plan_id=last.plan_id,
                done=last.done,
                total=last.total,
                transitions=batch,
                request_id=origin.request_id,
                outline=outline,
            )
            outline = None
            data = report.model_dump(mode="json", exclude_none=True)
            await asyncio.gather(
                *(
                    self._bus.emit(
                        PLAN_PROGRESS, data, receiver=receiver, persistent=False, mandatory=False
                    )
                    for receiver in (origin.requester, BROADCAST)
                )
            )

        return publish


async def _end(journal: PlanJournal, status: str) -> asyncio.Future[None]:
    # The answer goes while the end is written; the request is acknowledged once it is in
    # (if it fails, the request runs again from the journal). A journal that failed
    # before has no answer to give: its request goes back at once.
    ended = asyncio.ensure_future(journal.ended(status))
    if journal.is_broken or not ack_after(ended):
        await ended
    return ended

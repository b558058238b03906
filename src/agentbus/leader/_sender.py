"""One attempt at a subtask sent: the agent chosen, the request traced, its holder followed.

An attempt goes to the subtask's ``service`` when it names one, else to a capable agent
(one that has not failed the subtask yet, after a failure). Who holds the work comes from
the agent's first progress notice; an attempt given up (the plan stopping, its holder
reported offline) sends the holder a ``cancel``, except when the plan is handed over to
another leader.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Protocol

from agentbus._exceptions import AgentBusError, InputRequired, NoCapableAgent, RemoteError
from agentbus._tracing import child_trace, end_span, start_span
from agentbus.agents import NOTIFY_START, send_cancel
from agentbus.bus import Transport, reader_of, verifies_sender
from agentbus.envelopes import (
    ANSWER_ACTION,
    ARTIFACT_READER,
    Question,
    RequestEnvelope,
    ResponseEnvelope,
    utcnow,
)
from agentbus.leader._attempt import (
    Answered,
    Asked,
    AttemptResult,
    Failed,
    Flight,
    Holders,
    SubtaskError,
)
from agentbus.leader._directory import SkillDirectory
from agentbus.leader._durable import Sent
from agentbus.leader._handoff import Handoff
from agentbus.leader._plan import Plan, Subtask
from agentbus.leader._questions import Given
from agentbus.leader._readers import StepReaders
from agentbus.leader._record import SubtaskRecord
from agentbus.leader._takeover import TakeOver

__all__ = ["AttemptSender", "Emit"]


class Emit(Protocol):
    """Reports a transition of a subtask's run (the runner's progress)."""

    def __call__(
        self,
        record: SubtaskRecord,
        transition: str,
        *,
        agent_id: str | None = None,
        error: SubtaskError | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None: ...


class AttemptSender:
    """Sends the attempts at a plan's subtasks and follows who holds each.

    Args:
        bus: The transport the requests go on.
        plan: The plan; its id goes in each request's metadata.
        directory: Where capable agents are found.
        holders: Which instance holds which request (``agent_offline`` reads it).
        emit: Where a subtask's ``running`` and its skill's own progress are reported.
        takeover: A durable plan's journal and reply queue; None for a plan that is not.
        trace: The plan's trace (its ``run_plan`` request's), continued by every attempt.
        log: The plan's logger.
        requester: The broker user of the plan's requester, who reads the files of the
            steps no other step takes (``StepReaders``); None: the leader's own.
    """

    def __init__(
        self,
        bus: Transport,
        plan: Plan,
        *,
        directory: SkillDirectory,
        holders: Holders,
        emit: Emit,
        takeover: TakeOver | None,
        trace: str | None,
        log: Any,
        requester: str | None = None,
    ) -> None:
        self._bus = bus
        self._plan_id = plan.id
        own = reader_of(bus.agent_id)
        self._readers = StepReaders(plan, directory=directory, requester=requester, own=own)
        self._handoff = Handoff(bus.artifacts, own=own, copies=verifies_sender(bus.settings))
        self._directory = directory
        self._holders = holders
        self._emit = emit
        self._takeover = takeover
        self._trace = trace
        self._log = log

    def __repr__(self) -> str:
        return f"<AttemptSender plan_id={self._plan_id!r}>"

    async def send(
        self,
        subtask: Subtask,
        parameters: dict[str, Any],
        record: SubtaskRecord,
        tried: set[str],
        *,
        timeout: float,
        in_flight: Sent | None = None,
    ) -> AttemptResult:
        """Send the attempt ``record.attempts`` at ``subtask`` and return how it ended.

        ``tried``: the instances that worked on the subtask so far (this attempt adds its
        own); ``in_flight``: the attempt another leader sent, asked again under its id.
        """
        try:
            receiver = in_flight.receiver if in_flight else await self._receiver(subtask, tried)
        except NoCapableAgent as exc:
            return Failed(SubtaskError.of(exc))
        reader = await self._readers.reader(subtask.id)
        try:
            parameters = await self._handoff.parameters(parameters, receiver)
        except AgentBusError as exc:  # a file to hand on that cannot be read or stored
            return Failed(SubtaskError.of(exc))
        span, fields = self._fields(
            record.id, receiver, subtask.skill, parameters, timeout, reader=reader
        )
        if self._takeover is not None:  # the same id whichever leader sends it
            fields["message_id"] = await self._takeover.message_id(
                record.id, record.attempts, receiver, sent_before=in_flight is not None
            )
        # One validation of plain dicts: half the cost of model_construct's Python loop.
        request = RequestEnvelope.model_validate(fields)
        return await self._traced(span, request, timeout, record, tried, bool(in_flight))

    async def answer(
        self,
        subtask: Subtask,
        record: SubtaskRecord,
        asked: Question,
        given: Given,
        tried: set[str],
        *,
        timeout: float,
    ) -> AttemptResult:
        """Give the agent that asked ``asked`` its answer and return how the step goes on:
        its answer, another question, or a failure. Under the same request id whichever
        leader sends it (a durable plan's), so an agent takes one answer once."""
        parameters: dict[str, Any] = {"question_id": asked.question_id}
        if given.declined:
            parameters["decline"] = True
        else:
            parameters["answer"] = given.value
        reader = await self._readers.reader(subtask.id)  # the skill runs again on the answer
        span, fields = self._fields(
            record.id, asked.service, ANSWER_ACTION, parameters, timeout, reader=reader
        )
        if asked.context_id is not None:
            fields["metadata"]["context_id"] = asked.context_id
        if self._takeover is not None:
            fields["message_id"] = self._takeover.journal.answer_id(record.id, asked.question_id)
        request = RequestEnvelope.model_validate(fields)
        return await self._traced(span, request, timeout, record, tried, False)

    def _fields(
        self,
        step_id: str,
        receiver: str,
        action: str,
        parameters: dict[str, Any],
        timeout: float,
        *,
        reader: str | None,
    ) -> tuple[Any, dict[str, Any]]:
        metadata: dict[str, Any] = {
            "deadline": utcnow() + timedelta(seconds=timeout),
            NOTIFY_START: True,
            "plan_id": self._plan_id,
            "subtask_id": step_id,
        }
        if reader is not None:  # the files are for the step that takes them, or the requester
            metadata[ARTIFACT_READER] = reader
        # The plan's trace (its run_plan request's) goes on to every subtask.
        span = start_span(
            f"plan step {step_id}",
            "internal",
            self._trace,
            {"agentbus.plan.id": self._plan_id, "agentbus.subtask.id": step_id},
        )
        trace = child_trace(span, self._trace)
        if trace is not None:
            metadata["trace"] = trace
        fields: dict[str, Any] = {
            "sender_id": self._bus.agent_id,
            "receiver_id": receiver,
            "payload": {"action": action, "parameters": parameters},
            "metadata": metadata,
        }
        return span, fields

    async def _traced(
        self,
        span: Any,
        request: RequestEnvelope,
        timeout: float,
        record: SubtaskRecord,
        tried: set[str],
        in_flight: bool,
    ) -> AttemptResult:
        result: AttemptResult | None = None
        try:
            result = await self._send(request, timeout, record, tried, asked_before=in_flight)
        finally:
            outcome = "cancelled" if result is None else "success"
            if isinstance(result, Failed):
                outcome = result.error.code
            end_span(span, outcome)
        return result

    async def _send(
        self,
        request: RequestEnvelope,
        timeout: float,
        record: SubtaskRecord,
        tried: set[str],
        *,
        asked_before: bool = False,
    ) -> AttemptResult:
        flight = self._holders.track(request.message_id, asyncio.current_task())

        def on_progress(notice: ResponseEnvelope) -> None:
            holder = notice.sender_id
            update = notice.payload.result if isinstance(notice.payload.result, dict) else {}
            state = str(update.get("state", "started"))
            if state == "started" or flight.holder != holder:  # its first word: it holds it
                if self._holders.hand_to(flight, holder):
                    record.attempts += 1  # the broker redelivered it to another instance
                tried.add(holder)
                record.add_agent(holder)
                self._emit(record, "running", agent_id=holder)
            if state != "started":  # the skill's own progress, or a partial result
                detail = {k: v for k, v in update.items() if k not in ("state", "agent_id")}
                self._emit(record, state, agent_id=holder, detail=detail)

        try:
            # Awaited in this task, no second one: agent_offline cancels this task.
            if self._takeover is not None:
                reply = await self._takeover.send(
                    request,
                    timeout,
                    on_progress,
                    flight,
                    subtask_id=record.id,
                    sent_before=asked_before,
                )
            else:
                reply = await self._bus.send_request(
                    request, timeout=timeout, on_progress=on_progress
                )
            return Answered.of(reply)
        except InputRequired as exc:
            tried.add(exc.envelope.sender_id)
            record.add_agent(exc.envelope.sender_id)
            return Asked(exc.question)
        except RemoteError as exc:
            tried.add(exc.envelope.sender_id)
            record.add_agent(exc.envelope.sender_id)
            return Failed(SubtaskError.of(exc))
        except AgentBusError as exc:
            return Failed(SubtaskError.of(exc))
        except asyncio.CancelledError:
            if self._takeover is not None and self._takeover.is_handed_over:
                raise  # the work runs on: the next leader takes its answer
            if flight.offline and flight.task is not None and flight.task.uncancel() == 0:
                # Cancelled by agent_offline alone: tell the holder to stop, move on.
                await self._send_cancel(flight)
                return Failed(SubtaskError.holder_offline(flight.holder), holder_gone=True)
            # The plan is stopping: tell whoever holds the work to stop too.
            await asyncio.shield(self._send_cancel(flight))
            raise
        finally:
            self._holders.release(flight)

    async def _send_cancel(self, flight: Flight) -> None:
        # To the instance holding the work when known, else to everyone: whoever has it stops.
        await send_cancel(self._bus, flight.message_id, holder=flight.holder, log=self._log)

    async def _receiver(self, subtask: Subtask, tried: set[str]) -> str:
        if subtask.service is not None:
            return subtask.service
        agents = await self._directory.capable(subtask.skill, fresh=bool(tried))
        if not tried:
            return agents[0].service
        others = [agent for agent in agents if agent.agent_id not in tried]
        # Prefer an instance that has not failed this subtask yet; else the whole pool.
        return others[0].agent_id if others else agents[0].service

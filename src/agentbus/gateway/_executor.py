"""The A2A executor of the gateway: a task is one bus request, its replies are the task's events.

``in_progress`` replies and what the executor's ``Follow`` hands on (a plan's progress) are
status updates (``working``), in the order they came; a skill's partial results
(``partial`` replies, and a plan's ``partial`` transitions) are also chunks of an artifact
of their own, appended one after the other and marked ``agentbus.partial`` in its metadata.
The response is an artifact (marked not partial) and ``completed``;
an error envelope (or a bus error) is ``failed`` with a message carrying the wire error code.
Cancelling a task sends the bus ``cancel`` to the agent holding the request (or on
broadcast, before one is known). A task starts ``submitted``, then ``working``; one whose
caller waits for its end (a blocking ``SendMessage``) is told once, whole, as it ends (one
event for the SDK to record, not four), unless an update comes first: then it is told
``working`` from that update on.

A question the work asks (``InputRequired``) ends the task's turn waiting for input
(``_questions``); a follow-up message on that task runs again, as the answer, sent from
the same caller's bus to the service that asked: its reply goes on with the same task.
The task's A2A context id is each request's ``metadata.context_id``. A plan's question
(its ``input_required`` transition) makes the task wait for input while the plan runs on;
its answer (``answer_plan``) lets the plan go on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from a2a.helpers import new_data_part, new_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as a2a

from agentbus._exceptions import AgentBusError, InputRequired, RemoteError, RequestTimeout
from agentbus._http import Callers
from agentbus._logging import get_logger
from agentbus.agents import NOTIFY_START, send_cancel
from agentbus.bus import Transport
from agentbus.envelopes import (
    ANSWER_ACTION,
    ErrorCode,
    Question,
    RequestEnvelope,
    ResponseEnvelope,
    utcnow,
)
from agentbus.gateway._files import Files, result_files
from agentbus.gateway._follow import Chunk, Follow, Unfollowed, Update
from agentbus.gateway._parts import BusCall, result_parts
from agentbus.gateway._questions import (
    answer_of,
    context_of,
    plan_question,
    question_message,
    question_of,
    waiting_state,
)
from agentbus.gateway._tasks import OpenTasks
from agentbus.gateway._telling import Telling

__all__ = ["CALL_KEY", "PARTIAL_KEY", "WAITED_KEY", "BusExecutor", "error_message"]

CALL_KEY = "agentbus.call"
"""Call-context state key: the ``BusCall`` the request handler made of the message."""
WAITED_KEY = "agentbus.waited"
"""Call-context state key: true when the caller waits for the task's end (a blocking
``SendMessage``): its task is told once, whole, as it ends, or as working from its first
update on."""
PARTIAL_KEY = "agentbus.partial"
"""Artifact metadata key: true on an artifact of partial results, false on the result's."""

_log = get_logger("agentbus.gateway")
_DECLINE_WAIT = 5.0  # seconds a closing gateway waits for the declines it sent


@dataclass(slots=True)
class _Flight:
    bus: Transport
    message_id: str
    telling: Telling
    context: ServerCallContext
    holder: str | None = None
    cancelled: bool = False


class BusExecutor(AgentExecutor):
    """Runs A2A tasks as bus requests from the caller's identity.

    ``follow`` says how a call goes on the bus and what its task follows besides the
    request's replies (``PlanProgress``: the leader's plans); by default, nothing.
    """

    def __init__(
        self,
        callers: Callers,
        open_tasks: OpenTasks,
        *,
        timeout: float,
        follow: Follow | None = None,
        files: Files | None = None,
    ) -> None:
        self._callers = callers
        self._files = files or Files(None)
        self._open = open_tasks
        self._timeout = timeout
        self._follow: Follow = follow or Unfollowed()
        self._flights: dict[str, _Flight] = {}
        self._declines: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<BusExecutor flights={len(self._flights)}>"

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        key = context.message.message_id if context.message is not None else ""
        self._open.claim(key)
        try:
            current = context.current_task
            if current is None:
                await self._run(context, event_queue, None)
                return
            question = question_of(current)
            # Not waiting (a second follow-up came after the first was taken): nothing to do.
            if question is not None:
                await self._run(context, event_queue, question, context_id=current.context_id)
        finally:
            self._open.release(key)

    async def _run(
        self,
        context: RequestContext,
        event_queue: EventQueue,
        question: Question | None,
        *,
        context_id: str | None = None,
    ) -> None:
        """Run a turn of the task: its request (``question`` None), or the answer to
        ``question`` that the follow-up message gives, in the task's ``context_id``."""
        state = context.call_context.state
        task_id = context.task_id or ""
        context_id = context_id or context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        waited = state.get(WAITED_KEY) is True
        resumed = question is not None
        telling = Telling(context, event_queue, updater, waited=waited, resumed=resumed)
        flight: _Flight | None = None
        try:
            if not waited or resumed:
                await telling.start()
            bus = await self._callers.bus(context.call_context.user.user_name)
            if question is None:
                call = self._follow.prepare(state[CALL_KEY], task_id)
                call = await self._files.store(bus, call)
                envelope = self._envelope(bus, call, task_id, context_id)
            else:
                call = BusCall(question.service, question.action, {})
                envelope = self._answer(bus, question, context, task_id, context_id)
            flight = self._flights[task_id] = _Flight(
                bus, envelope.message_id, telling, context.call_context
            )
            reply = await self._request(flight, envelope, call, telling)
            if flight.cancelled:
                if not telling.told:  # the gateway closed before anything was told
                    await telling.end(a2a.TaskState.TASK_STATE_CANCELED)
                return
            artifact = a2a.Artifact(
                artifact_id=str(uuid.uuid4()),
                name=call.skill,
                parts=await result_files(bus, reply.payload.result)
                or result_parts(reply.payload.result),
            )
            artifact.metadata.update({PARTIAL_KEY: False})
            await telling.end(a2a.TaskState.TASK_STATE_COMPLETED, artifact=artifact)
        except InputRequired as asked:
            await _asked(asked.question, flight, telling)
        except AgentBusError as exc:
            await _failed(exc, flight, telling)
        finally:
            self._flights.pop(task_id, None)

    def _envelope(
        self, bus: Transport, call: BusCall, task_id: str, context_id: str
    ) -> RequestEnvelope:
        metadata: dict[str, Any] = {
            "deadline": utcnow() + timedelta(seconds=self._timeout),
            NOTIFY_START: True,
            "a2a_task_id": task_id,
        }
        conversation = context_of(context_id)
        if conversation is not None:
            metadata["context_id"] = conversation
        return RequestEnvelope.model_validate(
            {
                "sender_id": bus.agent_id,
                "receiver_id": call.service,
                "payload": {"action": call.skill, "parameters": call.parameters},
                "metadata": metadata,
            }
        )

    def _answer(
        self,
        bus: Transport,
        question: Question,
        context: RequestContext,
        task_id: str,
        context_id: str,
    ) -> RequestEnvelope:
        # Built here, not by ``bus.answer``: its id is what a cancel names.
        assert context.message is not None
        parameters = {
            "question_id": question.question_id,
            "answer": answer_of(context.message, question),
        }
        call = BusCall(question.service, ANSWER_ACTION, parameters)
        return self._envelope(bus, call, task_id, question.context_id or context_id)

    async def _request(
        self, flight: _Flight, envelope: RequestEnvelope, call: BusCall, telling: Telling
    ) -> ResponseEnvelope:
        # Updates go to a pump of their own, started with the first (most calls have none).
        pumping: list[tuple[asyncio.Queue[Update | None], asyncio.Task[None]]] = []

        def update(item: Update) -> None:
            if not pumping:
                updates: asyncio.Queue[Update | None] = asyncio.Queue()
                pumping.append((updates, asyncio.create_task(_pump(updates, telling))))
            pumping[0][0].put_nowait(item)

        def on_reply(reply: ResponseEnvelope) -> None:
            flight.holder = reply.sender_id
            report = reply.payload.result
            if isinstance(report, dict) and report.get("state") == "partial":
                update(Chunk("partial", "partial", result_parts(report.get("chunk"))))
            else:
                update({"in_progress": report})

        try:
            with self._follow.watching(flight.bus, call, update):
                return await flight.bus.send_request(
                    envelope, timeout=self._timeout, on_progress=on_reply
                )
        finally:
            for updates, pump in pumping:
                updates.put_nowait(None)
                await pump

    async def answer_plan(self, question: Question, message: a2a.Message, identity: str) -> None:
        """Give a plan's ``question`` (the leader's) the answer ``message`` brings, from
        the caller ``identity``: the task's running turn goes on with the plan.

        Raises:
            AgentBusError: the leader refused the answer (``question_closed``, ...).
        """
        bus = await self._callers.bus(identity)
        await bus.answer(question, answer_of(message, question), timeout=self._timeout)

    def decline(self, question: Question, identity: str) -> None:
        """Tell the agent that asked ``question`` that no answer comes (its task was
        cancelled), from the caller ``identity``, off the caller's path."""
        declining = asyncio.create_task(self._decline(question, identity))
        self._declines.add(declining)
        declining.add_done_callback(self._declines.discard)

    async def _decline(self, question: Question, identity: str) -> None:
        try:
            bus = await self._callers.bus(identity)
            await bus.answer(question, decline=True, timeout=self._timeout)
        except RemoteError as exc:
            if exc.code != ErrorCode.CANCELLED:  # the skill's ``ask`` raised, as it should
                _log.info("question not declined", question_id=question.question_id, error=str(exc))
        except AgentBusError as exc:
            _log.info("question not declined", question_id=question.question_id, error=str(exc))

    async def aclose(self) -> None:
        """Send the bus cancel for every request still running: the gateway is going away."""
        flights = list(self._flights.values())
        for flight in flights:
            flight.cancelled = True
        await asyncio.gather(*(_send_cancel(flight) for flight in flights))
        if self._declines:  # sent by now, mostly: their replies are not waited for long
            _, late = await asyncio.wait(list(self._declines), timeout=_DECLINE_WAIT)
            for declining in late:
                declining.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def cancelled_elsewhere(
        self, task_id: str, confirm: Callable[[ServerCallContext], Awaitable[bool]]
    ) -> bool:
        """Stop the task ``task_id`` if it runs here and ``confirm`` (given its caller's
        context) says another gateway process cancelled it in the shared store. Return
        whether it was stopped.

        Its bus request is cancelled (at the agent holding it) and the task told cancelled:
        the SDK, finding it cancelled in the store already, ends it as stored.
        """
        flight = self._flights.get(task_id)
        if flight is None or flight.cancelled or not await confirm(flight.context):
            return False
        flight.cancelled = True
        await flight.telling.end(a2a.TaskState.TASK_STATE_CANCELED)
        await _send_cancel(flight)
        return True

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        flight = self._flights.get(task_id)
        updater = TaskUpdater(event_queue, task_id, context.context_id or "")
        if flight is not None:
            flight.cancelled = True
        await updater.cancel()
        if flight is not None:
            await _send_cancel(flight)


async def _asked(question: Question, flight: _Flight | None, telling: Telling) -> None:
    # The turn ends waiting for the answer, which a follow-up message brings.
    if flight is not None and flight.cancelled:
        if not telling.told:
            await telling.end(a2a.TaskState.TASK_STATE_CANCELED)
        return
    updater = telling.updater
    message = question_message(question, task_id=updater.task_id, context_id=updater.context_id)
    await telling.end(waiting_state(question), message=message)


async def _failed(exc: AgentBusError, flight: _Flight | None, telling: Telling) -> None:
    if isinstance(exc, RequestTimeout) and flight is not None:
        await _send_cancel(flight)  # the answer would come to nobody: stop the work
    if flight is not None and flight.cancelled:
        if not telling.told:  # the gateway closed before anything was told
            await telling.end(a2a.TaskState.TASK_STATE_CANCELED)
        return  # the task says it was cancelled already
    if isinstance(exc, RemoteError):  # the agent's own error envelope
        error = exc.envelope.payload
        message = error_message(error.code, error.message, error.details)
    else:
        message = error_message(exc.code, exc.message, exc.details)
    await telling.end(a2a.TaskState.TASK_STATE_FAILED, message=message)


async def _pump(updates: asyncio.Queue[Update | None], telling: Telling) -> None:
    # In arrival order: status updates, and each partial appended to its artifact (the
    # task's start told first, if it was not).
    updater = telling.updater
    started: set[str] = set()
    while (update := await updates.get()) is not None:
        await telling.start()
        if isinstance(update, Chunk):
            await updater.add_artifact(
                update.parts,
                artifact_id=update.artifact_id,
                name=update.name,
                metadata={PARTIAL_KEY: True},
                append=update.artifact_id in started,
            )
            started.add(update.artifact_id)
        else:
            state, message = _status(update, updater)
            await updater.update_status(state, message=message)


def _status(data: dict[str, Any], updater: TaskUpdater) -> tuple[a2a.TaskState, a2a.Message]:
    # A plan's question makes the task wait for input (its answer, a follow-up message the
    # handler takes, lets the plan go on here); any other update is working.
    question = plan_question(data)
    if question is None:
        return a2a.TaskState.TASK_STATE_WORKING, _working(data, updater)
    progress = new_data_part(data, media_type="application/json")
    message = question_message(
        question, task_id=updater.task_id, context_id=updater.context_id, before=[progress]
    )
    return waiting_state(question), message


def _working(data: dict[str, Any], updater: TaskUpdater) -> a2a.Message:
    # The data as it came; a progress report's message also as text, for people.
    parts = [new_data_part(data, media_type="application/json")]
    report = data.get("in_progress")
    if isinstance(report, dict) and isinstance(report.get("message"), str):
        parts.append(new_text_part(report["message"], media_type="text/plain"))
    return new_message(parts, context_id=updater.context_id, task_id=updater.task_id)


async def _send_cancel(flight: _Flight) -> None:
    # To the instance holding the request when known, else to everyone: whoever has it stops.
    await send_cancel(flight.bus, flight.message_id, holder=flight.holder, log=_log)


def error_message(code: str, message: str, details: dict[str, Any]) -> a2a.Message:
    """Return the status message of a failed task: the wire error as text and as data."""
    return new_message(
        [
            new_text_part(f"{code}: {message}", media_type="text/plain"),
            new_data_part(
                {"code": code, "message": message, "details": details},
                media_type="application/json",
            ),
        ]
    )

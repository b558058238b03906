"""A tool call is one bus request: its replies are progress notifications, its answer the result.

The request goes from the caller's bus with a deadline and ``notify_start`` (so the server
learns which instance holds it). Each ``in_progress`` reply (started, progress, a partial
result) and, for ``run_plan``, each transition of the plan is a progress notification, in
the order they came. The response is the tool's result; an error envelope or a bus error
(timeout, no instance, unroutable) a tool error carrying the wire code. A client's
cancellation (``notifications/cancelled``) cancels the bus request: the ``cancel`` goes to
the instance holding it, or on broadcast before one is known.

A question the work asks (``agentbus.ask``: the request is answered ``input_required``)
goes to the client (``_elicit``); its reply is sent as the question's answer (the
built-in ``answer_question``, one more bus request like the first), and so on until the
work ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import mcp_types as types
import orjson

from agentbus._exceptions import AgentBusError, InputRequired, RemoteError, RequestTimeout
from agentbus._http import PlanWatch
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
from agentbus.leader import Leader, Progress
from agentbus.mcp._elicit import Elicitor, PlanQuestions, Reply
from agentbus.mcp._files import embed_files
from agentbus.mcp._notify import Notifier
from agentbus.mcp._tools import Route, Tool, tool_error, tool_result

__all__ = ["Calls"]

_log = get_logger("agentbus.mcp")

Update = tuple[str, dict[str, Any]]
"""One progress notification: its message, and the bus update it tells."""
Outcome = types.CallToolResult | types.InputRequiredResult


@dataclass(frozen=True, slots=True)
class Client:
    """The client of one tool call: who hears its progress, who answers its questions."""

    notifier: Notifier
    elicitor: Elicitor


@dataclass(slots=True)
class _Flight:
    bus: Transport
    message_id: str
    holder: str | None = None


class Calls:
    """Runs tool calls as bus requests; ``aclose`` cancels those still running on the bus."""

    def __init__(self, plans: PlanWatch, *, timeout: float, max_embedded_size: int) -> None:
        self._plans = plans
        self._timeout = timeout
        self._max_embedded = max_embedded_size
        self._flights: dict[str, _Flight] = {}
        self._cancels: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<Calls flights={len(self._flights)}>"

    async def call(
        self, bus: Transport, tool: Tool, arguments: dict[str, Any], client: Client
    ) -> Outcome:
        """Send ``arguments`` to ``tool``'s skill from ``bus``; return the tool's result.

        Each question the work asks goes to ``client.elicitor`` (``_elicit``): its reply
        answers it, and the work's next step is awaited in turn; or the question ends the
        call (the round's end that asks it, in the 2026-07-28 era; a tool error).
        """
        try:
            reply = client.elicitor.resumed()
        except ValueError as exc:
            return tool_error(ErrorCode.INVALID_PARAMETERS, str(exc), {})
        if reply is None:
            envelope = self._envelope(bus, tool, arguments)
        else:  # a 2026-07-28 retry, with the client's reply to the question its round asked
            envelope = self._answer(bus, reply)
        while True:
            outcome = await self._send(bus, tool.route, envelope, client)
            if not isinstance(outcome, Question):
                return outcome
            step = await client.elicitor.ask(outcome)
            if not isinstance(step, Reply):
                return step
            envelope = self._answer(bus, step)

    async def _send(
        self, bus: Transport, route: Route, envelope: RequestEnvelope, client: Client
    ) -> types.CallToolResult | Question:
        # One bus request: its result, its error as a tool error, or the question it asks.
        flight = self._flights[envelope.message_id] = _Flight(bus, envelope.message_id)
        updates: asyncio.Queue[Update | None] = asyncio.Queue()
        pump = asyncio.create_task(_pump(updates, client.notifier))
        outcome: types.CallToolResult | Question
        try:
            reply = await self._request(flight, envelope, updates, client.elicitor)
            if isinstance(reply, types.CallToolResult):
                outcome = reply  # a plan's question the client cannot be asked
            else:
                result = reply.payload.result
                outcome = await embed_files(
                    bus, result, tool_result(route, result), self._max_embedded
                )
        except InputRequired as asked:
            outcome = asked.question
        except AgentBusError as exc:
            outcome = self._failed(exc, flight)
        except asyncio.CancelledError:
            pump.cancel()
            self._cancel(flight)  # the client cancelled the call: so is the bus request
            raise
        finally:
            self._flights.pop(envelope.message_id, None)
        updates.put_nowait(None)
        await pump  # every notification goes out before the result
        return outcome

    def _failed(self, exc: AgentBusError, flight: _Flight) -> types.CallToolResult:
        if isinstance(exc, RemoteError):  # the agent's own error envelope
            error = exc.envelope.payload
            return tool_error(error.code, error.message, error.details)
        if isinstance(exc, RequestTimeout):
            self._cancel(flight)  # the answer would come to nobody: stop the work
        return tool_error(exc.code, exc.message, exc.details)

    def _envelope(self, bus: Transport, tool: Tool, arguments: dict[str, Any]) -> RequestEnvelope:
        route = tool.route
        plan = Leader.plan_of(route.action, arguments) if route.plans else None
        if plan is not None and "id" not in plan:
            # A plan needs an id to follow its progress.
            arguments = {**arguments, "plan": {**plan, "id": f"mcp-{uuid.uuid4().hex[:12]}"}}
        return self._request_to(bus, route.service, route.action, arguments)

    def _answer(self, bus: Transport, reply: Reply) -> RequestEnvelope:
        # The client's reply to a question, as ``bus.answer`` sends it: its reply is the
        # work's next step (the result, another question, or an error).
        parameters: dict[str, Any] = {"question_id": reply.question_id}
        if reply.declined:
            parameters["decline"] = True
        else:
            parameters["answer"] = reply.value
        return self._request_to(bus, reply.service, ANSWER_ACTION, parameters, reply.context_id)

    def _request_to(
        self,
        bus: Transport,
        receiver: str,
        action: str,
        parameters: dict[str, Any],
        context_id: str | None = None,
    ) -> RequestEnvelope:
        metadata: dict[str, Any] = {
            "deadline": utcnow() + timedelta(seconds=self._timeout),
            NOTIFY_START: True,
        }
        if context_id is not None:
            metadata["context_id"] = context_id
        return RequestEnvelope.model_validate(
            {
                "sender_id": bus.agent_id,
                "receiver_id": receiver,
                "payload": {"action": action, "parameters": parameters},
                "metadata": metadata,
            }
        )

    async def _request(
        self,
        flight: _Flight,
        envelope: RequestEnvelope,
        updates: asyncio.Queue[Update | None],
        elicitor: Elicitor,
    ) -> ResponseEnvelope | types.CallToolResult:
        def on_reply(reply: ResponseEnvelope) -> None:
            flight.holder = reply.sender_id
            report = reply.payload.result
            if isinstance(report, dict):
                updates.put_nowait((_report_message(report), {"in_progress": report}))

        plan = Leader.plan_of(envelope.payload.action, envelope.payload.parameters)
        if plan is None:
            return await flight.bus.send_request(
                envelope, timeout=self._timeout, on_progress=on_reply
            )
        questions = PlanQuestions(flight.bus, elicitor, timeout=self._timeout)

        def on_plan(progress: Progress) -> None:
            transition = progress.model_dump(mode="json")
            updates.put_nowait((_transition_message(progress), {"plan_progress": transition}))
            questions.heard(progress)

        with self._plans.watching(flight.bus, str(plan["id"]), on_plan):
            try:
                return await _until_told(
                    flight.bus.send_request(envelope, timeout=self._timeout, on_progress=on_reply),
                    questions.told,
                )
            finally:
                questions.close()

    def _cancel(self, flight: _Flight) -> None:
        # In a task of its own: the caller's task is being cancelled, and every await in it
        # would be. ``aclose`` waits for the cancels still being sent.
        task = asyncio.create_task(
            send_cancel(flight.bus, flight.message_id, holder=flight.holder, log=_log)
        )
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    async def aclose(self) -> None:
        """Send the bus cancel for every call still running: the server is going away."""
        for flight in list(self._flights.values()):
            self._cancel(flight)
        await asyncio.gather(*self._cancels, return_exceptions=True)


async def _until_told(
    request: Coroutine[Any, Any, ResponseEnvelope], told: asyncio.Future[types.CallToolResult]
) -> ResponseEnvelope | types.CallToolResult:
    # The plan's response; or, told first, the tool error that ends the call (the plan
    # goes on: no bus cancel, the request is only no longer waited for).
    waiting = asyncio.ensure_future(request)
    either: set[asyncio.Future[Any]] = {waiting, told}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not waiting.done():
            waiting.cancel()
    return waiting.result() if waiting.done() and not waiting.cancelled() else told.result()


async def _pump(updates: asyncio.Queue[Update | None], notifier: Notifier) -> None:
    while (update := await updates.get()) is not None:
        await notifier.send(*update)


def _report_message(report: dict[str, Any]) -> str:
    # For people: what the agent said; a partial result is the chunk itself (JSON unless text).
    state = report.get("state")
    if state == "partial":
        chunk = report.get("chunk")
        return chunk if isinstance(chunk, str) else orjson.dumps(chunk).decode()
    if state == "progress":
        fraction = report.get("fraction")
        message = str(report.get("message") or "working")
        return f"{message} ({fraction:.0%})" if isinstance(fraction, int | float) else message
    return f"{state} on {report.get('agent_id')}"


def _transition_message(progress: Progress) -> str:
    # A subtask's transition; a progress report's words or a partial result's chunk with it.
    said = ""
    if progress.detail is not None and progress.transition in ("progress", "partial"):
        said = " " + _report_message({"state": progress.transition, **progress.detail})
    return (
        f"{progress.subtask_id} ({progress.skill}): {progress.transition}{said}"
        f" [{progress.done}/{progress.total}]"
    )

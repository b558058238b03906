"""A bus question, asked of the MCP client whose tool call raised it.

A client that declared form elicitation is asked with a form (``_forms``): in the 2025
era mid-call (``elicitation/create``, related to the call), in the 2026-07-28 era by
ending the round with ``InputRequiredResult``, whose ``request_state`` names the
question; the client's retry of the call carries the filled form (``input_responses``),
and the question is answered with it. Either way the reply is the client's: an answer,
or a decline (the client declined or cancelled the form).

Any other client, or a question no form can ask, gets the tool error ``input_required``
at once: the question (``details.question``), left open, and the command that answers it.

A plan's questions (``run_plan``: a step's question comes as the plan's progress, asked
by the leader) are asked beside the call, which goes on waiting for the plan
(``PlanQuestions``); the reply is the leader's answer. A client that cannot be asked so
ends the call with the tool error, the plan left running.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import is_version_at_least

from agentbus._exceptions import AgentBusError
from agentbus._logging import get_logger
from agentbus.bus import Transport
from agentbus.envelopes import ErrorCode, Question, utcnow
from agentbus.leader import Progress
from agentbus.mcp._forms import Form, form_of
from agentbus.mcp._tools import tool_error

__all__ = ["INPUT_KEY", "Elicitor", "PlanQuestions", "Reply", "unanswered"]

MODERN_ERA: Final = "2026-07-28"
"""The first protocol version whose calls ask for input by ``InputRequiredResult``."""
INPUT_KEY: Final = "agentbus/question"
"""The key of the one input request an ``InputRequiredResult`` of this server carries."""
_STATE: Final = 1
_log = get_logger("agentbus.mcp")
_SHOWN_DATA: Final = 2000  # characters of a question's data shown in the form's message

Outcome = types.CallToolResult | types.InputRequiredResult


@dataclass(frozen=True, slots=True)
class Reply:
    """What the client said to a question: its answer (``value``), or a decline."""

    question_id: str
    service: str
    """Where the answer goes (the question's ``service``)."""
    context_id: str | None = None
    value: Any = None
    declined: bool = False


@dataclass(frozen=True, slots=True)
class _Pending:
    """A question asked in the 2026-07-28 era, as ``request_state`` carries it to the retry."""

    tool: str
    question_id: str
    service: str
    context_id: str | None
    field: str | None

    def encode(self) -> str:
        return orjson.dumps({"v": _STATE, **asdict(self)}).decode()

    @classmethod
    def decode(cls, state: str) -> _Pending:
        try:
            fields = orjson.loads(state)
            if fields.pop("v") != _STATE:
                raise ValueError("a state of another version")
            return cls(**fields)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"a request_state this server did not give: {exc}") from None


class Elicitor:
    """Asks one tool call's client the questions its bus request raises."""

    def __init__(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> None:
        self._ctx = ctx
        self._params = params
        self.is_modern = is_version_at_least(ctx.protocol_version, MODERN_ERA)

    def __repr__(self) -> str:
        return f"<Elicitor {self._ctx.protocol_version} {self._params.name}>"

    def cannot(self) -> str | None:
        """Why this call cannot ask its client with a form; None: it can."""
        if not self.is_modern and not self._ctx.session.can_send_request:
            # Checked first: a stateless endpoint does not know what the client declared.
            return "this connection carries no request to its client (a stateless endpoint)"
        capabilities = self._ctx.session.client_capabilities
        elicitation = capabilities.elicitation if capabilities is not None else None
        # A bare ``elicitation: {}`` (before modes) is form mode; URL mode alone is not.
        if elicitation is None or (elicitation.form is None and elicitation.url is not None):
            return "the client takes no form elicitation"
        return None

    def resumed(self) -> Reply | None:
        """The reply a 2026-07-28 retry of the call carries; None for a first call.

        Raises:
            ValueError: the retry's state or response is not one this server asked for.
        """
        state = self._params.request_state
        if state is None:
            return None
        pending = _Pending.decode(state)
        if pending.tool != self._params.name:
            raise ValueError(f"a request_state of the tool {pending.tool!r}")
        response = (self._params.input_responses or {}).get(INPUT_KEY)
        if not isinstance(response, types.ElicitResult):
            raise ValueError("the retry carries no response to the question")
        asked = Reply(pending.question_id, pending.service, pending.context_id)
        return _reply(asked, Form({}, pending.field), response)

    async def ask_aside(self, question: Question) -> Reply | types.CallToolResult:
        """Ask ``question`` while the call's bus request goes on (a plan's question): the
        client's reply, or the tool error that says it must be answered elsewhere (in the
        2026-07-28 era a call asks only by ending its round, which would leave the plan)."""
        if self.is_modern:
            return unanswered(question, "a 2026-07-28 call cannot ask while its plan runs")
        asked = await self.ask(question)
        assert not isinstance(asked, types.InputRequiredResult)  # 2025 era: asked mid-call
        return asked

    async def ask(self, question: Question) -> Reply | Outcome:
        """Ask ``question``: the client's reply (2025 era), the round's end that asks it
        (2026-07-28 era), or the tool error that says it must be answered elsewhere."""
        try:
            form = form_of(question.answer_schema)
        except ValueError as exc:
            return unanswered(question, f"no MCP form can ask it: {exc}")
        why = self.cannot()
        if why is not None:
            return unanswered(question, why)
        request = types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=message_of(question), requested_schema=form.schema
            )
        )
        if self.is_modern:
            pending = _Pending(
                self._params.name,
                question.question_id,
                question.service,
                question.context_id,
                form.field,
            )
            return types.InputRequiredResult(
                input_requests={INPUT_KEY: request}, request_state=pending.encode()
            )
        return await self._elicit(question, form, request)

    async def _elicit(
        self, question: Question, form: Form, request: types.ElicitRequest
    ) -> Reply | Outcome:
        session = self._ctx.session
        related = ServerMessageMetadata(related_request_id=self._ctx.request_id)
        wait = (question.expires_at - utcnow()).total_seconds() if question.expires_at else None
        try:
            async with asyncio.timeout(wait):
                response = await session.send_request(request, types.ElicitResult, metadata=related)
        except TimeoutError:
            return tool_error(
                ErrorCode.TIMEOUT,
                f"no answer to the question before it expired: {question.text}",
                {"question": question.model_dump(mode="json")},
            )
        except MCPError as exc:
            return unanswered(question, f"the client did not ask it: {exc.error.message}")
        asked = Reply(question.question_id, question.service, question.context_id)
        return _reply(asked, form, response)


def _reply(asked: Reply, form: Form, response: types.ElicitResult) -> Reply:
    if response.action != "accept":  # declined, or dismissed: the same to the skill
        return replace(asked, declined=True)
    return replace(asked, value=form.answer(response.content))


def message_of(question: Question) -> str:
    """The form's message: the question, why the last answer did not fit, what it is about."""
    parts = [question.text]
    if question.rejected:
        errors = question.rejected.get("errors") or []
        said = "; ".join(f"{e.get('field')}: {e.get('error')}" for e in errors)
        parts.append(f"(The last answer did not fit: {said or 'asked again'}.)")
    if question.data:
        shown = orjson.dumps(question.data).decode()
        parts.append(shown if len(shown) <= _SHOWN_DATA else shown[:_SHOWN_DATA] + "...")
    return "\n\n".join(parts)


def unanswered(question: Question, why: str) -> types.CallToolResult:
    """The tool error ``input_required``: ``question``, left open, and how to answer it."""
    ident = question.question_id
    plan = question.plan_id
    if plan is not None:
        why = f"{why}; the plan {plan} goes on meanwhile: `agentbus plan status {plan}`"
    return tool_error(
        ErrorCode.INPUT_REQUIRED,
        f"{question.text} (question {ident}; {why}; answer with `agentbus answer {ident} ANSWER`)",
        {"question": question.model_dump(mode="json"), "reason": why},
    )


class PlanQuestions:
    """The questions of a plan a call runs: each asked of the client as it comes, its
    reply sent to the leader; ``told`` is set when one ends the call instead."""

    def __init__(self, bus: Transport, elicitor: Elicitor, *, timeout: float) -> None:
        self._bus = bus
        self._elicitor = elicitor
        self._timeout = timeout
        self._asking: set[asyncio.Task[None]] = set()
        self.told: asyncio.Future[types.CallToolResult] = asyncio.get_running_loop().create_future()

    def __repr__(self) -> str:
        return f"<PlanQuestions asking={len(self._asking)}>"

    def heard(self, progress: Progress) -> None:
        """Ask the question a transition of the plan tells of (``input_required``)."""
        if progress.transition != "input_required" or progress.detail is None:
            return
        question = Question.model_validate(progress.detail.get("question"))
        task = asyncio.create_task(self._ask(question))
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)

    async def _ask(self, question: Question) -> None:
        step = await self._elicitor.ask_aside(question)
        if not isinstance(step, Reply):
            if not self.told.done():
                self.told.set_result(step)
            return
        try:
            await self._bus.answer(
                step.question_id, step.value, decline=step.declined, timeout=self._timeout
            )
        except AgentBusError as exc:  # answered elsewhere first, expired...: the plan says
            _log.warning("plan question not answered", question_id=step.question_id, error=str(exc))

    def close(self) -> None:
        """Stop asking: the call ends."""
        for task in self._asking:
            task.cancel()

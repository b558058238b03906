"""An external A2A agent on the bus: its card's skills offered as bus skills, calls forwarded.

The bus agent fetches the A2A card, offers each A2A skill under the same name (with the
card's JSON Schemas when it carries agentbus's schema extension, else an object whose
``text`` goes as a text part and anything else as one data part), heartbeats like any agent,
and forwards each request with the SDK's client. A working update's text is reported as
progress (``report_progress``), each streamed artifact chunk sent as a partial result
(``send_partial``) unless marked ``agentbus.partial: false`` (a gateway's result). The
artifacts are the result (an artifact of text parts, as streamed in chunks, is one text;
artifacts marked ``agentbus.partial: true`` are left out), a failed or rejected task an
error envelope (its code when the status message carries one), and a bus ``cancel``
cancels the A2A task. A task that waits for input asks its question on the bus
(``_remote_asking``), and the answer goes back on the same task. Files go both ways: a
parameter that is an artifact is sent as a file part (its bytes, read and checked, named by
``metadata.parameter``), and a file part of the answer (bytes, or a URL fetched as it is
stored) becomes an artifact stored for the caller, its reference in the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.helpers import get_data_parts, new_data_part, new_message, new_text_part
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict
from jsonschema import Draft202012Validator

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError, Cancelled, QuestionDeclined
from agentbus._http import SchemaSkill
from agentbus.agents import Agent, SkillMark, ask, remember, report_progress, send_partial
from agentbus.bus import Artifact, put_artifact
from agentbus.envelopes import ErrorCode
from agentbus.gateway._cards import skill_schemas
from agentbus.gateway._executor import PARTIAL_KEY
from agentbus.gateway._parts import PARAMETER_KEY, SKILL_KEY, from_json
from agentbus.gateway._questions import WAITING
from agentbus.gateway._remote_asking import Asks, answer_message, answer_type, asks

__all__ = ["RemoteA2AAgent"]

_FREE_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "sent as an A2A text part"}},
    "additionalProperties": True,
    "description": "text goes as a text part; other parameters as one data part",
}
_FAILED = {a2a.TaskState.TASK_STATE_FAILED, a2a.TaskState.TASK_STATE_REJECTED}
_TURN_ENDS = {*_FAILED, *WAITING, a2a.TaskState.TASK_STATE_COMPLETED}
_TURN = "a2a.turn."  # remembered: each turn's outcome, by its number
_NOT_ID = re.compile(r"[^A-Za-z0-9_-]+")

_FIRST_PAUSE = 0.2  # seconds between tries for the card, doubling
_MAX_PAUSE = 2.0
_NAMED_WITHIN = 5.0  # s: how long a cancelled forward waits for the remote task's id


class RemoteA2AAgent(Agent):
    """A bus agent fronting the A2A agent at a URL; build it with ``from_url``."""

    name = "a2a"
    description = "An external A2A agent"

    remote_card: a2a.AgentCard
    url: str

    def __init__(self, *, key: str | None = None, timeout: float = 300.0, **options: Any) -> None:
        super().__init__(**options)
        self._key = key
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None

    @classmethod
    def for_card(
        cls, card: a2a.AgentCard, url: str, *, service: str | None = None
    ) -> type[RemoteA2AAgent]:
        """Return the agent class offering ``card``'s skills as the service ``service``."""
        name = service or _as_id(card.name)
        attributes: dict[str, Any] = {
            "name": name,
            "description": card.description or f"the A2A agent at {url}",
            "version": card.version or "0.0.0",
            "tags": ("a2a",),
            "remote_card": card,
            "url": url,
        }
        agent_class: type[RemoteA2AAgent] = type(f"RemoteA2AAgent_{name}", (cls,), attributes)
        agent_class.skills = {skill.id: _RemoteSkill(skill, card) for skill in card.skills}
        return agent_class

    @classmethod
    async def from_url(
        cls,
        url: str,
        *,
        service: str | None = None,
        key: str | None = None,
        settings: Settings | None = None,
        wait: float = 0.0,
        **options: Any,
    ) -> RemoteA2AAgent:
        """Fetch the A2A card at ``url`` and return an agent offering its skills.

        ``wait``: seconds to keep trying while the A2A server does not answer yet (one
        started just before, say), backing off from 0.2 s to 2 s between tries.

        Raises:
            AgentBusError: the card cannot be fetched (``agent_unavailable``).
        """
        deadline = asyncio.get_running_loop().time() + wait
        pause = _FIRST_PAUSE
        async with httpx.AsyncClient(headers=_auth(key), timeout=30) as http:
            while True:
                try:
                    card = await A2ACardResolver(http, url).get_agent_card()
                    break
                except (A2AClientError, httpx.HTTPError) as exc:
                    if asyncio.get_running_loop().time() + pause > deadline:
                        raise AgentBusError(
                            f"no A2A agent card at {url}: {exc}",
                            code=ErrorCode.AGENT_UNAVAILABLE,
                        ) from exc
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _MAX_PAUSE)
        return cls.for_card(card, url, service=service)(key=key, settings=settings, **options)

    async def on_start(self) -> None:
        self._http = httpx.AsyncClient(
            headers=_auth(self._key), timeout=httpx.Timeout(30.0, read=self._timeout)
        )
        streaming = self.remote_card.capabilities.streaming
        config = ClientConfig(streaming=streaming, httpx_client=self._http)
        self._client = ClientFactory(config).create(self.remote_card)

    async def on_stop(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._http is not None:
            await self._http.aclose()

    async def forward(self, skill: str, parameters: dict[str, Any]) -> Any:
        """Send ``parameters`` to the A2A agent's ``skill``; return the task's result.

        A remote task that waits for input asks its question on the bus (``ask``); the
        answer goes back as a message on that task, and so on until it ends. Each turn's
        outcome is remembered: the answer that runs the skill again sends only what is new.
        """
        turn = await remember(f"{_TURN}0", functools.partial(self._first, skill, parameters))
        turns = 0
        while "result" not in turn:
            question: Asks = turn["asks"]
            answer_as = answer_type(question["schema"])
            try:
                answer = await ask(question["text"], answer_as, kind=question["kind"])
            except QuestionDeclined:
                await self._cancel_remote(question["task_id"])
                raise
            turns += 1
            message = answer_message(question, answer)
            turn = await remember(f"{_TURN}{turns}", functools.partial(self._turn, message))
        return turn["result"]

    async def _first(self, skill: str, parameters: dict[str, Any]) -> dict[str, Any]:
        return await self._turn(await _message(skill, parameters))

    async def _turn(self, message: a2a.Message) -> dict[str, Any]:
        # One message to the A2A agent, until its task ends or asks: {"result": ...} or
        # {"asks": ...}.
        remote = _RemoteTask()
        # The exchange runs in a task of its own: cancelled in its first moments, before the
        # stream has named the remote task, this call waits for the name (briefly) so that
        # the CancelTask still reaches the A2A agent.
        exchange = asyncio.ensure_future(self._exchange(message, remote))
        try:
            return await asyncio.shield(exchange)
        except asyncio.CancelledError:
            if not exchange.done():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_NAMED_WITHIN):
                        await remote.named.wait()
                exchange.cancel()
                await asyncio.gather(exchange, return_exceptions=True)
            if remote.id:
                await asyncio.shield(self._cancel_remote(remote.id))
            raise

    async def _exchange(self, message: a2a.Message, remote: _RemoteTask) -> dict[str, Any]:
        assert self._client is not None
        request = a2a.SendMessageRequest(message=message)
        try:
            task: a2a.Task | None = None
            async for event in self._client.send_message(request):
                kind = event.WhichOneof("payload")
                if kind == "task":
                    task = event.task
                    remote.name(task.id)
                elif kind == "status_update":
                    remote.name(event.status_update.task_id)
                    await self._progress(event.status_update.status)
                elif kind == "artifact_update":
                    remote.name(event.artifact_update.task_id)
                    artifact = event.artifact_update.artifact
                    if _partial(artifact) is not False:  # not marked as the whole result
                        await send_partial(await self._stored(_result(list(artifact.parts))))
                elif kind == "message":
                    return {"result": await self._stored(_result(list(event.message.parts)))}
            if task is None or task.status.state not in _TURN_ENDS:
                task = await self._client.get_task(a2a.GetTaskRequest(id=remote.id))
        except (A2AError, A2AClientError, httpx.HTTPError) as exc:
            raise AgentBusError(
                f"the A2A agent at {self.url} failed: {exc}", code=ErrorCode.AGENT_UNAVAILABLE
            ) from exc
        outcome = _outcome(task)
        if "result" in outcome:
            outcome["result"] = await self._stored(outcome["result"])
        return outcome

    async def _stored(self, value: Any) -> Any:
        # A file part of the A2A agent's answer, stored as an artifact for the caller (its
        # reference in its place); a file by URL is fetched as it is stored.
        if isinstance(value, list):
            return [await self._stored(item) for item in value]
        if not isinstance(value, a2a.Part):
            return value
        assert self._http is not None
        source = value.raw if value.WhichOneof("content") == "raw" else self._fetch(value.url)
        try:
            stored = await put_artifact(
                source,
                name=value.filename or "file",
                media_type=value.media_type or "application/octet-stream",
            )
        except httpx.HTTPError as exc:
            raise AgentBusError(
                f"the A2A agent's file at {value.url} was not fetched: {exc}",
                code=ErrorCode.AGENT_UNAVAILABLE,
            ) from exc
        return stored.wire()

    async def _fetch(self, url: str) -> AsyncIterator[bytes]:
        assert self._http is not None
        async with self._http.stream("GET", url) as response:
            response.raise_for_status()
            async for chunk in response.aiter_bytes():
                yield chunk

    async def _progress(self, status: a2a.TaskStatus) -> None:
        # A working update's text is progress (parts of the result come as artifact chunks).
        if status.state != a2a.TaskState.TASK_STATE_WORKING:
            return
        text = " ".join(part.text for part in status.message.parts if part.HasField("text"))
        if text:
            await report_progress(message=text)

    async def _cancel_remote(self, task_id: str) -> None:
        assert self._client is not None
        try:
            await self._client.cancel_task(a2a.CancelTaskRequest(id=task_id))
        except (A2AError, A2AClientError, httpx.HTTPError) as exc:
            self._log.info("A2A task not cancelled", task_id=task_id, error=str(exc))


class _RemoteTask:
    """The A2A task a forward started: its id, once the stream names it."""

    __slots__ = ("id", "named")

    def __init__(self) -> None:
        self.id = ""
        self.named = asyncio.Event()

    def name(self, task_id: str) -> None:
        if task_id and not self.id:
            self.id = task_id
            self.named.set()


class _RemoteSkill(SchemaSkill):
    """A skill of the remote card: checked against its JSON Schema, forwarded as a message."""

    def __init__(self, skill: a2a.AgentSkill, card: a2a.AgentCard) -> None:
        schemas = skill_schemas(card).get(skill.id, {})
        parameters: dict[str, Any] = schemas.get("parameters") or _FREE_FORM
        super().__init__(
            SkillMark(skill.id, skill.description or skill.name),
            parameters=parameters,
            result=schemas.get("result") or {},
            validator=Draft202012Validator(parameters),
        )

    async def run(self, agent: Any, arguments: dict[str, Any]) -> Any:
        assert isinstance(agent, RemoteA2AAgent)
        return await agent.forward(self.name, arguments)


async def _message(skill: str, parameters: dict[str, Any]) -> a2a.Message:
    # A parameter that is an artifact goes as a file part (its bytes, read and checked, and
    # its name in the part's metadata), as the gateway takes files; the rest as before.
    files = {name: value for name, value in parameters.items() if _is_artifact(value)}
    rest = {name: value for name, value in parameters.items() if name not in files}
    parts = []
    if set(rest) == {"text"} and isinstance(rest["text"], str):
        parts.append(new_text_part(rest["text"]))
    elif rest or not files:
        parts.append(new_data_part(rest))
    for name, value in files.items():
        artifact = Artifact.model_validate(value)
        part = a2a.Part(
            raw=await artifact.read(), filename=artifact.name, media_type=artifact.media_type
        )
        part.metadata.update({PARAMETER_KEY: name})
        parts.append(part)
    message = new_message(parts, role=a2a.Role.ROLE_USER)
    message.metadata.update({SKILL_KEY: skill})
    return message


def _is_artifact(value: Any) -> bool:
    return isinstance(value, dict) and value.get("kind") == "artifact"


def _outcome(task: a2a.Task) -> dict[str, Any]:
    state = task.status.state
    if state == a2a.TaskState.TASK_STATE_COMPLETED:
        results = [artifact for artifact in task.artifacts if _partial(artifact) is not True]
        values = [_artifact_value(artifact) for artifact in results]
        return {"result": values[0] if len(values) == 1 else values}
    if state in WAITING:
        return {"asks": asks(task)}
    if state == a2a.TaskState.TASK_STATE_CANCELED:
        raise Cancelled("the A2A task was cancelled")
    raise _failure(task)


def _failure(task: a2a.Task) -> AgentBusError:
    # A failed task's status message: its wire error (as a gateway sends it) when it has
    # one, else its text, else the state's name.
    state = a2a.TaskState.Name(task.status.state)
    parts = list(task.status.message.parts)
    details = next((d for d in get_data_parts(parts) if isinstance(d, dict) and "code" in d), {})
    text = " ".join(part.text for part in parts if part.HasField("text"))
    code = str(details.get("code") or ErrorCode.PROCESSING_FAILED)
    message = str(details.get("message") or text or state)
    return AgentBusError(message, code=code, details={"a2a_task": task.id, "a2a_state": state})


def _artifact_value(artifact: a2a.Artifact) -> Any:
    # Text parts only: one text, as chunks appended to it make it up; else each part's value.
    parts = list(artifact.parts)
    if len(parts) > 1 and all(part.HasField("text") for part in parts):
        return "".join(part.text for part in parts)
    return _result(parts)


def _partial(artifact: a2a.Artifact) -> bool | None:
    # Whether an agentbus gateway marked the artifact partial (True) or the result (False).
    if not artifact.HasField("metadata"):
        return None
    marked = MessageToDict(artifact.metadata).get(PARTIAL_KEY)
    return marked if isinstance(marked, bool) else None


def _result(parts: list[a2a.Part]) -> Any:
    # Text and data parts as their values; a file part as itself, for ``_stored`` to store.
    values = [_value(part) for part in parts if part.WhichOneof("content") is not None]
    if len(values) == 1:
        return values[0]
    return values


def _value(part: a2a.Part) -> Any:
    content = part.WhichOneof("content")
    if content == "text":
        return part.text
    if content == "data":
        return from_json(MessageToDict(part.data))
    return part


def _auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _as_id(name: str) -> str:
    return _NOT_ID.sub("-", name).strip("-")[:128] or "a2a-agent"

"""The agent runtime: skills served from a service queue, heartbeats, cancel, drain."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Final, Self

from agentbus._config import Settings
from agentbus._exceptions import (
    AgentBusError,
    Cancelled,
    ConfigurationError,
    InvalidParameters,
    UnknownAction,
)
from agentbus._logging import get_logger
from agentbus._loop import loop_name
from agentbus._metrics import Metrics
from agentbus.agents._asking import Asking
from agentbus.agents._cancel import CancelCause
from agentbus.agents._card import AgentCard, SkillCard
from agentbus.agents._conversation import Conversation, Deferred, Suspended
from agentbus.agents._heartbeat import (
    AGENT_OFFLINE,
    ANNOUNCE,
    HEARTBEAT,
    AgentStatus,
    Heartbeat,
    OfflineNotice,
)
from agentbus.agents._reporting import Reporter
from agentbus.agents._skills import SkillSpec, collect_skills
from agentbus.agents._traffic import Traffic
from agentbus.bus import Bus, Transport, artifact_scope, reader_of
from agentbus.envelopes import (
    ANSWER_ACTION,
    ARTIFACT_READER,
    READ_ARTIFACT,
    RequestEnvelope,
    ResponseEnvelope,
    artifact_reader,
    is_valid_id,
    utcnow,
)
from agentbus.security import default_id

__all__ = ["NOTIFY_START", "NOTIFY_START_AFTER", "Agent", "current_request"]

NOTIFY_START: Final = "notify_start"
"""Request metadata key: ``true`` asks for an ``in_progress`` response once work has begun."""
NOTIFY_START_AFTER: Final = 0.2
"""Seconds a skill runs before the agent sends the ``in_progress`` notice."""

# read_artifact is the bus's own (with peer sites), a name no skill may take.
_BUILTINS: Final = frozenset({"ping", "describe", "cancel", ANNOUNCE, ANSWER_ACTION, READ_ARTIFACT})

_HEARTBEAT_TTL_INTERVALS: Final = 3
# A goodbye (the draining heartbeat, agent_offline) is best effort: on a stalled network
# its confirm would otherwise be awaited for the whole request timeout.
_GOODBYE_TIMEOUT: Final = 2.0

_log = get_logger("agentbus.agents")
_current_request: contextvars.ContextVar[RequestEnvelope] = contextvars.ContextVar(
    "agentbus_current_request"
)


def current_request() -> RequestEnvelope:
    """Return the request the running skill is serving.

    Raises:
        LookupError: called outside a skill.
    """
    return _current_request.get()


@dataclass(slots=True)
class _Work:
    action: str
    task: asyncio.Task[Any]
    started: float = field(default_factory=time.monotonic)
    cancelled_by_request: bool = False


class Agent:
    """Base class of agents: subclass it, set ``name``, and mark async methods ``@skill``.

    ::

        class Greeter(Agent):
            name = "greeter"
            description = "Greets people"

            @skill
            async def greet(self, who: str) -> str:
                return f"hello, {who}"

    Every agent also answers ``ping``, ``describe`` (its card), ``cancel``
    (``{"message_id": ...}`` of a request in flight) and the broadcast ``announce``.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    version: ClassVar[str] = "0.1.0"
    tags: ClassVar[tuple[str, ...]] = ()
    concurrency: ClassVar[int] = 8
    skills: ClassVar[dict[str, SkillSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.skills = collect_skills(cls)
        clash = _BUILTINS & cls.skills.keys()
        if clash:
            raise ConfigurationError(f"{cls.__name__}: {sorted(clash)} are built-in actions")

    def __init__(
        self,
        *,
        agent_id: str | None = None,
        concurrency: int | None = None,
        heartbeat_interval: float = 5.0,
        settings: Settings | None = None,
        bus: Transport | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        if not is_valid_id(self.name):
            raise ConfigurationError(
                f"{type(self).__name__}.name must be a service name of [A-Za-z0-9_-]{{1,128}}"
            )
        self.settings = settings or Settings()
        self.id = _instance_id(self.name, agent_id, bus, self.settings)
        # The site it runs at: its settings', else those of the bus it was given.
        self.site = (settings or (bus.settings if bus is not None else self.settings)).site
        self.capacity = concurrency or self.concurrency
        if self.capacity < 1:
            raise ConfigurationError("concurrency must be at least 1")
        if heartbeat_interval <= 0:
            raise ConfigurationError("the heartbeat interval must be positive")
        self.heartbeat_interval = heartbeat_interval
        self._bus = bus
        self._owns_bus = bus is None
        self.metrics = metrics if metrics is not None else (bus.metrics if bus else None)
        self._work: dict[str, _Work] = {}
        self._slots = asyncio.Semaphore(self.capacity)
        self._draining = False
        self._started_at = utcnow()
        self._beats_sent = 0
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._notices: set[asyncio.Task[None]] = set()  # start notices being sent
        self._card: AgentCard | None = None
        self._questions: Asking | None = None
        self._traffic: Traffic | None = None
        self._log = _log.bind(agent_id=self.id)
        self._builtins: dict[str, Callable[[RequestEnvelope], Awaitable[Any]]] = {
            "ping": self._ping,
            "describe": self._describe,
            "cancel": self._cancel,
            ANNOUNCE: self._announce,
            ANSWER_ACTION: self._answer_question,
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id!r} status={self.status.value}>"

    @property
    def bus(self) -> Transport:
        """The transport this agent runs on."""
        if self._bus is None:
            raise AgentBusError(f"{self!r} has not started")
        return self._bus

    @property
    def card(self) -> AgentCard:
        """The agent card: identity, skills with JSON Schemas, capacity, tags."""
        if self._card is None:
            self._card = AgentCard(
                id=self.id,
                name=self.name,
                description=self.description,
                version=self.version,
                skills=[
                    SkillCard(
                        name=spec.name,
                        description=spec.description,
                        parameters=spec.parameters_schema,
                        result=spec.result_schema,
                    )
                    for spec in self.skills.values()
                ],
                capacity=self.capacity,
                tags=list(self.tags),
                site=self.site,
            )
        return self._card

    @property
    def in_flight(self) -> int:
        """How many skill calls are running now."""
        return len(self._work)

    @property
    def status(self) -> AgentStatus:
        """``draining`` once stopping, ``busy`` at capacity, else ``ready``."""
        if self._draining:
            return AgentStatus.DRAINING
        if len(self._work) >= self.capacity:
            return AgentStatus.BUSY
        return AgentStatus.READY

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def on_start(self) -> None:
        """Run once the bus is open, before the first request is taken; override to
        subscribe to events, open what the skills need, and the like."""

    async def on_stop(self) -> None:
        """Run after the agent drained, before it leaves; override to release resources."""

    async def start(self) -> None:
        """Open the bus (unless given one), serve the skills, and start heartbeats."""
        if self._bus is None:
            self._bus = Bus(self.settings, agent_id=self.id, metrics=self.metrics)
        if not self._bus.is_open:
            await self._bus.open()
        # What this agent serves goes into its heartbeats (and on to metrics, if any).
        self._traffic = Traffic(self._bus.stats.observer)
        self._bus.stats.observer = self._traffic
        # Ready before the first request: one may be waiting in the queue already.
        await self.on_start()
        await self._bus.serve(
            self._handle,
            service=self.name,
            prefetch=self.capacity,
            broadcast_actions=(ANNOUNCE, "cancel"),
            acks_early=_long_running(self.skills),
            delivery_limit=self._delivery_limit(),
        )
        await self.beat(full=True)
        self._heartbeat_task = asyncio.create_task(self._beat_forever())
        self._log.info(
            "agent started",
            service=self.name,
            capacity=self.capacity,
            loop=loop_name(),
            pid=os.getpid(),
            host=socket.gethostname(),
        )

    def _delivery_limit(self) -> int | None:
        return None  # the setting's

    async def stop(self, grace: float | None = None) -> None:
        """Drain: stop taking work, finish in-flight work, say ``agent_offline``, close."""
        if self._bus is None or self._draining:
            return
        self._draining = True
        bus = self._bus
        with contextlib.suppress(AgentBusError, TimeoutError):
            async with asyncio.timeout(_GOODBYE_TIMEOUT):
                await self.beat()
        await bus.drain(grace)
        for sending in list(self._notices):
            sending.cancel()
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
        await self.on_stop()
        notice = OfflineNotice(
            agent_id=self.id, service=self.name, reason="shutdown", seq=self._beats_sent - 1
        )
        try:
            async with asyncio.timeout(_GOODBYE_TIMEOUT):
                await bus.emit(AGENT_OFFLINE, notice.model_dump(mode="json"), mandatory=False)
        except (AgentBusError, TimeoutError) as exc:
            self._log.warning("agent_offline not sent", error=str(exc) or type(exc).__name__)
        if self._owns_bus:
            await bus.aclose()
        self._log.info("agent stopped")

    async def beat(self, *, full: bool = False) -> None:
        """Send one heartbeat now; ``full`` includes the whole card, not only its digest."""
        card = self.card
        seq = self._beats_sent
        self._beats_sent += 1
        heartbeat = Heartbeat(
            agent_id=self.id,
            service=self.name,
            status=self.status,
            in_flight=self.in_flight,
            capacity=self.capacity,
            interval=self.heartbeat_interval,
            card_digest=card.digest(),
            card=card if full else None,
            site=self.site,
            seq=seq,
            started_at=self._started_at,
            traffic=self._traffic.report() if self._traffic is not None else None,
        )
        try:
            await self.bus.emit(
                HEARTBEAT,
                heartbeat.model_dump(mode="json", exclude_none=True),
                persistent=False,
                ttl=self.heartbeat_interval * _HEARTBEAT_TTL_INTERVALS,
                mandatory=False,
                confirm=False,  # the next beat says it again; a lost one is a gap in seq
            )
        except BaseException:
            # Not sent: its number goes to the next beat, unless another took the next
            # (a gap tells the registry beats were lost on the way, not in the agent).
            if self._beats_sent == seq + 1:
                self._beats_sent = seq
            raise

    async def _beat_forever(self) -> None:
        # A fixed rate (start + k * interval): waiting for each confirm must not stretch it.
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += self.heartbeat_interval
            now = loop.time()
            if due < now:  # fell behind (a stalled loop, a reconnect): beat now, then on time
                due = now
            await asyncio.sleep(due - now)
            try:
                await self.beat()
            except AgentBusError as exc:
                self._log.warning("heartbeat not sent", error=str(exc))

    async def _handle(self, request: RequestEnvelope) -> Any:
        action = request.payload.action
        builtin = self._builtins.get(action)
        if builtin is not None:
            return await builtin(request)
        spec = self.skills.get(action)
        if spec is None:
            available = sorted(self.skills) + sorted(_BUILTINS)
            raise UnknownAction(
                f"{self.name} has no action {action!r}; available: {', '.join(available)}",
                details={"action": action, "available": available},
            )
        arguments = spec.bind(request.payload.parameters)
        return await self._run(spec, arguments, Conversation(request, self.id, self.name), request)

    async def _run(
        self,
        spec: SkillSpec,
        arguments: dict[str, Any],
        conversation: Conversation,
        answering: RequestEnvelope,
    ) -> Any:
        """Run a skill in its conversation; ``answering``: the request this run answers
        (the conversation's first, or an answer to its last question)."""
        action = spec.name
        # What the skill stores is for whoever reads this answer: the user the request
        # names (a plan's next step), else its sender's.
        reader = _files_reader(answering)
        async with self._slots:
            # The skill runs in the delivery's own task: a cancel request cancels that.
            current = asyncio.current_task()
            assert current is not None
            work = _Work(action=action, task=current)
            self._work[answering.message_id] = work
            notice = None
            if (answering.metadata.model_extra or {}).get(NOTIFY_START) is True:
                # A timer, not a task: most work ends before it fires and cancels it.
                notice = asyncio.get_running_loop().call_later(
                    NOTIFY_START_AFTER, self._notify_start, answering
                )
            token = _current_request.set(conversation.request)
            artifacts = artifact_scope(self.bus.artifacts, reader)
            reporter = Reporter(answering, self.id, self._send_progress)
            reporting = reporter.bind()
            talking = conversation.bind()
            try:
                result = await spec.run(self, arguments)
            except Suspended as asked:
                return await self.questions.asked(asked, conversation, answering)
            except Deferred as deferred:
                return deferred.reply
            except asyncio.CancelledError:
                # Cancelled by request alone: the delivery goes on, to answer ``cancelled``.
                if work.cancelled_by_request and current.uncancel() == 0:
                    raise Cancelled(f"{action!r} was cancelled by request") from None
                raise
            finally:
                Conversation.unbind(talking)
                Reporter.unbind(reporting)
                artifacts.var.reset(artifacts)
                _current_request.reset(token)
                self._work.pop(answering.message_id, None)
                if notice is not None:
                    notice.cancel()
        # The arguments go before the result is dumped: a plan of thousands of subtasks
        # would otherwise stay alive beside its aggregate's JSON.
        del arguments
        if not reporter.usage:
            return spec.dump(result)
        return self._with_usage(answering, spec.dump(result), dict(reporter.usage))

    async def _answer_question(self, request: RequestEnvelope) -> Any:
        spec, arguments, conversation = await self.questions.resume(request, self.skills)
        return await self._run(spec, arguments, conversation, request)

    @property
    def questions(self) -> Asking:
        """This agent's side of its conversations: the questions its service asked."""
        if self._questions is None:
            self._questions = Asking(
                self.bus,
                self.id,
                self.name,
                retention=self.settings.question_retention,
                news=self._tell,
            )
        return self._questions

    def _tell(self, event: str, data: dict[str, Any]) -> None:
        # News for whoever lists open questions (the dashboard): best effort, never waited on.
        notice = asyncio.create_task(self._send_news(event, data))
        self._notices.add(notice)
        notice.add_done_callback(self._notices.discard)

    async def _send_news(self, event: str, data: dict[str, Any]) -> None:
        try:
            await self.bus.emit(event, data, persistent=False, mandatory=False, confirm=False)
        except AgentBusError as exc:
            self._log.info("question news not sent", news=event, error=str(exc))

    def _with_usage(
        self, request: RequestEnvelope, result: Any, usage: dict[str, float]
    ) -> ResponseEnvelope:
        # The response carries what the skill used; this process's metrics count it.
        if self.metrics is not None:
            for unit, amount in usage.items():
                action = request.payload.action
                self.metrics.usage.labels(self.name, action, unit).inc(amount)
        return request.response(result, sender_id=self.id, metadata={"usage": usage})

    def _notify_start(self, request: RequestEnvelope) -> None:
        # Tells the requester which instance holds the work, so it can move the work on
        # at once if this instance is reported offline. Only work still running after a
        # moment is worth a message: quick answers say who did them themselves.
        if request.message_id in self._work:
            notice = asyncio.create_task(self._send_start_notice(request))
            self._notices.add(notice)
            notice.add_done_callback(self._notices.discard)

    async def _send_start_notice(self, request: RequestEnvelope) -> None:
        await Reporter(request, self.id, self._send_progress).started()

    async def _send_progress(self, update: ResponseEnvelope) -> None:
        # Best effort, as the requester may have gone: the work goes on either way.
        try:
            await self.bus.publish(update, persistent=False, mandatory=False)
        except AgentBusError as exc:
            self._log.info("progress not sent", error=str(exc), state=update.payload.result)

    async def _ping(self, request: RequestEnvelope) -> dict[str, Any]:
        return {
            "agent_id": self.id,
            "service": self.name,
            "status": self.status.value,
            "in_flight": self.in_flight,
            "capacity": self.capacity,
        }

    async def _describe(self, request: RequestEnvelope) -> dict[str, Any]:
        return self.card.model_dump(mode="json")

    async def _cancel(self, request: RequestEnvelope) -> dict[str, Any]:
        target = request.payload.parameters.get("message_id")
        work = self._work.get(target) if isinstance(target, str) else None
        if work is None:
            return {"agent_id": self.id, "message_id": target, "cancelled": False}
        work.cancelled_by_request = True
        work.task.cancel(CancelCause.REQUEST)  # the skill may say why it stops
        return {"agent_id": self.id, "message_id": target, "cancelled": True}

    async def _announce(self, request: RequestEnvelope) -> dict[str, Any]:
        await self.beat(full=True)
        return {"agent_id": self.id}


def _instance_id(
    service: str, agent_id: str | None, bus: Transport | None, settings: Settings
) -> str:
    # A bus handed in already has the id its agent answers to.
    chosen = agent_id or (bus.agent_id if bus is not None else None)
    chosen = chosen or default_id(settings, service)
    if not is_valid_id(chosen) or chosen == service:
        raise ConfigurationError(f"agent id {chosen!r} must be valid and differ from the name")
    if bus is not None and bus.agent_id != chosen:
        raise ConfigurationError(f"agent id {chosen!r} differs from its bus's {bus.agent_id!r}")
    return chosen


def _long_running(skills: dict[str, SkillSpec]) -> Callable[[RequestEnvelope], bool] | None:
    # Which requests the bus acknowledges as their work starts (skill(long_running=True)).
    actions = frozenset(name for name, spec in skills.items() if spec.long_running)
    return (lambda request: request.payload.action in actions) if actions else None


def _files_reader(request: RequestEnvelope) -> str:
    # The broker user a skill's files are stored for; a bad name fails the request.
    try:
        return artifact_reader(request) or reader_of(request.sender_id)
    except ValueError as exc:
        raise InvalidParameters(str(exc), details={"metadata": ARTIFACT_READER}) from None

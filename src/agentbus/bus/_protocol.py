"""The seam between agents and a transport: what the RabbitMQ bus and the in-memory bus share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, Protocol, Self, Unpack, runtime_checkable

from agentbus._config import Settings
from agentbus._metrics import Metrics
from agentbus.bus._artifacts import Artifacts
from agentbus.bus._feed import Feed, FeedHandler
from agentbus.bus._hooks import Journal
from agentbus.bus._lease import Lease
from agentbus.bus._options import PublishOptions
from agentbus.bus._pending import ProgressCallback, QuestionHandler
from agentbus.bus._replies import ReplyPublisher
from agentbus.bus._routes import EventHandler, RequestHandler
from agentbus.bus._stats import BusStats
from agentbus.envelopes import (
    Envelope,
    ErrorEnvelope,
    EventEnvelope,
    Question,
    RequestEnvelope,
    ResponseEnvelope,
)

__all__ = ["EnvelopePublisher", "Transport"]


class EnvelopePublisher(ReplyPublisher, Protocol):
    """Publishes envelopes and replies: on RabbitMQ, or on the in-memory broker."""

    async def publish(self, envelope: Envelope, **options: Unpack[PublishOptions]) -> None: ...

    @property
    def answers_direct(self) -> bool:
        """Whether a request may name direct reply-to (``amq.rabbitmq.reply-to``)."""
        ...


@runtime_checkable
class Transport(Protocol):
    """An open-able connection to the agent bus, as agents and clients use it."""

    settings: Settings
    agent_id: str
    service: str | None
    stats: BusStats
    metrics: Metrics | None

    @property
    def is_open(self) -> bool: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def artifacts(self) -> Artifacts: ...

    async def open(self) -> Self: ...

    async def drain(self, grace: float | None = None) -> None: ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def serve(
        self,
        handler: RequestHandler,
        *,
        service: str | None = None,
        prefetch: int | None = None,
        broadcast_actions: Any = (),
        acks_early: Callable[[RequestEnvelope], bool] | None = None,
        delivery_limit: int | None = None,
    ) -> None: ...

    async def subscribe(self, pattern: str, handler: EventHandler) -> None: ...

    async def consume_feed(
        self,
        pattern: str,
        handler: FeedHandler,
        *,
        name: str,
        max_length: int = ...,
        group: str | None = ...,
    ) -> Feed: ...

    async def publish(self, envelope: Envelope, **options: Unpack[PublishOptions]) -> None: ...

    async def request(
        self,
        receiver: str,
        action: str,
        parameters: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        metadata: dict[str, Any] | None = None,
        on_progress: ProgressCallback | None = None,
        persistent: bool = True,
        on_question: QuestionHandler | None = None,
        answer_within: float | None = None,
        context_id: str | None = None,
    ) -> ResponseEnvelope: ...

    async def answer(
        self,
        question: Question | str,
        answer: Any = None,
        *,
        decline: bool = False,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        on_question: QuestionHandler | None = None,
    ) -> ResponseEnvelope: ...

    async def send_request(
        self,
        envelope: RequestEnvelope,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        reply_to: str | None = None,
        sent: bool = False,
        persistent: bool = True,
    ) -> ResponseEnvelope: ...

    async def send_reply(
        self, reply: ResponseEnvelope | ErrorEnvelope, reply_to: str | None
    ) -> None: ...

    async def journal(self, name: str, *, max_age: str = ...) -> Journal: ...

    async def conversations(self, service: str, *, max_age: str = ...) -> Journal: ...

    async def reply_queue(
        self, name: str, *, expect: Iterable[str] = ..., hold: bool = ..., exclusive: bool = ...
    ) -> Callable[[bool], Awaitable[None]]: ...

    async def lease(self, name: str) -> Lease: ...

    def release(self, message_id: str) -> bool: ...

    def release_all(self, name: str) -> int: ...

    async def emit(
        self,
        event_name: str,
        data: dict[str, Any] | None = None,
        *,
        receiver: str = ...,
        persistent: bool = True,
        ttl: float | None = None,
        mandatory: bool = True,
        confirm: bool = True,
    ) -> EventEnvelope: ...

"""The bus's sending side: publish envelopes, make requests and wait for them, emit events."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Unpack

from agentbus._config import Settings
from agentbus._exceptions import (
    InputRequired,
    PayloadTooLarge,
    QuestionClosed,
    QuestionDeclined,
    RemoteError,
    RequestTimeout,
)
from agentbus._topology import DIRECT_REPLY_TO, Topology
from agentbus.bus._artifacts import Artifacts
from agentbus.bus._by_reference import (
    is_by_reference,
    parameters_by_reference,
    resolve_result,
)
from agentbus.bus._options import PublishOptions
from agentbus.bus._pending import ProgressCallback, QuestionHandler
from agentbus.bus._protocol import EnvelopePublisher
from agentbus.bus._requests import Requester
from agentbus.bus._sites import Crossing, SiteRouter
from agentbus.bus._trace import current_trace
from agentbus.envelopes import (
    ANSWER_ACTION,
    ANSWER_WITHIN,
    BROADCAST,
    Envelope,
    ErrorCode,
    ErrorEnvelope,
    EventEnvelope,
    EventPayload,
    Metadata,
    Question,
    RequestEnvelope,
    ResponseEnvelope,
    question_origin,
    utcnow,
)

__all__ = ["Sending"]


def _seconds_left(question: Question) -> float | None:
    if question.expires_at is None:
        return None
    return max((question.expires_at - utcnow()).total_seconds(), 0.0)


class Sending(abc.ABC):
    """Publishing, requests and events, as every bus offers them over its publisher."""

    settings: Settings
    agent_id: str
    topology: Topology
    _requests: Requester
    _sites: SiteRouter
    _publish_slots: asyncio.Semaphore
    _artifacts: Artifacts

    @abc.abstractmethod
    def _require_publisher(self) -> EnvelopePublisher:
        """The publisher, while the bus can publish; else raise ``BusClosed``."""

    async def publish(self, envelope: Envelope, **options: Unpack[PublishOptions]) -> None:
        """Publish any envelope with the contract's routing key, and wait for the confirm.

        ``options`` are ``PublishOptions``: ``reply_to``, ``persistent``, ``ttl``,
        ``timeout`` and ``mandatory``. With ``mandatory`` (the default) a message nobody
        is bound for raises ``Unroutable``; without it, the broker drops such a message.

        Raises:
            Unroutable: no queue is bound for the receiver.
            ConnectionLost: the broker could not be reached in time.
            PublishFailed: the broker refused the message.
            PayloadTooLarge: the encoded envelope is over the size cap.
        """
        publisher = self._require_publisher()
        async with self._publish_slots:
            await publisher.publish(envelope, **options)

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
    ) -> ResponseEnvelope:
        """Send a request to an instance or service and wait for its response.

        ``persistent=False`` sends it transient: not written to disk by the broker, so
        quicker, and lost if the broker restarts before it is served; on RabbitMQ its
        answer comes by direct reply-to (no reply queue, no acks; without ``on_progress``),
        lost if this bus's connection drops meanwhile, and it goes without the broker's
        confirm (nor is the answer confirmed): a reconnect may lose the request too, and a
        receiver nobody serves is ``Unroutable`` after the ``presence_check`` setting's
        seconds, not at once. For calls whose timeout is short, where surviving a broker
        restart or a reconnect buys nothing.

        ``on_progress`` is called with every ``in_progress`` response that comes first:
        the skill's start, its progress and its partial results, in order.

        A skill may ask a question (``agentbus.ask``) before it answers. ``on_question``
        is awaited with each ``Question`` and returns the answer, which goes back
        (``answer``) until the work ends; raising ``QuestionDeclined`` declines it.
        Without it, ``InputRequired`` is raised with the question, to answer later,
        from here or from another process. ``timeout`` applies to each run of the
        work, not to the waits for answers: those end at the question's
        ``expires_at``, and ``answer_within`` (seconds) caps it for the questions of
        this request. ``context_id`` names the conversation the request belongs to.

        Raises:
            RemoteError: the receiver answered with an error envelope.
            InputRequired: the work asks a question, and ``on_question`` is not given.
            RequestTimeout: no answer within ``timeout`` seconds (or, to a question,
                before it expired).
            Unroutable: nobody serves ``receiver``.
            NoInstance: ``receiver``'s queue holds requests and no instance consumes it
                (checked once, after the ``presence_check`` setting's seconds without an
                answer; a request already taken by an instance that then stops consuming,
                as one draining does, is waited for).
            SiteUnreachable: nothing here serves ``receiver``, and a peer site that might
                is not heard from: the link to it is down (docs/sites.md).
        """
        timeout = timeout if timeout is not None else self.settings.request_timeout
        deadline: dict[str, Any] = {"deadline": utcnow() + timedelta(seconds=timeout)}
        trace = current_trace()
        if trace is not None and not (metadata and "trace" in metadata):
            deadline["trace"] = trace
        if context_id is not None:
            deadline["context_id"] = context_id
        if answer_within is not None:
            deadline[ANSWER_WITHIN] = answer_within
        # One validation of plain dicts: cheaper than building the three models one by one.
        envelope = RequestEnvelope.model_validate(
            {
                "sender_id": self.agent_id,
                "receiver_id": receiver,
                "payload": {"action": action, "parameters": parameters or {}},
                "metadata": metadata | deadline if metadata else deadline,
            }
        )
        try:
            return await self.send_request(
                envelope, timeout=timeout, on_progress=on_progress, persistent=persistent
            )
        except InputRequired as asked:
            if on_question is None:
                raise
            return await self._converse(asked.question, on_question, timeout, on_progress)

    async def answer(
        self,
        question: Question | str,
        answer: Any = None,
        *,
        decline: bool = False,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        on_question: QuestionHandler | None = None,
    ) -> ResponseEnvelope:
        """Answer a question a skill asked (``InputRequired.question``, or its id), and
        wait for what the work does next: its response, or another question.

        Any process may answer, hours later: the question says where the answer goes
        (its ``service``). ``decline`` answers that no answer comes: the skill's ``ask``
        raises ``QuestionDeclined``. An answer that does not fit the question's
        ``answer_schema`` is asked again, with the reason (``Question.rejected``).

        Raises:
            InputRequired: the work asks another question (``on_question`` not given).
            QuestionClosed: the question is not open: unknown, expired, or answered.
            RemoteError, RequestTimeout, Unroutable: as ``request``.
        """
        question_id = question if isinstance(question, str) else question.question_id
        origin = question_origin(question_id) if isinstance(question, str) else None
        service = question.service if not isinstance(question, str) else origin and origin[0]
        if not service:
            raise QuestionClosed(
                f"{question_id!r} is not a question's id",
                details={"question_id": question_id, "reason": "unknown"},
            )
        context_id = None if isinstance(question, str) else question.context_id
        parameters: dict[str, Any] = {"question_id": question_id}
        if decline:
            parameters["decline"] = True
        else:
            parameters["answer"] = answer
        try:
            return await self.request(
                service,
                ANSWER_ACTION,
                parameters,
                timeout=timeout,
                on_progress=on_progress,
                on_question=on_question,
                context_id=context_id,
            )
        except RemoteError as exc:
            if exc.code == ErrorCode.QUESTION_CLOSED:
                raise QuestionClosed(exc.message, details=exc.details) from exc
            raise

    async def _converse(
        self,
        question: Question,
        on_question: QuestionHandler,
        timeout: float | None,
        on_progress: ProgressCallback | None,
    ) -> ResponseEnvelope:
        # Each answer's reply is the work's next step: its result, or the next question.
        while True:
            decline = False
            value: Any = None
            try:
                async with asyncio.timeout(_seconds_left(question)):
                    value = await on_question(question)
            except QuestionDeclined:
                decline = True
            except TimeoutError as exc:
                raise RequestTimeout(
                    f"no answer to the question of {question.asker!r} before it expired",
                    details={"question_id": question.question_id},
                ) from exc
            try:
                return await self.answer(
                    question, value, decline=decline, timeout=timeout, on_progress=on_progress
                )
            except InputRequired as asked:
                question = asked.question

    async def send_request(
        self,
        envelope: RequestEnvelope,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        reply_to: str | None = None,
        sent: bool = False,
        persistent: bool = True,
    ) -> ResponseEnvelope:
        """Publish a built request and wait for the response correlated to it.

        ``on_progress`` is called with every ``in_progress`` response that comes first.
        ``reply_to`` names a queue of ``reply_queue`` for the answer (default: this
        instance's). ``sent``: the request went out before (from this process or one
        that died) to that reply queue; only wait for its answer.
        Works while the bus drains, so a handler can finish work that needs requests.
        With peer sites (``peer_sites``), a request nothing serves at this site crosses to
        the first peer that serves it (docs/sites.md); ``SiteUnreachable`` when only a peer
        whose link is down might. Its answer comes back to this instance by routing key,
        also when ``reply_to`` names a reply queue: a queue name means nothing at the far
        site (so a process that opens that queue later does not find it there).
        """
        publisher = self._require_publisher()
        timeout = timeout if timeout is not None else self.settings.request_timeout
        if not sent and self._sites.active:
            across = await self._sites.crossing(envelope.receiver_id)
            if across is not None:  # nothing serves it here: to the first peer site that does
                return await self._requests.send(
                    Crossing(publisher, across),
                    envelope,
                    reply_to=None,
                    timeout=timeout,
                    on_progress=on_progress,
                    persistent=persistent,
                    presence=False,
                )
        if reply_to is None:
            # Replies come straight to this instance's queue (the default exchange), not
            # through the topic exchange's bindings: one less routing step. A transient
            # request's, by direct reply-to where the broker has it: no queue at all. Not
            # one that waits for progress: that comes by the instance queue, and only one
            # path keeps it in order before the answer.
            direct = publisher.answers_direct and not persistent and on_progress is None
            reply_to = DIRECT_REPLY_TO if direct else self.topology.instance_queue(self.agent_id)

        async def send(request: RequestEnvelope) -> ResponseEnvelope:
            return await self._requests.send(
                None if sent else publisher,
                request,
                reply_to=reply_to,
                timeout=timeout,
                on_progress=on_progress,
                persistent=persistent,
                # Naming direct reply-to, it goes on the channel without confirms (Publisher).
                confirm=reply_to != DIRECT_REPLY_TO,
            )

        return await self._by_reference(envelope, send)

    async def _by_reference(
        self,
        envelope: RequestEnvelope,
        send: Callable[[RequestEnvelope], Awaitable[ResponseEnvelope]],
    ) -> ResponseEnvelope:
        """Send ``envelope``; its parameters by reference if it is over the cap, and a
        result that comes by reference read back (docs/artifacts.md)."""
        artifacts = self._artifacts if self.settings.artifact_by_reference else None
        try:
            reply = await send(envelope)
        except PayloadTooLarge:
            if artifacts is None:
                raise
            reply = await send(await parameters_by_reference(artifacts, envelope))
        if artifacts is not None and is_by_reference(reply):
            reply = await resolve_result(artifacts, reply)
        return reply

    async def send_reply(
        self, reply: ResponseEnvelope | ErrorEnvelope, reply_to: str | None
    ) -> None:
        """Send a reply (response or error) to a request answered after its handler ended:
        to ``reply_to`` (the request's AMQP ``reply_to``: ``reply_address()``), else by the
        routing key of its receiver (``agent.<requester>.response``).

        Raises:
            Unroutable: nobody is there to take it (the requester has gone).
            ConnectionLost, PublishFailed: as ``publish``.
        """
        await self._require_publisher().publish_reply(reply, reply_to)

    async def emit(
        self,
        event_name: str,
        data: dict[str, Any] | None = None,
        *,
        receiver: str = BROADCAST,
        persistent: bool = True,
        ttl: float | None = None,
        mandatory: bool = False,
        confirm: bool = True,
    ) -> EventEnvelope:
        """Publish an event, to everyone by default; return the envelope sent.

        An event nobody subscribes to is dropped, as pub/sub goes; with ``mandatory``,
        it is an error instead. ``confirm=False``: see ``PublishOptions``, for news whose
        loss in a reconnect costs nothing.

        Raises:
            Unroutable: ``mandatory`` and nobody receives it (no subscriber bound).
        """
        envelope = EventEnvelope(
            sender_id=self.agent_id,
            receiver_id=receiver,
            payload=EventPayload(event_name=event_name, event_data=data or {}),
            metadata=Metadata(trace=current_trace()),
        )
        await self.publish(
            envelope, persistent=persistent, ttl=ttl, mandatory=mandatory, confirm=confirm
        )
        return envelope

"""The bus's sending side: publish envelopes, make requests and wait for them, emit events."""

from __future__ import annotations

import abc
import asyncio
from datetime import timedelta
from typing import Any, Unpack

from agentbus._config import Settings
from agentbus._topology import DIRECT_REPLY_TO, Topology
from agentbus.bus._options import PublishOptions
from agentbus.bus._pending import ProgressCallback
from agentbus.bus._protocol import EnvelopePublisher
from agentbus.bus._requests import Requester
from agentbus.bus._sites import Crossing, SiteRouter
from agentbus.bus._trace import current_trace
from agentbus.envelopes import (
    BROADCAST,
    Envelope,
    EventEnvelope,
    EventPayload,
    Metadata,
    RequestEnvelope,
    ResponseEnvelope,
    utcnow,
)

__all__ = ["Sending"]


class Sending(abc.ABC):
    """Publishing, requests and events, as every bus offers them over its publisher."""

    settings: Settings
    agent_id: str
    topology: Topology
    _requests: Requester
    _sites: SiteRouter
    _publish_slots: asyncio.Semaphore

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

        Raises:
            RemoteError: the receiver answered with an error envelope.
            RequestTimeout: no answer within ``timeout`` seconds.
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
        # One validation of plain dicts: cheaper than building the three models one by one.
        envelope = RequestEnvelope.model_validate(
            {
                "sender_id": self.agent_id,
                "receiver_id": receiver,
                "payload": {"action": action, "parameters": parameters or {}},
                "metadata": metadata | deadline if metadata else deadline,
            }
        )
        return await self.send_request(
            envelope, timeout=timeout, on_progress=on_progress, persistent=persistent
        )

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
        return await self._requests.send(
            None if sent else publisher,
            envelope,
            reply_to=reply_to,
            timeout=timeout,
            on_progress=on_progress,
            persistent=persistent,
            # Naming direct reply-to, it goes on the channel without confirms (Publisher).
            confirm=reply_to != DIRECT_REPLY_TO,
        )

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

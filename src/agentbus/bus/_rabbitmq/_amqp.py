"""The one seam onto aiormq and pamqp beneath aio-pika: publishing and consuming.

aio-pika's ``Exchange.publish`` takes an ``aio_pika.Message``, whose every attribute set
goes through a lock check (about 10 µs a message), and its ``Queue.consume`` wraps each
delivery in an ``IncomingMessage`` run in a second task. On the hot paths (every publish;
every delivery; every heartbeat the registry hears) the bus goes one level down instead,
here and only here; a publish and an ack go lower still, as frames on the connection's
write queue (``_frames.py``). ``tests/unit/test_amqp_seam.py`` pins what this module
assumes of the libraries: the properties (``bus/_rabbitmq/_properties.py``) equal
``aio_pika.Message``'s byte for byte and pamqp's own, a return comes back as a
``DeliveredMessage``, and a robust channel calls ``reopen_callbacks`` after restoring
its queues; ``tests/unit/test_frames_seam.py`` pins the frames.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final, cast

import aiormq
import aiormq.abc
import aiormq.exceptions
from aio_pika.abc import AbstractChannel, AbstractRobustChannel, AbstractRobustConnection
from pamqp.commands import Basic

from agentbus._logging import get_logger
from agentbus._topology import DIRECT_REPLY_TO
from agentbus.bus._rabbitmq import _frames

__all__ = [
    "RECLAIM_WINDOW",
    "Delivery",
    "DeliveryCallback",
    "DeliveryConsumer",
    "DirectReplyTo",
    "FeedCallback",
    "FeedConsumer",
    "basic_publish",
    "is_cancelled_under_us",
    "is_nack",
    "scratch_channel",
]

_log = get_logger("agentbus.bus")

_ACK_DELAY = 0.05  # s: how long a partial batch of a feed waits for its ack

FeedCallback = Callable[[bytes, Mapping[str, object] | None, str | None], None]
"""Takes a message's body, AMQP ``headers`` and ``user_id``; runs synchronously."""


@contextlib.asynccontextmanager
async def scratch_channel(
    connection: AbstractRobustConnection, *, confirms: bool = False
) -> AsyncIterator[AbstractChannel]:
    """A channel for a few operations (a passive declare, say), closed on the way out.

    A robust channel the broker closes (a passive declare of a missing queue does) is
    reopened by aio-pika unless the program closed it too: so this closes it always, even
    when it reads closed already, or every such look would leave a channel open until the
    connection reaches its ``channel_max`` and the broker closes the connection.
    """
    channel = await connection.channel(publisher_confirms=confirms)
    try:
        yield channel
    finally:
        with contextlib.suppress(aiormq.exceptions.AMQPError, ConnectionError):
            await channel.close()


async def basic_publish(
    channel: AbstractRobustChannel,
    *,
    exchange: str,
    routing_key: str,
    body: bytes,
    properties: Basic.Properties,
    mandatory: bool,
    timeout: float,
    direct: DirectReplyTo | None = None,
) -> bool:
    """Publish on ``channel`` and wait for the confirm; return whether it came back unroutable.

    ``direct``: the properties' ``reply_to`` is direct reply-to's, taken on this channel by
    ``direct`` (its fallback queue instead while that consumer is not there).

    Raises what aiormq raises (translate it with ``agentbus.bus._rabbitmq._errors.translate``).
    """
    if channel.is_closed:
        raise aiormq.exceptions.ChannelInvalidStateError(f"{channel!r} is closed")
    # aiormq's Channel: its abstract interface lacks ``wait`` and ``publisher_confirms``.
    underlay = cast(aiormq.Channel, await channel.get_underlay_channel())
    if direct is not None:
        properties.reply_to = direct.reply_to(underlay)
    result = await _frames.publish(
        underlay,
        exchange=exchange,
        routing_key=routing_key,
        body=body,
        properties=properties,
        mandatory=mandatory,
        timeout=timeout,
    )
    return isinstance(result, aiormq.abc.DeliveredMessage)


class Delivery:
    """A delivery as the dispatcher reads and settles it (``IncomingMessage``), read
    straight off aiormq's ``DeliveredMessage``: no aio-pika wrapper, no task of its own."""

    __slots__ = ("_channel", "_tag", "body", "properties", "redelivered", "routing_key")

    def __init__(self, message: aiormq.abc.DeliveredMessage, *, acked: bool = False) -> None:
        deliver = message.delivery
        assert isinstance(deliver, Basic.Deliver)
        self._channel = message.channel
        # None: consumed without acks, so there is nothing to settle.
        self._tag: int | None = None if acked else deliver.delivery_tag or 0
        self.body = message.body
        self.properties = message.header.properties
        self.redelivered = deliver.redelivered
        self.routing_key = deliver.routing_key

    def __repr__(self) -> str:
        return f"<Delivery tag={self._tag} routing_key={self.routing_key!r}>"

    @property
    def message_id(self) -> str | None:
        """The AMQP ``message_id`` property."""
        return self.properties.message_id

    @property
    def correlation_id(self) -> str | None:
        """The AMQP ``correlation_id`` property."""
        return self.properties.correlation_id

    @property
    def reply_to(self) -> str | None:
        """The AMQP ``reply_to`` property."""
        return self.properties.reply_to

    @property
    def type(self) -> str | None:
        """The AMQP ``type`` property."""
        return self.properties.message_type

    @property
    def headers(self) -> Mapping[str, object] | None:
        """The AMQP ``headers`` table."""
        return self.properties.headers

    @property
    def user_id(self) -> str | None:
        """The AMQP ``user_id`` property."""
        return self.properties.user_id

    # Settling queues the frame and returns: AMQP does not answer an ack, and a frame
    # queued is as good as one written when the connection drops (the broker redelivers
    # either way), so waiting for the socket write would only cost a wake-up.
    async def ack(self) -> None:
        """Acknowledge the delivery."""
        if self._tag is not None:
            await _frames.ack(cast(aiormq.Channel, self._channel), self._tag)

    async def reject(self, *, requeue: bool = False) -> None:
        """Refuse the delivery: requeue it, or dead-letter it."""
        if self._tag is not None:
            await self._channel.basic_reject(self._tag, requeue=requeue, wait=False)

    async def nack(self, *, requeue: bool = True) -> None:
        """Refuse the delivery, requeued by default."""
        if self._tag is not None:
            await self._channel.basic_nack(self._tag, requeue=requeue, wait=False)


DeliveryCallback = Callable[[Delivery], Awaitable[None]]
"""Handles one delivery; runs in the task aiormq starts for it (cancelled with the channel)."""


RECLAIM_WINDOW: Final = 15.0  # s an exclusive consumer back from a reconnect waits
_RECLAIM_PAUSE: Final = 0.25


class DeliveryConsumer:
    """Consumes one queue on a robust channel, again after every reconnect.

    Each delivery goes to ``callback`` as a ``Delivery``, in the task aiormq starts for it:
    aio-pika's ``Queue.consume`` would wrap it in an ``IncomingMessage`` and run the
    callback in a second task. ``no_ack``: the broker counts each delivery settled as it
    sends it (settling the ``Delivery`` does nothing). ``exclusive``: the queue alone, or
    not at all (``start`` raises ``QueueInUse``; after a reconnect that finds the queue
    still taken ``RECLAIM_WINDOW`` later, the consumer gives its channel up instead of
    trying again and again).
    """

    def __init__(
        self,
        channel: AbstractRobustChannel,
        queue: str,
        callback: DeliveryCallback,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
    ) -> None:
        self._channel = channel
        self._queue = queue
        self._callback = callback
        self._no_ack = no_ack
        self._exclusive = exclusive
        self._given_up: asyncio.Future[Any] | None = None
        self._underlay: aiormq.abc.AbstractChannel | None = None
        self._tag: str | None = None

    def __repr__(self) -> str:
        return f"<DeliveryConsumer queue={self._queue!r} tag={self._tag!r}>"

    async def start(self) -> None:
        """Start consuming; the robust channel's reopen starts it again."""
        self._channel.reopen_callbacks.add(self._restart)
        await self._consume()

    async def cancel(self) -> None:
        """Stop taking deliveries (``basic.cancel``); those taken are still settled."""
        self._channel.reopen_callbacks.discard(self._restart)
        underlay, tag, self._tag = self._underlay, self._tag, None
        if underlay is not None and tag is not None and not underlay.is_closed:
            await underlay.basic_cancel(tag)

    def is_consuming_on(self, underlay: aiormq.abc.AbstractChannel) -> bool:
        """Tell whether the broker has this consumer on ``underlay`` (consume-ok came)."""
        return self._tag is not None and underlay is self._underlay and not underlay.is_closed

    async def _consume(self) -> None:
        self._tag = None
        self._underlay = await self._channel.get_underlay_channel()
        ok = await self._underlay.basic_consume(
            self._queue, self._deliver, no_ack=self._no_ack, exclusive=self._exclusive
        )
        self._tag = ok.consumer_tag

    async def _restart(self, *_: Any) -> None:
        # As for feeds: the robust channel restored the queue, not this consumer.
        try:
            if self._exclusive:
                await self._until_unused()
            await self._consume()
        except aiormq.exceptions.ChannelAccessRefused as exc:
            if not self._exclusive:
                raise
            # Taken by another consumer while this one was away (a plan another leader
            # took over): give the channel up rather than reopen it to be refused again.
            _log.warning("queue taken by another consumer", queue=self._queue, error=str(exc))
            self._channel.reopen_callbacks.discard(self._restart)
            self._given_up = asyncio.ensure_future(self._channel.close())

    async def _until_unused(self) -> None:
        # Right after a reconnect the broker may still count this consumer's old self (a
        # quorum queue drops it by a command of its own): wait a while for the count to
        # fall before an exclusive consume; a consumer still there then is another's.
        underlay = await self._channel.get_underlay_channel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RECLAIM_WINDOW
        while (await underlay.queue_declare(self._queue, passive=True)).consumer_count:
            if loop.time() >= deadline:
                return
            await asyncio.sleep(_RECLAIM_PAUSE)

    async def _deliver(self, message: aiormq.abc.DeliveredMessage) -> None:
        await self._callback(Delivery(message, acked=self._no_ack))


class DirectReplyTo:
    """RabbitMQ's direct reply-to on a publishing channel: replies with no queue, no acks.

    A request published on ``channel`` with ``reply_to`` ``amq.rabbitmq.reply-to`` is
    answered straight to this channel's consumer. The broker closes a channel that
    publishes so without that consumer, as it is in the moment after a reopen: then
    requests name ``fallback`` (a queue of this bus's) instead. Replies on their way when
    the channel closes are lost, as direct reply-to goes.
    """

    def __init__(
        self, channel: AbstractRobustChannel, callback: DeliveryCallback, *, fallback: str
    ) -> None:
        self._consumer = DeliveryConsumer(channel, DIRECT_REPLY_TO, callback, no_ack=True)
        self._fallback = fallback

    def __repr__(self) -> str:
        return f"<DirectReplyTo fallback={self._fallback!r}>"

    async def start(self) -> None:
        """Start taking replies; the robust channel's reopen starts it again."""
        await self._consumer.start()

    def reply_to(self, underlay: aiormq.abc.AbstractChannel) -> str:
        """Return the ``reply_to`` of a request published on ``underlay`` now."""
        return DIRECT_REPLY_TO if self._consumer.is_consuming_on(underlay) else self._fallback


class FeedConsumer:
    """Consumes one queue on a robust channel, again after every reconnect, acking in batches.

    ``callback`` runs synchronously per message, in the order they came. The channel's
    prefetch bounds the messages delivered and not yet acknowledged: they are acked
    together every ``batch`` messages, or ``_ACK_DELAY`` after the last one. A consumer
    that falls behind leaves its backlog in the queue (capped there), not in its memory.
    """

    def __init__(
        self, channel: AbstractRobustChannel, queue: str, callback: FeedCallback, *, batch: int
    ) -> None:
        self._channel = channel
        self._queue = queue
        self._callback = callback
        self._batch = batch
        self._underlay: aiormq.abc.AbstractChannel | None = None
        self._unacked = 0
        self._last_tag = 0
        self._timer: asyncio.TimerHandle | None = None
        self._acks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<FeedConsumer queue={self._queue!r} unacked={self._unacked}>"

    async def start(self) -> None:
        """Start consuming; the robust channel's reopen starts it again."""
        self._channel.reopen_callbacks.add(self._restart)
        await self._consume()

    async def aclose(self) -> None:
        """Stop consuming: close the channel (what was not acked goes back to the queue)."""
        self._channel.reopen_callbacks.discard(self._restart)
        self._forget_unacked()
        await self._channel.close()

    async def _consume(self) -> None:
        self._forget_unacked()  # their channel is gone: the broker requeued them
        self._underlay = await self._channel.get_underlay_channel()
        await self._underlay.basic_consume(self._queue, self._deliver, no_ack=False)

    async def _restart(self, *_: Any) -> None:
        # The robust channel declared the queue and its bindings again (and set its
        # prefetch) before calling this, but restores only consumers started through
        # aio-pika's Queue.consume.
        await self._consume()

    async def _deliver(self, message: aiormq.abc.DeliveredMessage) -> None:
        properties = message.header.properties
        self._callback(message.body, properties.headers, properties.user_id)
        self._last_tag = message.delivery_tag or self._last_tag
        self._unacked += 1
        if self._unacked >= self._batch:
            await self._ack()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_ACK_DELAY, self._ack_soon)

    def _ack_soon(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self._ack())
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    async def _ack(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        underlay = self._underlay
        if not self._unacked or underlay is None:
            return
        self._unacked = 0
        # A channel gone meanwhile: its messages went back to the queue, to be heard again.
        with contextlib.suppress(aiormq.exceptions.AMQPError, ConnectionError):
            await underlay.basic_ack(self._last_tag, multiple=True)

    def _forget_unacked(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unacked = self._last_tag = 0


def is_cancelled_under_us(exc: BaseException) -> bool:
    """Tell whether ``exc`` is aiormq cancelling a confirm because its connection died.

    That ``CancelledError`` is not ours: the current task is not being cancelled.
    """
    if not isinstance(exc, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    return task is not None and not task.cancelling()


def is_nack(exc: BaseException) -> bool:
    """Tell whether ``exc`` is the broker nacking a publish (not returning it)."""
    return isinstance(exc, aiormq.exceptions.DeliveryError) and not isinstance(
        exc, aiormq.exceptions.PublishError
    )

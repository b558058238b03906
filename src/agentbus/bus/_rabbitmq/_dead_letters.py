"""The dead-letter queue, for operators: look at it, replay a message, discard one.

Looking must lose nothing. A queue has no "peek" in AMQP 0-9-1, so a look takes the
messages with ``basic.get`` (acknowledgements on), keeps them unacknowledged while it
reads them, and hands every one back with ``basic.nack(requeue=True)``: the broker puts
them back where they were (classic queues) and nothing is consumed. RabbitMQ's own
management UI reads queues the same way ("Ack mode: Nack message requeue true").
Replay and discard take the same path and settle only the messages chosen: replay
publishes a copy to the message's original exchange and routing key, waits for the
broker's confirm, then acknowledges the dead letter; discard acknowledges it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import aio_pika
import aiormq.abc
import aiormq.exceptions
import orjson
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection
from pydantic import BaseModel

from agentbus._exceptions import Unroutable
from agentbus._logging import get_logger
from agentbus._topology import Topology
from agentbus.bus._poison import ATTEMPT_HEADER
from agentbus.bus._rabbitmq._amqp import scratch_channel
from agentbus.bus._rabbitmq._errors import map_transport_errors

__all__ = ["DeadLetter", "DeadLetters", "Settled", "declare_dead_letter_queue"]

MAX_SHOWN_BYTES: Final = 16 * 1024
"""The body shown of one dead letter, at most (pretty-printed); the rest is cut."""
MAX_SCAN: Final = 10_000
"""Messages one look, replay or discard goes through at most."""
REPLAYED_HEADER: Final = "x-agentbus-replayed"
"""How many times a message was replayed from the dead-letter queue."""
_DROPPED_HEADERS: Final = frozenset(
    {"x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason"}
    | {"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason", ATTEMPT_HEADER}
)


class DeadLetter(BaseModel):
    """One message in the dead-letter queue, as an operator sees it."""

    id: str
    """The AMQP ``message_id``, else the envelope's, else the position in the queue; a
    second message with the same id gets ``#2`` after it, and so on, in queue order."""
    reason: str | None
    queue: str | None
    exchange: str | None
    routing_key: str | None
    sender_id: str | None
    dead_lettered_at: datetime | None
    deaths: int
    size: int
    body: str
    """The body, pretty-printed when it is JSON; cut at ``MAX_SHOWN_BYTES``."""
    truncated: bool


@dataclass
class Settled:
    """What a replay or discard did: ids done, and why the others were not."""

    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Id to reason: not in the queue (any more), or the republish was refused."""


class DeadLetters:
    """The dead-letter queue of one exchange, on a bus's connection (``Bus.dead_letters``)."""

    def __init__(self, connection: Callable[[], AbstractRobustConnection], topology: Topology):
        self._connection = connection
        self._topology = topology

    async def count(self) -> int:
        """Return how many messages the queue holds (a passive declare: nothing is touched)."""
        async with self._channel(confirms=False) as channel:
            queue = await channel.declare_queue(self._topology.dead_letter_queue, passive=True)
            return queue.declaration_result.message_count or 0

    async def browse(self, limit: int = 200) -> list[DeadLetter]:
        """Return up to ``limit`` dead letters, oldest first; every one stays in the queue."""
        letters: list[DeadLetter] = []

        async def look(message: AbstractIncomingMessage, key: str) -> bool:
            if len(letters) < limit:
                letters.append(describe(message, key))
            return False  # handed back

        await self._scan(look, stop=lambda: len(letters) >= limit)
        return letters

    async def replay(self, ids: Collection[str]) -> Settled:
        """Publish each chosen dead letter once to its original routing key, then drop it."""
        settled = Settled()
        wanted = set(ids)
        async with self._channel(confirms=True) as publisher:

            async def replay_one(message: AbstractIncomingMessage, key: str) -> bool:
                if key not in wanted or key in settled.done:
                    return False
                exchange, routing_key = origin(message)
                if routing_key is None:
                    settled.failed[key] = "no original routing key (no x-death header)"
                    return False
                try:
                    await _republish(publisher, message, exchange or "", routing_key)
                except Exception as exc:  # unroutable, refused: the dead letter stays
                    settled.failed[key] = f"republish failed: {type(exc).__name__}: {exc}"
                    return False
                settled.done.append(key)
                return True

            await self._scan(replay_one, stop=lambda: len(settled.done) == len(wanted))
        _missing(settled, wanted)
        return settled

    async def discard(self, ids: Collection[str]) -> Settled:
        """Remove each chosen dead letter from the queue for good."""
        settled = Settled()
        wanted = set(ids)

        async def discard_one(message: AbstractIncomingMessage, key: str) -> bool:
            if key not in wanted or key in settled.done:
                return False
            settled.done.append(key)
            return True

        await self._scan(discard_one, stop=lambda: len(settled.done) == len(wanted))
        _missing(settled, wanted)
        return settled

    async def _scan(
        self,
        visit: Callable[[AbstractIncomingMessage, str], Awaitable[bool]],
        *,
        stop: Callable[[], bool],
    ) -> None:
        # Every message got is held unacknowledged until the end, so each get returns
        # the next one; those not taken are handed back, in order, before returning.
        async with self._channel(confirms=False) as channel:
            queue = await channel.declare_queue(self._topology.dead_letter_queue, passive=True)
            held: list[AbstractIncomingMessage] = []
            seen: Counter[str] = Counter()
            try:
                for position in range(MAX_SCAN):
                    if stop():
                        break
                    message = await queue.get(no_ack=False, fail=False)
                    if message is None:
                        break
                    base = identify(message, position)
                    seen[base] += 1
                    key = base if seen[base] == 1 else f"{base}#{seen[base]}"
                    if await visit(message, key):
                        await message.ack()
                    else:
                        held.append(message)
            finally:
                for message in held:
                    with contextlib.suppress(Exception):  # a closed channel requeues too
                        await message.nack(requeue=True)

    @contextlib.asynccontextmanager
    async def _channel(self, *, confirms: bool) -> Any:
        with map_transport_errors():
            async with scratch_channel(self._connection(), confirms=confirms) as channel:
                yield channel


async def _republish(
    channel: AbstractChannel, message: AbstractIncomingMessage, exchange_name: str, routing_key: str
) -> None:
    headers = {k: v for k, v in (message.headers or {}).items() if k not in _DROPPED_HEADERS}
    replayed = headers.get(REPLAYED_HEADER)
    headers[REPLAYED_HEADER] = (replayed if isinstance(replayed, int) else 0) + 1
    copy = aio_pika.Message(
        message.body,
        headers=headers,
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        delivery_mode=message.delivery_mode,
        priority=message.priority,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to,
        message_id=message.message_id,
        timestamp=message.timestamp,
        type=message.type,
        app_id=message.app_id,
        # No expiration (a request that expired would expire again at once) and no
        # user_id (the broker allows only the publishing connection's own user).
    )
    exchange = (
        channel.default_exchange
        if not exchange_name
        else await channel.get_exchange(exchange_name, ensure=False)
    )
    with map_transport_errors():
        result = await exchange.publish(copy, routing_key=routing_key, mandatory=True, timeout=10)
    if isinstance(result, aiormq.abc.DeliveredMessage):  # basic.return: nobody is bound
        raise Unroutable(f"nothing is bound to {routing_key!r} on exchange {exchange_name!r}")


def identify(message: AbstractIncomingMessage, position: int) -> str:
    """The id an operator picks a dead letter by."""
    if message.message_id:
        return message.message_id
    envelope = _json(message.body)
    if isinstance(envelope, dict) and isinstance(envelope.get("message_id"), str):
        return str(envelope["message_id"])
    return f"position-{position}"


def origin(message: AbstractIncomingMessage) -> tuple[str | None, str | None]:
    """The exchange and routing key the message was first published with (from x-death)."""
    death = _first_death(message.headers or {})
    keys = death.get("routing-keys")
    key = keys[0] if isinstance(keys, list) and keys else None
    exchange = death.get("exchange")
    return (_text(exchange), _text(key))


def describe(message: AbstractIncomingMessage, key: str) -> DeadLetter:
    """Return what an operator sees of one dead letter."""
    headers = message.headers or {}
    death = _first_death(headers)
    exchange, routing_key = origin(message)
    envelope = _json(message.body)
    sender = envelope.get("sender_id") if isinstance(envelope, dict) else None
    if envelope is not None:
        shown = orjson.dumps(envelope, option=orjson.OPT_INDENT_2)
    else:
        shown = message.body
    text = shown[:MAX_SHOWN_BYTES].decode("utf-8", errors="replace")
    when = death.get("time")
    count = death.get("count")
    return DeadLetter(
        id=key,
        reason=_text(death.get("reason")),
        queue=_text(death.get("queue")),
        exchange=exchange,
        routing_key=routing_key,
        sender_id=sender if isinstance(sender, str) else message.app_id,
        dead_lettered_at=when.replace(tzinfo=UTC) if isinstance(when, datetime) else None,
        deaths=count if isinstance(count, int) else 0,
        size=len(message.body),
        body=text,
        truncated=len(shown) > MAX_SHOWN_BYTES,
    )


def _first_death(headers: Mapping[str, Any]) -> Mapping[str, Any]:
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[-1], Mapping):
        # x-death is newest first: the last entry is where the message first died.
        return deaths[-1]
    return {}


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else None


def _missing(settled: Settled, wanted: set[str]) -> None:
    for key in sorted(wanted - set(settled.done) - set(settled.failed)):
        settled.failed[key] = "not in the dead-letter queue"


_MAX_LENGTH: Final = 100_000
_log = get_logger("agentbus.bus")


async def declare_dead_letter_queue(
    connection: AbstractRobustConnection, topology: Topology, quorum: bool, agent_id: str
) -> None:
    """Declare the dead-letter queue and bind it, on a channel of its own; never fatal."""
    # Not restored with the bus's channels, and never fatal: on a cluster a classic
    # queue's home node may be gone, or another bus on this exchange may have declared it
    # with another type. Either way the bus still (re)connects; dead letters are kept by
    # the queue as it is, or dropped while its node is down.
    arguments: dict[str, Any] = {"x-max-length": _MAX_LENGTH, "x-overflow": "drop-head"}
    if quorum:
        arguments["x-queue-type"] = "quorum"  # replicated, like the service queues
    try:
        async with scratch_channel(connection) as channel:
            queue = await channel.declare_queue(
                topology.dead_letter_queue, durable=True, arguments=arguments
            )
            await queue.bind(topology.dead_letter_exchange, routing_key="")
    except (
        aiormq.exceptions.ChannelPreconditionFailed,
        aiormq.exceptions.ChannelNotFoundEntity,
    ) as exc:
        _log.info("dead-letter queue left as it is", agent_id=agent_id, error=str(exc))

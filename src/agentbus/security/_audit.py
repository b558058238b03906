"""Reading the audit trail: the stream's records from an offset or a time, in order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import aio_pika
import aiormq.exceptions
import orjson
from aio_pika.abc import AbstractIncomingMessage

from agentbus._config import Settings, mask_url
from agentbus._exceptions import ConfigurationError
from agentbus.bus import Topology
from agentbus.bus._errors import map_connect_errors, map_transport_errors
from agentbus.bus._nodes import broker_nodes
from agentbus.bus._tls import login_mechanism, tls_context

__all__ = ["AuditEntry", "AuditPosition", "StreamOffset", "read_audit"]

StreamOffset = Literal["first", "last", "next"] | int | datetime
"""Where to start: the oldest record kept, the last chunk, new ones only, an offset, a time."""

_PREFETCH = 256


AuditPosition = tuple[int, int]
"""Where a record is: its message's stream offset, and its index in that message."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One record of the audit stream, where it is, and the broker user that wrote it."""

    offset: int
    index: int
    record: dict[str, Any]
    written_by: str | None

    @property
    def position(self) -> AuditPosition:
        """Where this record is: pass it as ``after`` to read on from the next one."""
        return (self.offset, self.index)


async def read_audit(
    settings: Settings,
    *,
    start: StreamOffset = "first",
    after: AuditPosition | None = None,
    limit: int | None = None,
    idle: float | None = 2.0,
) -> AsyncIterator[AuditEntry]:
    """Yield the audit stream's records from ``start``, in order.

    Args:
        settings: The broker (and TLS) settings and the exchange whose stream to read.
        start: Where to start (RabbitMQ's ``x-stream-offset``).
        after: Read on after this record (a reader's last ``position``), instead of
            ``start``: a reader that stops and starts again misses and repeats nothing.
        limit: Stop after this many records.
        idle: Stop when no record came for this many seconds; None: follow forever.

    Raises:
        BrokerUnavailable: the broker cannot be reached.
        AccessRefused: this user may not read the stream.
        ConfigurationError: the stream does not exist.
    """
    nodes = broker_nodes(settings.url)
    context = tls_context(settings, nodes)
    mechanism = login_mechanism(settings)
    url = nodes[0] if mechanism == "plain" else f"{nodes[0]}?auth={mechanism}"
    with map_connect_errors(
        mask_url(nodes[0]),
        secure=context is not None,
        client_cert=settings.tls_cert_file is not None,
    ):
        connection = await aio_pika.connect(
            url, ssl_context=context, timeout=settings.connect_timeout
        )
    try:
        stream = Topology(settings.exchange).audit_stream
        with map_transport_errors():
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=_PREFETCH)
            try:
                queue = await channel.get_queue(stream)
            except aiormq.exceptions.ChannelNotFoundEntity as exc:
                raise ConfigurationError(
                    f"there is no audit stream {stream!r}: import the definitions "
                    "('agentbus definitions') or run agents with AGENTBUS_AUDIT=true"
                ) from exc
        count = 0
        origin = start if after is None else after[0]
        arrived: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()

        async def take(message: AbstractIncomingMessage) -> None:
            # A stream is read with acks (they move the consumer's credit), never nacks:
            # what is prefetched and not read when the reader stops goes with the channel.
            await message.ack()
            arrived.put_nowait(message)

        with map_transport_errors():
            await queue.consume(take, arguments={"x-stream-offset": origin})
        while limit is None or count < limit:
            try:
                async with asyncio.timeout(idle):
                    message = await arrived.get()
            except TimeoutError:
                return
            found = (message.headers or {}).get("x-stream-offset")
            offset = found if isinstance(found, int) else -1
            records = orjson.loads(message.body)
            for index, record in enumerate(records if isinstance(records, list) else []):
                if after is not None and (offset, index) <= after:
                    continue
                if limit is not None and count >= limit:
                    return
                yield AuditEntry(offset, index, record, message.user_id)
                count += 1
    finally:
        await connection.close()

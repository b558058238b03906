"""Reading an artifact back from its stream: from its first chunk's offset, skipping what
is not its own, and on from where it was after a reconnect (offsets are exact)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Final

import aiormq
import aiormq.abc
import aiormq.exceptions
from aio_pika.abc import AbstractRobustConnection

from agentbus._exceptions import ArtifactExpired, ArtifactMissing, ConnectionLost
from agentbus.bus._rabbitmq._amqp import scratch_channel
from agentbus.bus._rabbitmq._errors import map_transport_errors
from agentbus.bus._stores._artifact_store import describe
from agentbus.envelopes import ArtifactRef
from agentbus.security import owner_of

__all__ = [
    "ARTIFACT_HEADER",
    "CHUNK_TYPE",
    "META_TYPE",
    "SEQ_HEADER",
    "StreamReader",
    "location_of",
]

ARTIFACT_HEADER: Final = "agentbus-artifact"
"""The header every message of an object carries: its id."""
SEQ_HEADER: Final = "agentbus-seq"
"""The header of a chunk: its number in the object, from 0."""
CHUNK_TYPE: Final = "artifact.chunk"
META_TYPE: Final = "artifact.meta"
_READ_WINDOW_BYTES: Final = 8 * 1024 * 1024  # chunks delivered and not yet taken
_RECONNECT_WAIT: Final = 30.0


def location_of(ref: ArtifactRef) -> tuple[str, int]:
    """The stream and offset a stream reference's ``location`` names.

    Raises:
        ArtifactMissing: ``location`` is not ``<stream>@<offset>``.
    """
    stream, at, offset = ref.location.rpartition("@")
    if not at or not stream or not offset.isdigit():
        raise ArtifactMissing(
            f"artifact {ref.id}: {ref.location!r} is not a stream location",
            details={**describe(ref), "reason": "missing"},
        )
    return stream, int(offset)


class StreamReader:
    """Reads one object's chunks from its offset on; picks up where it was after a
    reconnect (offsets are exact, so nothing is read twice or skipped)."""

    def __init__(
        self,
        connection: AbstractRobustConnection,
        stream: str,
        offset: int,
        ref: ArtifactRef,
        timeout: float,
    ) -> None:
        self._connection = connection
        self._stream = stream
        self._first = offset
        self._resume_at = offset
        self._ref = ref
        self._timeout = timeout
        self._seq = 0
        self._left = ref.size
        # Chunks delivered ahead of the reader: a window of bytes, of chunks up to 1 MiB.
        self._prefetch = min(64, max(2, _READ_WINDOW_BYTES // max(1, min(ref.size, 2**20))))

    async def chunks(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _RECONNECT_WAIT
        while True:
            try:
                async for chunk in self._read():
                    deadline = loop.time() + _RECONNECT_WAIT
                    yield chunk
                return
            except ConnectionLost:
                if loop.time() > deadline:
                    raise
            await asyncio.sleep(0.2)

    @property
    def _done(self) -> bool:
        return self._seq > 0 and self._left <= 0

    async def _read(self) -> AsyncIterator[bytes]:
        arrived: asyncio.Queue[aiormq.abc.DeliveredMessage | BaseException] = asyncio.Queue()
        with map_transport_errors():
            async with scratch_channel(self._connection) as channel:
                underlay = await channel.get_underlay_channel()
                underlay.closing.add_done_callback(
                    lambda closing: arrived.put_nowait(_closed(closing))
                )
                await underlay.basic_qos(prefetch_count=self._prefetch)

                async def deliver(message: aiormq.abc.DeliveredMessage) -> None:
                    arrived.put_nowait(message)

                try:
                    await underlay.basic_consume(
                        self._stream, deliver, arguments={"x-stream-offset": self._resume_at}
                    )
                except aiormq.exceptions.ChannelNotFoundEntity as exc:
                    raise self._missing("its stream is not there") from exc
                while not self._done:
                    message = await self._next(arrived)
                    await underlay.basic_ack(message.delivery_tag or 0, wait=False)
                    chunk = self._take(message)
                    if chunk is not None:
                        yield chunk

    async def _next(
        self, arrived: asyncio.Queue[aiormq.abc.DeliveredMessage | BaseException]
    ) -> aiormq.abc.DeliveredMessage:
        try:
            async with asyncio.timeout(self._timeout):
                item = await arrived.get()
        except TimeoutError:
            raise self._missing(f"no chunk of it came within {self._timeout} s") from None
        if isinstance(item, BaseException):
            raise item
        return item

    def _take(self, message: aiormq.abc.DeliveredMessage) -> bytes | None:
        properties = message.header.properties
        headers = properties.headers or {}
        offset = headers.get("x-stream-offset")
        if isinstance(offset, int):
            self._check_start(offset, headers)
            self._resume_at = offset + 1
        if headers.get(ARTIFACT_HEADER) != self._ref.id or properties.message_type != CHUNK_TYPE:
            return None  # another object's, or this one's metadata
        if properties.user_id is not None and owner_of(self._ref.owner) != properties.user_id:
            return None  # not its owner's: someone else wrote into the stream
        seq = headers.get(SEQ_HEADER)
        if not isinstance(seq, int) or seq < self._seq:
            return None  # a chunk sent again after a lost confirm
        if seq > self._seq:
            raise self._missing(f"chunk {self._seq} is not in the stream (next: {seq})")
        self._seq += 1
        self._left -= len(message.body)
        return message.body

    def _check_start(self, offset: int, headers: dict[str, Any]) -> None:
        if self._seq > 0 or offset < self._first:
            return
        if offset > self._first:
            raise ArtifactExpired(
                f"artifact {self._ref.id} ({self._ref.name!r}) is no longer in its stream "
                "(its retention dropped it)",
                details={**describe(self._ref), "reason": "expired"},
            )
        if headers.get(ARTIFACT_HEADER) != self._ref.id:
            raise self._missing("its offset holds another object")

    def _missing(self, why: str) -> ArtifactMissing:
        return ArtifactMissing(
            f"artifact {self._ref.id} ({self._ref.name!r}) cannot be read: {why}",
            details={**describe(self._ref), "reason": "missing"},
        )


def _closed(closing: asyncio.Future[Any]) -> BaseException:
    if not closing.cancelled() and isinstance(closing.exception(), BaseException):
        reason = closing.exception()
        assert reason is not None
        if isinstance(reason, aiormq.exceptions.ChannelNotFoundEntity):
            return reason
    return ConnectionLost("the channel reading the artifact closed")

"""Artifacts on the broker's own streams: the default store (docs/artifacts.md).

An object is a run of chunk messages on the stream of the pair of broker users that
stored and may read it (``<exchange>.artifacts.<writer>.<reader>``), then one metadata
message, as NATS keeps objects on its streams. Each chunk carries the headers
``agentbus-artifact`` (the id) and ``agentbus-seq`` (0, 1, ...). Streams of other
objects may interleave, so a reader skips what is not its object's.

A publisher does not learn a message's offset over AMQP 0-9-1, but a consumer does
(``x-stream-offset``): before the first chunk goes, the writer starts a consumer at
``next`` and notes the offset its first chunk comes back with. The reference names that
offset, so a reader starts right there: no index, no scan.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, Final

import aiormq
import aiormq.abc
import aiormq.exceptions
import orjson
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from pamqp.commands import Basic

from agentbus._config import Settings
from agentbus._exceptions import (
    ConnectionLost,
    PublishFailed,
)
from agentbus._topology import Topology
from agentbus.bus._rabbitmq._amqp import scratch_channel
from agentbus.bus._rabbitmq._artifact_reader import (
    ARTIFACT_HEADER,
    CHUNK_TYPE,
    META_TYPE,
    SEQ_HEADER,
    StreamReader,
    location_of,
)
from agentbus.bus._rabbitmq._errors import map_transport_errors, through_reconnects
from agentbus.bus._stores._artifact_store import (
    Placement,
    Tally,
    new_artifact_id,
)
from agentbus.envelopes import ArtifactRef

__all__ = ["StreamArtifactStore", "stream_arguments"]

_WINDOW_BYTES: Final = 8 * 1024 * 1024  # unconfirmed chunks in flight (measured)
_SEGMENT_BYTES: Final = 64 * 1000 * 1000  # retention drops whole segments: keep them small
_PUBLISH_TIMEOUT: Final = 30.0
_RECONNECT_WAIT: Final = 30.0


def stream_arguments(retention: str, max_bytes: int) -> dict[str, Any]:
    """The arguments an artifact stream is declared with (the definitions use them too)."""
    return {
        "x-queue-type": "stream",
        "x-max-age": retention,
        "x-max-length-bytes": max_bytes,
        "x-stream-max-segment-size-bytes": _SEGMENT_BYTES,
    }


class StreamArtifactStore:
    """Artifacts chunked on RabbitMQ streams, on the bus's connection."""

    kind = "stream"

    def __init__(
        self,
        connection: AbstractRobustConnection,
        topology: Topology,
        *,
        chunk_size: int,
        retention: str,
        max_bytes: int,
        read_timeout: float,
        app_id: str,
        user_id: str | None,
    ) -> None:
        self.chunk_size = chunk_size
        self._connection = connection
        self._topology = topology
        self._arguments = stream_arguments(retention, max_bytes)
        self._read_timeout = read_timeout
        self._app_id = app_id
        self._user_id = user_id
        self._declared: set[str] = set()

    @classmethod
    def of(
        cls,
        connection: AbstractRobustConnection,
        settings: Settings,
        app_id: str,
        user_id: str | None,
    ) -> StreamArtifactStore:
        """The store on ``connection``, as ``settings`` say."""
        return cls(
            connection,
            Topology(settings.exchange),
            chunk_size=settings.artifact_chunk_size,
            retention=settings.artifact_retention,
            max_bytes=settings.artifact_stream_max_bytes,
            read_timeout=settings.artifact_read_timeout,
            app_id=app_id,
            user_id=user_id,
        )

    def __repr__(self) -> str:
        return f"<StreamArtifactStore exchange={self._topology.exchange!r}>"

    async def put(self, chunks: AsyncIterator[bytes], placement: Placement) -> ArtifactRef:
        """Publish the object's chunks (confirmed), then its metadata; return its reference."""
        stream = self._topology.artifact_stream(placement.writer, placement.reader)
        await through_reconnects(lambda: self._declare(stream), seconds=_RECONNECT_WAIT)
        artifact_id = new_artifact_id()
        tally = Tally(placement.max_size)
        # Nothing is written yet: a probe the broker refuses (RabbitMQ 3.10 closes the
        # connection, INTERNAL_ERROR, on a consume before a new stream is registered, seen
        # on a loaded node) is started again once the connection is back, and the writer's
        # channel is opened after it, on the connection the probe found.
        probe = await through_reconnects(
            lambda: _Probe.started(self._connection, stream, artifact_id),
            seconds=_RECONNECT_WAIT,
        )
        with map_transport_errors():
            async with probe, scratch_channel(self._connection, confirms=True) as channel:
                writer = _Writer(channel, stream, artifact_id, self._properties, self.chunk_size)
                await writer.write(chunks, tally)
                offset = await probe.offset(self._read_timeout)
                ref = placement.ref(artifact_id, self.kind, f"{stream}@{offset}", tally)
                await writer.send(orjson.dumps(ref.wire()), META_TYPE, None, wait=True)
        return ref

    def chunks(self, ref: ArtifactRef) -> AsyncIterator[bytes]:
        """Read the object's chunks from its first one's offset, through reconnects."""
        stream, offset = location_of(ref)
        return StreamReader(self._connection, stream, offset, ref, self._read_timeout).chunks()

    async def delete(self, ref: ArtifactRef) -> bool:
        """A stream is append-only: its objects go with its retention. Return False."""
        return False

    async def delete_stream(self, writer: str, reader: str) -> None:
        """Delete the stream of artifacts ``writer`` stored for ``reader``, all of them."""
        stream = self._topology.artifact_stream(writer, reader)
        with map_transport_errors():
            async with scratch_channel(self._connection) as channel:
                await channel.queue_delete(stream)
        self._declared.discard(stream)

    async def aclose(self) -> None:
        """Nothing is held open between calls."""

    def _properties(self, artifact_id: str, seq: int | None, kind: str) -> Basic.Properties:
        headers: dict[str, Any] = {ARTIFACT_HEADER: artifact_id}
        if seq is not None:
            headers[SEQ_HEADER] = seq
        return Basic.Properties(
            content_type="application/json" if kind == META_TYPE else "application/octet-stream",
            delivery_mode=2,
            headers=headers,
            message_id=f"{artifact_id}.{'meta' if seq is None else seq}",
            message_type=kind,
            timestamp=datetime.now(UTC),
            app_id=self._app_id,
            user_id=self._user_id,
        )

    async def _declare(self, stream: str) -> None:
        if stream in self._declared:
            return
        with map_transport_errors():
            try:
                # Passive first: a user may write a stream it may not configure.
                async with scratch_channel(self._connection) as probe:
                    await probe.declare_queue(stream, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                try:
                    async with scratch_channel(self._connection) as channel:
                        await channel.declare_queue(stream, durable=True, arguments=self._arguments)
                except aiormq.exceptions.ChannelPreconditionFailed:
                    pass  # declared meanwhile, with arguments of its own: write to it
        self._declared.add(stream)


class _Writer:
    """Publishes one object's chunks with at most a window of confirms outstanding."""

    def __init__(
        self, channel: AbstractChannel, stream: str, artifact_id: str, properties: Any, size: int
    ) -> None:
        self._channel = channel
        self._stream = stream
        self._id = artifact_id
        self._properties = properties
        self._slots = asyncio.Semaphore(max(1, _WINDOW_BYTES // size))
        self._sent: set[asyncio.Task[None]] = set()
        self._failed: BaseException | None = None

    async def write(self, chunks: AsyncIterator[bytes], tally: Tally) -> None:
        """Send every chunk (at least one, maybe empty, so the object has a first) and wait
        for their confirms."""
        seq = 0
        try:
            async for chunk in chunks:
                tally.add(chunk)
                await self.send(chunk, CHUNK_TYPE, seq)
                seq += 1
            if seq == 0:
                await self.send(b"", CHUNK_TYPE, 0)
            await self._drain()
        finally:
            for task in self._sent:
                task.cancel()

    async def send(self, body: bytes, kind: str, seq: int | None, *, wait: bool = False) -> None:
        """Publish one message; ``wait``: until it is confirmed, else within the window."""
        if self._failed is not None:
            raise self._failed
        await self._slots.acquire()
        task = asyncio.ensure_future(self._publish(body, self._properties(self._id, seq, kind)))
        self._sent.add(task)
        task.add_done_callback(self._settled)
        if wait:
            await self._drain()

    async def _publish(self, body: bytes, properties: Basic.Properties) -> None:
        underlay = await self._channel.get_underlay_channel()
        try:
            with map_transport_errors():
                returned = await underlay.basic_publish(
                    body,
                    exchange="",
                    routing_key=self._stream,
                    properties=properties,
                    mandatory=True,
                    timeout=_PUBLISH_TIMEOUT,
                )
        except TimeoutError as exc:  # a stream whose node went: no confirm, no close either
            raise ConnectionLost(
                f"a chunk to {self._stream!r} not confirmed within {_PUBLISH_TIMEOUT:.0f} s"
            ) from exc
        if isinstance(returned, aiormq.abc.DeliveredMessage):
            raise PublishFailed(f"the artifact stream {self._stream!r} is not there")

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._sent.discard(task)
        self._slots.release()
        if not task.cancelled() and task.exception() is not None and self._failed is None:
            self._failed = task.exception()

    async def _drain(self) -> None:
        while self._sent:
            await asyncio.wait(set(self._sent))
        if self._failed is not None:
            raise self._failed


class _Probe:
    """A consumer at the stream's end that learns the offset of an object's first chunk."""

    def __init__(self, connection: AbstractRobustConnection, stream: str, artifact_id: str):
        self._connection = connection
        self._stream = stream
        self._id = artifact_id
        self._found: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._stack = contextlib.AsyncExitStack()

    @classmethod
    async def started(
        cls, connection: AbstractRobustConnection, stream: str, artifact_id: str
    ) -> _Probe:
        """A probe consuming; what the transport raises as an agentbus error."""
        probe = cls(connection, stream, artifact_id)
        with map_transport_errors():
            async with contextlib.AsyncExitStack() as stack:
                channel = await stack.enter_async_context(scratch_channel(connection))
                await probe._start(channel)
                probe._stack = stack.pop_all()
        return probe

    async def __aenter__(self) -> _Probe:
        return self

    async def _start(self, channel: AbstractChannel) -> None:
        underlay = await channel.get_underlay_channel()
        await underlay.basic_qos(prefetch_count=4)

        async def take(message: aiormq.abc.DeliveredMessage) -> None:
            # No ack once found, nor once closing: an ack queued after the channel's
            # close reaches a channel the broker has freed, and it closes the connection.
            if self._found.done():
                return
            headers = message.header.properties.headers or {}
            offset = headers.get("x-stream-offset")
            if headers.get(ARTIFACT_HEADER) == self._id and isinstance(offset, int):
                self._found.set_result(offset)
                return
            with contextlib.suppress(aiormq.exceptions.AMQPError, ConnectionError):
                await underlay.basic_ack(message.delivery_tag or 0, wait=False)

        await underlay.basic_consume(self._stream, take, arguments={"x-stream-offset": "next"})

    async def offset(self, timeout: float) -> int:
        """The offset of the object's first chunk, once it comes back."""
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(self._found)
        except TimeoutError as exc:
            raise ConnectionLost(
                f"the first chunk of artifact {self._id} did not come back from "
                f"{self._stream!r} within {timeout} s"
            ) from exc

    async def __aexit__(self, *exc: object) -> None:
        if not self._found.done():
            self._found.cancel()
        await self._stack.aclose()

"""The audit trail: a record of every admitted request and its outcome, and of every refusal.

Records go to a RabbitMQ stream (``<exchange>.audit``, ``x-queue-type: stream``): a
durable, replicated, append-only log that any number of readers replay from any offset
or time (``agentbus audit``), kept as long as its retention policy says. A record says
who (``sender_id``, the AMQP ``user_id``), what (``action``, ``receiver``), how it ended
(``outcome``: ``success``, an error code, ``duplicate``, or the refusal's reason) and
when and how long, with the request's ``message_id`` (its replies' correlation id) and
its ``plan_id``; never its parameters or result.

On the request path a record costs building a small dict and appending it to a buffer;
a writer task publishes the buffer (no confirms) in order, each message a JSON array of
the records buffered meanwhile (one when traffic is light, up to ``_BATCH`` under load:
the stream's cost is per message). Each message is published with the recorder's AMQP
``user_id`` when senders are verified, so a reader knows which broker user wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import aiormq.exceptions
import orjson
import structlog
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection

from agentbus.bus._amqp import basic_publish, message_properties, scratch_channel
from agentbus.envelopes import Envelope, RequestEnvelope

__all__ = [
    "AUDIT_FORMAT",
    "AuditSink",
    "AuditTrail",
    "audit_record",
    "envelope_fields",
    "raw_fields",
]

AUDIT_FORMAT: Final = 1
"""The version of the record format (``v`` in each record)."""

_log = structlog.get_logger("agentbus.bus")
_PUBLISH_TIMEOUT: Final = 5.0
_BATCH: Final = 100
_MAX_FIELD: Final = 255  # an undecodable message's fields are recorded only if short text


class AuditSink(Protocol):
    """Where the dispatcher appends audit records."""

    off: bool
    """No record is kept (no stream): the dispatcher does not build them."""

    def append(self, record: dict[str, Any]) -> None: ...


def audit_record(
    *,
    kind: str,
    recorder: str,
    user_id: str | None,
    outcome: str,
    seconds: float | None = None,
    sender_id: str | None = None,
    message_type: str | None = None,
    action: str | None = None,
    receiver: str | None = None,
    message_id: str | None = None,
    plan_id: str | None = None,
) -> dict[str, Any]:
    """Build one audit record (``kind``: ``request`` or ``refusal``)."""
    return {
        "v": AUDIT_FORMAT,
        "at": datetime.now(UTC).isoformat(),
        "kind": kind,
        "recorder": recorder,
        "sender_id": sender_id,
        "user_id": user_id,
        "message_type": message_type,
        "action": action,
        "receiver": receiver,
        "outcome": outcome,
        "duration_ms": None if seconds is None else round(seconds * 1000, 3),
        "message_id": message_id,
        "plan_id": plan_id,
    }


def envelope_fields(envelope: Envelope) -> dict[str, Any]:
    """The fields of a record that a decoded envelope gives (never its parameters)."""
    extra: Mapping[str, Any] = envelope.metadata.model_extra or {}
    plan_id = extra.get("plan_id")
    return {
        "sender_id": envelope.sender_id,
        "message_type": envelope.message_type,
        "action": envelope.payload.action if isinstance(envelope, RequestEnvelope) else None,
        "receiver": envelope.receiver_id,
        "message_id": envelope.message_id,
        "plan_id": plan_id if isinstance(plan_id, str) else None,
    }


def raw_fields(raw: Mapping[str, Any], amqp_message_id: str | None) -> dict[str, Any]:
    """The fields of a record that an undecodable message's JSON gives, where they are ids."""

    def text(value: object) -> str | None:
        return value if isinstance(value, str) and len(value) <= _MAX_FIELD else None

    return {
        "sender_id": text(raw.get("sender_id")),
        "message_type": text(raw.get("message_type")),
        "receiver": text(raw.get("receiver_id")),
        "message_id": text(raw.get("message_id")) or amqp_message_id,
    }


class AuditTrail:
    """Publishes audit records to the stream, in order, from a writer task of its own.

    The writer first finds the stream (or, with ``create``, declares it): off the bus's
    open, which it does not slow down. Records appended meanwhile wait in the buffer;
    if there is no stream, they are dropped and the trail turns itself off.
    """

    def __init__(
        self,
        connection: AbstractRobustConnection,
        stream: str,
        *,
        create: bool,
        app_id: str,
        user_id: str | None,
    ) -> None:
        self.stream = stream
        self.written = 0
        self.failed = 0
        self.off = False
        self._connection = connection
        self._create = create
        self._channel: AbstractRobustChannel | None = None
        self._app_id = app_id
        self._user_id = user_id
        self._buffer: deque[dict[str, Any]] = deque()
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        """Start the writer task."""
        self._writer = asyncio.create_task(self._write_forever(), name=f"audit:{self.stream}")

    def append(self, record: dict[str, Any]) -> None:
        """Queue ``record`` for the stream; it is written soon, in order."""
        if self.off:
            return
        self._buffer.append(record)
        self._wake.set()

    async def _find_stream(self) -> bool:
        try:
            # Passive unless asked to make it: a missing stream closes only this channel.
            async with scratch_channel(self._connection) as probe:
                await probe.declare_queue(
                    self.stream,
                    durable=True,
                    passive=not self._create,
                    arguments={"x-queue-type": "stream"},
                )
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        except aiormq.exceptions.ChannelPreconditionFailed:
            pass  # there, declared otherwise (its own retention arguments): write to it
        return True

    async def aclose(self) -> None:
        """Write what is buffered (a bounded wait), then stop the writer."""
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(_PUBLISH_TIMEOUT):
                    await asyncio.shield(self._writer)
            self._writer.cancel()
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._channel.close()

    async def _write_forever(self) -> None:
        try:
            found = await self._find_stream()
            if found:
                self._channel = await self._connection.channel(publisher_confirms=False)
        except Exception as exc:  # the connection went meanwhile: no trail for this bus
            _log.warning("audit stream not opened", error=repr(exc))
            found = False
        if not found:
            self.off = True
            self._buffer.clear()
            return
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._buffer:
                batch = [self._buffer[n] for n in range(min(len(self._buffer), _BATCH))]
                try:
                    await self._publish(batch)
                except Exception as exc:  # the connection is down: keep them, retry soon
                    self.failed += 1
                    _log.warning("audit records not written yet", error=repr(exc))
                    if self._closing:
                        return
                    await asyncio.sleep(1.0)
                    continue
                for _ in batch:
                    self._buffer.popleft()
                self.written += len(batch)
            if self._closing:
                return

    async def _publish(self, batch: list[dict[str, Any]]) -> None:
        assert self._channel is not None
        properties = message_properties(
            app_id=self._app_id,
            message_id=batch[0]["message_id"] or "",
            message_type="audit",
            timestamp=datetime.now(UTC),
            correlation_id=None,
            reply_to=None,
            persistent=True,
            ttl=None,
            user_id=self._user_id,
        )
        await basic_publish(
            self._channel,
            exchange="",
            routing_key=self.stream,
            body=orjson.dumps(batch),
            properties=properties,
            mandatory=False,
            timeout=_PUBLISH_TIMEOUT,
        )

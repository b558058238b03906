"""The minimal raw RPC of the request/response suite: what a quick hand-rolled one does.

aio-pika, RabbitMQ's direct reply-to (``amq.rabbitmq.reply-to``: no reply queue, no acks
on replies), transient messages, no publisher confirms, one JSON decode and encode on each
side. The baseline for agentbus's transient requests (issue 17's second target).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aio_pika
import orjson
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage

DIRECT_REPLY = "amq.rabbitmq.reply-to"
TIMEOUT = 5.0


class MinimalRpc:
    """One queue, direct reply-to, JSON in and out."""

    def __init__(self, url: str, queue: str, prefetch: int = 64) -> None:
        self.url = url
        self.queue = queue
        self.prefetch = prefetch
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._connection: AbstractConnection | None = None

    async def open_server(self) -> None:
        self._connection = await aio_pika.connect_robust(self.url)
        channel = await self._connection.channel(publisher_confirms=False)
        await channel.set_qos(prefetch_count=self.prefetch)
        self._reply = channel.default_exchange
        queue = await channel.declare_queue(self.queue, durable=False, auto_delete=True)
        await queue.consume(self._serve)

    async def open_client(self) -> None:
        self._connection = await aio_pika.connect_robust(self.url)
        channel = await self._connection.channel(publisher_confirms=False)
        self._publish = channel.default_exchange
        replies = await channel.get_queue(DIRECT_REPLY, ensure=False)
        await replies.consume(self._on_reply, no_ack=True)

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()

    async def _serve(self, message: AbstractIncomingMessage) -> None:
        request = orjson.loads(message.body)
        reply = aio_pika.Message(
            orjson.dumps({"result": request["parameters"]}),
            correlation_id=message.correlation_id,
            content_type="application/json",
        )
        await self._reply.publish(reply, routing_key=message.reply_to or "", mandatory=False)
        await message.ack()

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        future = self._pending.get(message.correlation_id or "")
        if future is not None and not future.done():
            future.set_result(orjson.loads(message.body)["result"])

    async def request(self, i: int) -> Any:
        correlation = uuid.uuid4().hex
        future = asyncio.get_running_loop().create_future()
        self._pending[correlation] = future
        message = aio_pika.Message(
            orjson.dumps({"action": "ping", "parameters": {"i": i}}),
            correlation_id=correlation,
            reply_to=DIRECT_REPLY,
            content_type="application/json",
        )
        try:
            async with asyncio.timeout(TIMEOUT):
                await self._publish.publish(message, routing_key=self.queue)
                return await future
        finally:
            del self._pending[correlation]

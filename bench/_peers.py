"""The peers agentbus is measured against: raw aio-pika and FastStream's ``RabbitBroker``.

Servers answer ``ping``, ``echo`` and ``total`` with a response envelope's fields:
``RawServer`` from a durable queue (manual acks; the reply transient and confirmed before the
ack), ``FastStreamServer`` from a durable queue, FastStream replying to ``reply_to``.
Requesters (``Asker``: the ping, a subtask, the fan-out of N echoes then their ``total``):
``RawClient`` (persistent, mandatory, confirmed, a TTL, its own reply queue),
``FastStreamClient`` (FastStream's ``broker.request``: direct reply-to, one in flight per
broker, its lock) and ``FastStreamRequester`` (a standing reply queue, many in flight: what a
FastStream "leader" hand-rolls). ``MinimalRpc``: direct reply-to, transient, no confirms.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import aio_pika
import aiormq.abc
import orjson
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage
from faststream.rabbit import Channel, RabbitBroker, RabbitMessage, RabbitQueue

ROUTING_KEY = "raw.work.request"
DIRECT_REPLY = "amq.rabbitmq.reply-to"
REPLY_PREFETCH = 512  # the agentbus instance queue's prefetch
JSON = "application/json"
WORK = {"ping": lambda p: p, "echo": lambda p: int(p["n"]),
        "total": lambda p: sum(int(value) for value in p["values"])}  # fmt: skip


def envelope(kind: str, sender: str, payload: Any, **metadata: Any) -> dict[str, Any]:
    """An agentbus envelope's fields, as a hand-rolled peer sends them, without the models."""
    return {"protocol_version": "1.0", "message_id": str(uuid.uuid4()),
            "timestamp": datetime.now(UTC), "sender_id": sender,
            "receiver_id": metadata.pop("receiver", "echo"), "metadata": metadata,
            "message_type": kind, "payload": payload}  # fmt: skip


def reply_fields(request: dict[str, Any], sender: str) -> dict[str, Any]:
    """The response envelope's fields to a request, as agentbus sends them."""
    action, parameters = request["payload"]["action"], request["payload"].get("parameters") or {}
    work = WORK.get(action)
    error = None if work else {"code": "unknown_action", "message": f"no action {action!r}"}
    answer = {"status": "error" if error else "success", "error": error,
              "result": work(parameters) if work else None}  # fmt: skip
    return envelope("response", sender, answer, receiver=request["sender_id"],
                    correlation_id=request["message_id"])  # fmt: skip


class Pending:
    """Requests awaiting their reply, by correlation id."""

    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future[Any]] = {}

    def resolve(self, correlation_id: str | None, value: Any) -> None:
        future = self._futures.get(correlation_id or "")
        if future is not None and not future.done():
            future.set_result(value)

    async def wait(self, key: str, send: Any, timeout: float) -> Any:
        """Send (an awaitable), then wait for the reply to ``key``, all within ``timeout``."""
        self._futures[key] = future = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await send
                return await future
        finally:
            del self._futures[key]


class Asker:
    """A hand-rolled requester: ``call`` sends an envelope's fields and returns the reply's."""

    sender = "asker"

    async def call(self, fields: dict[str, Any]) -> Any:
        raise NotImplementedError

    async def ping(self, i: int) -> Any:
        """The request/response payload every side sends: ``ping`` with ``{"i": i}``."""
        payload = {"action": "ping", "parameters": {"i": i}}
        return await self.call(envelope("request", self.sender, payload))

    async def request(self, action: str, parameters: dict[str, Any], subtask: str) -> Any:
        """One subtask of the fan-out, metadata as agentbus's leader sends; its result."""
        deadline = datetime.now(UTC) + timedelta(seconds=30)
        payload = {"action": action, "parameters": parameters}
        reply = await self.call(envelope("request", self.sender, payload, deadline=deadline,
                                         plan_id="raw-plan", subtask_id=subtask))  # fmt: skip
        if reply["payload"]["status"] != "success":
            raise RuntimeError(f"{action} failed: {reply['payload']['error']}")
        return reply["payload"]["result"]

    async def run(self, n: int, window: int) -> dict[str, Any]:
        """N ``echo`` requests with at most ``window`` in flight, then the fan-in ``total``."""
        results: list[Any] = [None] * n
        numbers = iter(range(n))

        async def lane() -> None:
            for i in numbers:
                results[i] = await self.request("echo", {"n": i}, f"t{i}")

        start = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(min(window, n))))
        total = await self.request("total", {"values": results}, "sum")
        seconds = time.perf_counter() - start
        if total != n * (n - 1) // 2:
            raise RuntimeError(f"fan-out wrong: sum={total}")
        return {"seconds": seconds, "per_s": n / seconds}


class _Connected:
    url: str
    _connection: AbstractConnection | None = None

    async def _connect(self) -> AbstractConnection:
        self._connection = await aio_pika.connect_robust(self.url)
        return self._connection

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()


class RawServer(_Connected):
    """Serves a durable queue bound to ``exchange`` with ``raw.work.request``."""

    def __init__(self, url: str, exchange: str, queue: str, prefetch: int, sender: str) -> None:
        self.url, self.exchange, self.queue = url, exchange, queue
        self.prefetch, self.sender = prefetch, sender

    async def open(self) -> None:
        connection = await self._connect()
        self._replies = (await connection.channel(publisher_confirms=True)).default_exchange
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=self.prefetch)
        topic = await channel.declare_exchange(self.exchange, "topic", durable=True)
        queue = await channel.declare_queue(self.queue, durable=True)
        await queue.bind(topic, routing_key=ROUTING_KEY)
        await queue.consume(self._serve)

    async def _serve(self, incoming: AbstractIncomingMessage) -> None:
        try:
            reply = reply_fields(orjson.loads(incoming.body), self.sender)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            await incoming.reject(requeue=False)
            return
        out = aio_pika.Message(orjson.dumps(reply), content_type=JSON,
                               message_id=reply["message_id"],
                               correlation_id=incoming.correlation_id,
                               delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT)  # fmt: skip
        returned = await self._replies.publish(out, incoming.reply_to or "", mandatory=True)
        if isinstance(returned, aiormq.abc.DeliveredMessage):  # the requester has gone
            print(f"{self.sender}: reply unroutable", file=sys.stderr)
        await incoming.ack()


class RawClient(Asker, _Connected):
    """Requests to a ``RawServer``'s exchange, replies on ``reply_queue``."""

    def __init__(self, url: str, exchange: str, reply_queue: str, timeout: float) -> None:
        self.url, self.exchange_name, self.reply_queue = url, exchange, reply_queue
        self.timeout, self.sender = timeout, f"raw-{uuid.uuid4().hex[:6]}"
        self._pending = Pending()

    async def open(self) -> None:
        connection = await self._connect()
        publish = await connection.channel(publisher_confirms=True)
        self._exchange = await publish.declare_exchange(self.exchange_name, "topic", durable=True)
        consume = await connection.channel()
        await consume.set_qos(prefetch_count=REPLY_PREFETCH)
        replies = await consume.declare_queue(self.reply_queue, durable=False,
                                              arguments={"x-expires": 60_000})  # fmt: skip
        await replies.consume(self._on_reply)

    async def _on_reply(self, incoming: AbstractIncomingMessage) -> None:
        self._pending.resolve(incoming.correlation_id, orjson.loads(incoming.body))
        await incoming.ack()

    async def _send(self, out: aio_pika.Message) -> None:
        returned = await self._exchange.publish(out, ROUTING_KEY, mandatory=True)
        if isinstance(returned, aiormq.abc.DeliveredMessage):
            raise RuntimeError(f"unroutable: no queue bound to {self.exchange_name}")

    async def call(self, fields: dict[str, Any]) -> Any:
        key = fields["message_id"]
        out = aio_pika.Message(orjson.dumps(fields), content_type=JSON, message_id=key,
                               correlation_id=key, reply_to=self.reply_queue,
                               expiration=self.timeout,
                               delivery_mode=aio_pika.DeliveryMode.PERSISTENT)  # fmt: skip
        return await self._pending.wait(key, self._send(out), self.timeout)


class MinimalRpc(_Connected):
    """One queue, direct reply-to, JSON in and out: ``serve()``, or ``open()`` and ``ping``."""

    def __init__(self, url: str, queue: str, prefetch: int = 64, timeout: float = 5.0) -> None:
        self.url, self.queue, self.prefetch, self.timeout = url, queue, prefetch, timeout
        self._pending = Pending()

    async def _channel(self) -> aio_pika.abc.AbstractChannel:
        channel = await (await self._connect()).channel(publisher_confirms=False)
        self._exchange = channel.default_exchange
        return channel

    async def serve(self) -> None:
        channel = await self._channel()
        await channel.set_qos(prefetch_count=self.prefetch)
        queue = await channel.declare_queue(self.queue, durable=False, auto_delete=True)
        await queue.consume(self._serve)

    async def open(self) -> None:
        replies = await (await self._channel()).get_queue(DIRECT_REPLY, ensure=False)
        await replies.consume(self._on_reply, no_ack=True)

    async def _serve(self, incoming: AbstractIncomingMessage) -> None:
        body = orjson.dumps({"result": orjson.loads(incoming.body)["parameters"]})
        reply = aio_pika.Message(body, correlation_id=incoming.correlation_id, content_type=JSON)
        await self._exchange.publish(reply, routing_key=incoming.reply_to or "", mandatory=False)
        await incoming.ack()

    async def _on_reply(self, incoming: AbstractIncomingMessage) -> None:
        self._pending.resolve(incoming.correlation_id, orjson.loads(incoming.body)["result"])

    async def ping(self, i: int) -> Any:
        key = uuid.uuid4().hex
        body = orjson.dumps({"action": "ping", "parameters": {"i": i}})
        out = aio_pika.Message(body, correlation_id=key, reply_to=DIRECT_REPLY, content_type=JSON)
        return await self._pending.wait(key, self._exchange.publish(out, self.queue), self.timeout)


class _Broker:
    def __init__(self, url: str) -> None:
        self.broker = RabbitBroker(url, logger=None)

    async def open(self) -> None:
        await self.broker.start()

    async def close(self) -> None:
        await self.broker.stop()


class FastStreamServer(_Broker):
    def __init__(self, url: str, queue: str, prefetch: int, sender: str) -> None:
        super().__init__(url)
        channel = Channel(prefetch_count=prefetch)

        @self.broker.subscriber(RabbitQueue(queue, durable=True), channel=channel)
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            return reply_fields(body, sender)


class FastStreamClient(Asker, _Broker):
    """As a FastStream user asks, and fans out: ``asyncio.gather`` over ``broker.request``."""

    def __init__(self, url: str, queue: str, timeout: float) -> None:
        super().__init__(url)
        self.queue, self.timeout, self.sender = queue, timeout, f"fs-{uuid.uuid4().hex[:6]}"

    async def call(self, fields: dict[str, Any]) -> Any:
        reply = await self.broker.request(
            fields, queue=self.queue, persist=True, mandatory=True, timeout=self.timeout,
            message_id=fields["message_id"], expiration=self.timeout,
        )  # fmt: skip
        return await reply.decode()


class FastStreamRequester(FastStreamClient):
    """Requests published with a standing reply queue, many in flight."""

    def __init__(self, url: str, queue: str, timeout: float, reply_queue: str) -> None:
        super().__init__(url, queue, timeout)
        self.reply_queue, self._pending = reply_queue, Pending()
        replies = RabbitQueue(reply_queue, durable=False, arguments={"x-expires": 60_000})

        @self.broker.subscriber(replies, channel=Channel(prefetch_count=REPLY_PREFETCH))
        async def on_reply(body: dict[str, Any], message: RabbitMessage) -> None:
            self._pending.resolve(message.correlation_id, body)

    async def call(self, fields: dict[str, Any]) -> Any:
        key = fields["message_id"]
        send = self.broker.publish(
            fields, queue=self.queue, reply_to=self.reply_queue, correlation_id=key,
            message_id=key, persist=True, mandatory=True, expiration=self.timeout,
        )  # fmt: skip
        return await self._pending.wait(key, send, self.timeout)

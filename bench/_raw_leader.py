"""The raw aio-pika "leader" of the fan-out baseline (suite.py): the same plan, hand-rolled.

Publishes N ``echo`` requests with confirms (persistent, mandatory, with a TTL, as
agentbus sends them), at most ``window`` in flight, collects the replies by correlation
id on its own reply queue (manual ack), then sends the fan-in ``total`` and waits for it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import aio_pika
import aiormq.abc
import orjson
from aio_pika.abc import AbstractConnection, AbstractExchange, AbstractIncomingMessage

from _harness import broker_version
from _raw_worker import ROUTING_KEY, envelope

REPLY_PREFETCH = 512  # the agentbus instance queue's prefetch
TIMEOUT = 30.0  # seconds per request, the default subtask timeout
Request = Callable[[str, dict[str, Any], str], Awaitable[Any]]


class RawLeader:
    def __init__(self, url: str, exchange: str, work_queue: str) -> None:
        self.url = url
        self.exchange_name = exchange
        self.work_queue = work_queue
        self.sender = f"raw-leader-{uuid.uuid4().hex[:6]}"
        self.broker_version = "?"
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._connection: AbstractConnection | None = None

    async def open(self, reply_queue: str) -> None:
        self._connection = connection = await aio_pika.connect_robust(self.url)
        self.broker_version = broker_version(connection)
        publish = await connection.channel(publisher_confirms=True)
        self.exchange: AbstractExchange = await publish.declare_exchange(
            self.exchange_name, aio_pika.ExchangeType.TOPIC, durable=True
        )
        admin = await connection.channel()
        work = await admin.declare_queue(self.work_queue, durable=True)
        await work.bind(self.exchange, routing_key=ROUTING_KEY)
        consume = await connection.channel()
        await consume.set_qos(prefetch_count=REPLY_PREFETCH)
        self.reply_queue = reply_queue
        replies = await consume.declare_queue(
            reply_queue, durable=False, arguments={"x-expires": 60_000}
        )
        await replies.consume(self._on_reply, no_ack=False)

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        future = self._pending.get(message.correlation_id or "")
        if future is not None and not future.done():
            future.set_result(orjson.loads(message.body))
        await message.ack()

    async def request(self, action: str, parameters: dict[str, Any], subtask: str) -> Any:
        """Send one request with a confirm and return its result."""
        envelope = request_envelope(self.sender, action, parameters, subtask)
        message_id = envelope["message_id"]
        message = aio_pika.Message(
            orjson.dumps(envelope),
            content_type="application/json",
            message_id=message_id,
            correlation_id=message_id,
            reply_to=self.reply_queue,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            expiration=TIMEOUT,
        )
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        try:
            async with asyncio.timeout(TIMEOUT):
                confirmed = await self.exchange.publish(message, ROUTING_KEY, mandatory=True)
                if isinstance(confirmed, aiormq.abc.DeliveredMessage):
                    raise RuntimeError("request unroutable: no raw worker queue")
                reply = await future
        finally:
            del self._pending[message_id]
        return result_of(reply, "raw", action)

    async def run(self, n: int, window: int) -> dict[str, Any]:
        """N echoes with at most ``window`` in flight, then the fan-in; time it all."""
        return await fan_out(self.request, n, window, "raw")


def result_of(reply: dict[str, Any], side: str, action: str) -> Any:
    """The result of a response envelope's fields; raise if it reports an error."""
    payload = reply["payload"]
    if payload["status"] != "success":
        raise RuntimeError(f"{side} {action} failed: {payload['error']}")
    return payload["result"]


def request_envelope(
    sender: str, action: str, parameters: dict[str, Any], subtask: str
) -> dict[str, Any]:
    """The fields of an agentbus request envelope for one subtask, metadata included."""
    deadline = datetime.now(UTC) + timedelta(seconds=TIMEOUT)
    metadata = {"deadline": deadline, "plan_id": "raw-plan", "subtask_id": subtask}
    payload = {"action": action, "parameters": parameters}
    return envelope("request", sender, "echo", payload, metadata)


async def fan_out(request: Request, n: int, window: int, side: str) -> dict[str, Any]:
    """N ``echo`` requests with at most ``window`` in flight, then the fan-in ``total``."""
    results: list[Any] = [None] * n
    numbers = iter(range(n))

    async def lane() -> None:
        for i in numbers:
            results[i] = await request("echo", {"n": i}, f"t{i}")

    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(min(window, n))))
    total = await request("total", {"values": results}, "sum")
    seconds = time.perf_counter() - start
    if total != n * (n - 1) // 2:
        raise RuntimeError(f"{side} run wrong: sum={total}")
    return {"seconds": seconds, "per_s": n / seconds}

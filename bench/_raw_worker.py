"""The raw aio-pika worker of suite.py's fan-out: what a competent hand-rolled one does.

``python bench/_raw_worker.py URL EXCHANGE QUEUE PREFETCH WORKER_ID``: consumes the durable
QUEUE (bound to EXCHANGE with ``raw.work.request``) at most PREFETCH at a time, answers
``echo`` and ``total`` with an envelope-like orjson reply published with a confirm to the
request's ``reply_to``, and acks the request once the reply is confirmed. Stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import aio_pika
import aiormq.abc
import orjson
from aio_pika.abc import AbstractExchange, AbstractIncomingMessage

ROUTING_KEY = "raw.work.request"


def envelope(
    kind: str, sender: str, receiver: str, payload: Any, metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An agentbus envelope's fields, as a hand-rolled peer sends them, without the models."""
    return {
        "protocol_version": "1.0",
        "message_id": str(uuid.uuid4()),
        "timestamp": datetime.now(UTC),
        "sender_id": sender,
        "receiver_id": receiver,
        "metadata": metadata or {},
        "message_type": kind,
        "payload": payload,
    }


def ping_envelope(sender: str, i: int) -> dict[str, Any]:
    """The request/response payload every side sends: ``ping`` with ``{"i": i}``."""
    return envelope("request", sender, "echo", {"action": "ping", "parameters": {"i": i}})


def reply_fields(request: dict[str, Any], sender: str, result: Any, error: Any) -> dict[str, Any]:
    """The response envelope's fields, as agentbus sends them, without the models."""
    status = "success" if error is None else "error"
    payload = {"status": status, "result": result, "error": error}
    metadata = {"correlation_id": request["message_id"]}
    return envelope("response", sender, request["sender_id"], payload, metadata)


def reply_envelope(request: dict[str, Any], sender: str, result: Any, error: Any) -> bytes:
    return orjson.dumps(reply_fields(request, sender, result, error))


def work(action: str, parameters: dict[str, Any]) -> tuple[Any, Any]:
    if action == "echo":
        return int(parameters["n"]), None
    if action == "total":
        return sum(int(value) for value in parameters["values"]), None
    return None, {"code": "unknown_action", "message": f"no action {action!r}"}


class RawWorker:
    def __init__(self, worker_id: str, reply_exchange: AbstractExchange) -> None:
        self.worker_id = worker_id
        self.reply_exchange = reply_exchange

    async def on_message(self, message: AbstractIncomingMessage) -> None:
        try:
            request = orjson.loads(message.body)
            payload = request["payload"]
            result, error = work(payload["action"], payload.get("parameters") or {})
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            await message.reject(requeue=False)
            return
        reply = aio_pika.Message(
            reply_envelope(request, self.worker_id, result, error),
            content_type="application/json",
            correlation_id=message.correlation_id,
            delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
        )
        confirmed = await self.reply_exchange.publish(
            reply, routing_key=message.reply_to or "", mandatory=True
        )
        if isinstance(confirmed, aiormq.abc.DeliveredMessage):  # returned: requester gone
            print(f"{self.worker_id}: reply unroutable", file=sys.stderr)
        await message.ack()


async def main(url: str, exchange: str, queue_name: str, prefetch: int, worker_id: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    connection = await aio_pika.connect_robust(url)
    try:
        publish_channel = await connection.channel(publisher_confirms=True)
        worker = RawWorker(worker_id, publish_channel.default_exchange)
        consume_channel = await connection.channel()
        await consume_channel.set_qos(prefetch_count=prefetch)
        topic = await consume_channel.declare_exchange(
            exchange, aio_pika.ExchangeType.TOPIC, durable=True
        )
        queue = await consume_channel.declare_queue(queue_name, durable=True)
        await queue.bind(topic, routing_key=ROUTING_KEY)
        tag = await queue.consume(worker.on_message, no_ack=False)
        await stop.wait()
        await queue.cancel(tag)
    finally:
        await connection.close()


if __name__ == "__main__":
    url, exchange, queue, prefetch, worker_id = sys.argv[1:6]
    asyncio.run(main(url, exchange, queue, int(prefetch), worker_id))

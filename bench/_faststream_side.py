"""FastStream's RabbitMQ broker as the third peer of suite.py: a worker, a requester, a client.

``python bench/_faststream_side.py URL QUEUE PREFETCH WORKER_ID``: a ``RabbitBroker`` with one
subscriber on the durable QUEUE (default exchange), at most PREFETCH at a time, answering
``echo`` and ``total`` as _raw_worker.py does, and ``ping`` (the request/response echo), with
a response envelope's fields that FastStream publishes to the request's ``reply_to``. Stops
on SIGTERM. Per-message access logs are off (``logger=None``): the other peers log warnings
only.

Two ways to ask: ``FastStreamClient`` is FastStream's own ``broker.request`` (direct reply-to;
FastStream holds a lock around it, so one request per broker is in flight at a time, however
many are gathered), and ``FastStreamRequester`` publishes with ``reply_to`` a standing reply
queue its subscriber consumes, matching replies by correlation id: what a FastStream "leader"
has to hand-roll to keep a window of requests in flight. suite.py's fan-out reports both:
``faststream`` and ``faststream-rq``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from typing import Any

from faststream.rabbit import Channel, RabbitBroker, RabbitMessage, RabbitQueue

from _raw_leader import fan_out, request_envelope, result_of
from _raw_worker import ping_envelope, reply_fields, work

TIMEOUT = 30.0  # s per request, as the other peers
REPLY_PREFETCH = 512  # as the agentbus instance queue and the raw leader's reply queue


def new_broker(url: str) -> RabbitBroker:
    return RabbitBroker(url, logger=None)


def worker_broker(url: str, queue: str, prefetch: int, worker_id: str) -> RabbitBroker:
    broker = new_broker(url)

    @broker.subscriber(RabbitQueue(queue, durable=True), channel=Channel(prefetch_count=prefetch))
    async def handle(body: dict[str, Any]) -> dict[str, Any]:
        payload = body["payload"]
        action, parameters = payload["action"], payload.get("parameters") or {}
        result, error = (parameters, None) if action == "ping" else work(action, parameters)
        return reply_fields(body, worker_id, result, error)

    return broker


class _Peer:
    """What both ways of asking share: a broker, the ping, a subtask, the fan-out."""

    def __init__(self, url: str, queue: str, sender: str) -> None:
        self.url = url
        self.queue = queue
        self.sender = f"{sender}-{uuid.uuid4().hex[:6]}"
        self._broker: RabbitBroker | None = None

    async def close(self) -> None:
        if self._broker is not None:
            await self._broker.stop()

    async def call(self, envelope: dict[str, Any]) -> Any:
        raise NotImplementedError

    async def ping(self, i: int) -> Any:
        return await self.call(ping_envelope(self.sender, i))

    async def request(self, action: str, parameters: dict[str, Any], subtask: str) -> Any:
        """One subtask of the fan-out, as _raw_leader.RawLeader.request."""
        reply = await self.call(request_envelope(self.sender, action, parameters, subtask))
        return result_of(reply, "faststream", action)

    async def run(self, n: int, window: int) -> dict[str, Any]:
        """N echoes with at most ``window`` in flight, then the fan-in; time it all."""
        return await fan_out(self.request, n, window, "faststream")


class FastStreamRequester(_Peer):
    """Requests through a ``RabbitBroker`` with a standing reply queue, many in flight."""

    def __init__(self, url: str, queue: str, reply_queue: str) -> None:
        super().__init__(url, queue, "fs-leader")
        self.reply_queue = reply_queue
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}

    async def open(self) -> None:
        self._broker = broker = new_broker(self.url)
        replies = RabbitQueue(self.reply_queue, durable=False, arguments={"x-expires": 60_000})

        @broker.subscriber(replies, channel=Channel(prefetch_count=REPLY_PREFETCH))
        async def on_reply(body: dict[str, Any], message: RabbitMessage) -> None:
            future = self._pending.get(message.correlation_id or "")
            if future is not None and not future.done():
                future.set_result(body)

        await broker.start()

    async def call(self, envelope: dict[str, Any]) -> dict[str, Any]:
        assert self._broker is not None
        message_id = envelope["message_id"]
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        try:
            async with asyncio.timeout(TIMEOUT):
                await self._broker.publish(
                    envelope,
                    queue=self.queue,
                    reply_to=self.reply_queue,
                    correlation_id=message_id,
                    message_id=message_id,
                    persist=True,
                    mandatory=True,
                    expiration=TIMEOUT,
                )
                return await future
        finally:
            del self._pending[message_id]


class FastStreamClient(_Peer):
    """FastStream's own request/reply: ``await broker.request(message, queue=...)``.

    As a FastStream user fans out: ``asyncio.gather`` over ``broker.request``. FastStream
    lets one request per broker be in flight (its RPC lock); the rest wait their turn.
    """

    def __init__(self, url: str, queue: str) -> None:
        super().__init__(url, queue, "fs-client")

    async def open(self) -> None:
        self._broker = new_broker(self.url)
        await self._broker.start()

    async def call(self, envelope: dict[str, Any]) -> Any:
        assert self._broker is not None
        reply = await self._broker.request(
            envelope,
            queue=self.queue,
            persist=True,
            mandatory=True,
            timeout=TIMEOUT,
            message_id=envelope["message_id"],
            expiration=TIMEOUT,
        )
        return await reply.decode()


async def serve(url: str, queue: str, prefetch: int, worker_id: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    broker = worker_broker(url, queue, prefetch, worker_id)
    await broker.start()
    try:
        await stop.wait()
    finally:
        await broker.stop()


if __name__ == "__main__":
    url, queue, prefetch, worker_id = sys.argv[1:5]
    asyncio.run(serve(url, queue, int(prefetch), worker_id))

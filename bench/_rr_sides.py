"""Request/response peers for suite.py: agentbus, raw aio-pika and FastStream, one payload.

``python bench/_rr_sides.py serve SIDE URL EXCHANGE``: one side's echo server, until SIGTERM.
``python bench/_rr_sides.py load SIDE URL EXCHANGE CLIENT SECONDS WINDOW``: a client process.
It warms up, prints ``ready``, waits for a line on stdin, keeps WINDOW requests in flight for
SECONDS, and prints ``{"count", "seconds", "cpu_s", "errors"}`` as JSON.

Every side sends the same request envelope (``ping`` with ``{"i": n}``, persistent, with a
TTL) and its server answers with the parameters: agentbus is ``Bus.request`` against
``Bus.serve``; aio-pika is ``RawPeer`` (below); faststream is ``broker.request`` against a
``RabbitBroker`` subscriber; faststream-rq is the same server asked through a standing reply
queue (_faststream_side.FastStreamRequester).
"""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aio_pika
import aiormq.abc
import orjson
from aio_pika.abc import AbstractConnection, AbstractExchange, AbstractIncomingMessage

import agentbus
from _bench_agents import Pinger
from _faststream_side import FastStreamClient, FastStreamRequester, worker_broker
from _harness import quiet_logging, summary
from _raw_min import MinimalRpc
from _raw_worker import envelope, ping_envelope
from agentbus import Metrics, RequestEnvelope, Settings
from agentbus.bus import Topology

WARMUP = 200
PREFETCH = 64
TIMEOUT = 5.0
Call = Callable[[int], Awaitable[Any]]


def message_of(
    fields: dict[str, Any], *, persistent: bool = True, **props: Any
) -> aio_pika.Message:
    mode = aio_pika.DeliveryMode.PERSISTENT if persistent else aio_pika.DeliveryMode.NOT_PERSISTENT
    return aio_pika.Message(
        orjson.dumps(fields),
        content_type="application/json",
        message_id=fields["message_id"],
        delivery_mode=mode,
        **props,
    )


class RawPeer:
    """Request/reply straight on aio-pika, done properly.

    Robust connections, a confirm channel to publish on and a consume channel with a
    prefetch per side, durable service queue with manual ack, persistent mandatory
    requests, confirmed replies before the ack, futures keyed by correlation id.
    """

    def __init__(self, url: str, exchange: str, client_id: str = "") -> None:
        self.url = url
        self.exchange_name = exchange
        self.service_queue = f"{exchange}.echo"
        self.reply_queue = f"{exchange}.reply{'.' if client_id else ''}{client_id}"
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._connections: list[AbstractConnection] = []

    async def open_server(self) -> None:
        """The echo side: its own connection, exchange and service queue."""
        server = await aio_pika.connect_robust(self.url)
        self._connections.append(server)
        server_pub = await server.channel()
        await server_pub.declare_exchange(
            self.exchange_name, aio_pika.ExchangeType.TOPIC, durable=True
        )
        self._reply_exchange = server_pub.default_exchange
        server_sub = await server.channel()
        await server_sub.set_qos(prefetch_count=PREFETCH)
        queue = await server_sub.declare_queue(self.service_queue, durable=True)
        await queue.bind(self.exchange_name, routing_key="raw.echo.request")
        await queue.consume(self._serve)

    async def open_client(self) -> None:
        """The requesting side, on its own connection; the exchange must exist."""
        client = await aio_pika.connect_robust(self.url)
        self._connections.append(client)
        client_pub = await client.channel()
        self.exchange: AbstractExchange = await client_pub.get_exchange(self.exchange_name)
        client_sub = await client.channel()
        await client_sub.set_qos(prefetch_count=512)
        replies = await client_sub.declare_queue(self.reply_queue, durable=False)
        await replies.consume(self._on_reply)

    async def close(self) -> None:
        for connection in self._connections:
            await connection.close()

    async def _serve(self, message: AbstractIncomingMessage) -> None:
        request = orjson.loads(message.body)
        result = {"status": "success", "result": request["payload"]["parameters"]}
        metadata = {"correlation_id": request["message_id"]}
        reply = envelope("response", "srv", request["sender_id"], result, metadata)
        out = message_of(reply, persistent=False, correlation_id=message.correlation_id)
        await self._reply_exchange.publish(out, routing_key=message.reply_to or "", mandatory=True)
        await message.ack()

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        future = self._pending.get(message.correlation_id or "")
        if future is not None and not future.done():
            future.set_result(orjson.loads(message.body))
        await message.ack()

    async def request(self, i: int) -> dict[str, Any]:
        fields = ping_envelope("client", i)
        message_id = fields["message_id"]
        future = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        message = message_of(
            fields, correlation_id=message_id, reply_to=self.reply_queue, expiration=TIMEOUT
        )
        try:
            async with asyncio.timeout(TIMEOUT):
                await self._confirmed(message, "raw.echo.request")
                return await future
        finally:
            del self._pending[message_id]

    async def _confirmed(self, message: aio_pika.Message, key: str) -> None:
        result = await self.exchange.publish(message, key, mandatory=True)
        if isinstance(result, aiormq.abc.DeliveredMessage):
            raise RuntimeError(f"unroutable: {key}")


async def sequential(call: Call, n: int, warmup: int = WARMUP) -> dict[str, float]:
    for i in range(warmup):
        await call(i)
    gc.collect()
    samples: list[int] = []
    for i in range(n):
        start = time.perf_counter_ns()
        await call(i)
        samples.append(time.perf_counter_ns() - start)
    return summary(samples)


SIDES = (
    "agentbus",
    "agent",
    "agent-transient",
    "aio-pika",
    "raw-min",
    "faststream",
    "faststream-rq",
)
# faststream-rq asks FastStream's server; agent-transient asks the agent's
SERVERS = ("agentbus", "agent", "aio-pika", "raw-min", "faststream")
SERVER_ID = "rr-server"
AGENT_ID = "rr-agent"


@dataclass(frozen=True, slots=True)
class Names:
    """Every exchange and queue of one run, from its exchange name."""

    exchange: str

    @property
    def raw_exchange(self) -> str:
        return f"{self.exchange}.raw"

    @property
    def min_queue(self) -> str:
        return f"{self.exchange}.min.echo"

    @property
    def fs_queue(self) -> str:
        return f"{self.exchange}.fs.echo"

    def fs_reply(self, client: str) -> str:
        return f"{self.exchange}.fs.reply.{client}"

    def service_queue(self, side: str) -> str:
        """The queue a side's server consumes."""
        queues = {
            "agentbus": Topology(self.exchange).service_queue("echo"),
            "aio-pika": RawPeer("", self.raw_exchange).service_queue,
            "faststream": self.fs_queue,
            "agent": Topology(self.exchange).service_queue(Pinger.name),
            "raw-min": self.min_queue,
        }
        return queues[side]

    def queues(self, clients: list[str]) -> list[str]:
        topology = Topology(self.exchange)
        ids = [SERVER_ID, AGENT_ID, *(f"rr-{client}" for client in clients)]
        ids += [
            f"rr-{side}-{client}" for side in ("agent", "agent-transient") for client in clients
        ]
        names = [topology.service_queue("echo"), topology.dead_letter_queue, self.fs_queue]
        names += [topology.service_queue(Pinger.name), self.min_queue]
        names += [topology.instance_queue(agent_id) for agent_id in ids]
        names += [RawPeer("", self.raw_exchange, client).reply_queue for client in clients]
        names += [self.fs_reply(client) for client in clients]
        return [*names, self.service_queue("aio-pika")]

    def exchanges(self) -> list[str]:
        return [self.exchange, Topology(self.exchange).dead_letter_exchange, self.raw_exchange]


@asynccontextmanager
async def client(side: str, url: str, names: Names, client_id: str) -> AsyncIterator[Call]:
    """A connected client of ``side``: ``await call(i)`` is one request/response."""
    if side == "agentbus":
        bus = agentbus.connect(url, exchange=names.exchange, agent_id=f"rr-{client_id}")
        async with bus:

            async def call(i: int) -> Any:
                return (await bus.request("echo", "ping", {"i": i}, timeout=TIMEOUT)).result

            yield call
        return
    if side.startswith("agent"):
        # As an agent calls another: Bus.request; transient (not persistent, no confirm
        # wait on a broker write) for the documented fast path. Its own id: two buses on
        # one instance queue would take each other's replies.
        bus = agentbus.connect(url, exchange=names.exchange, agent_id=f"rr-{side}-{client_id}")
        persistent = side == "agent"
        async with bus:

            async def call(i: int) -> Any:
                reply = await bus.request(
                    Pinger.name, "answer", {"i": i}, timeout=TIMEOUT, persistent=persistent
                )
                return reply.result

            yield call
        return
    if side == "raw-min":
        minimal = MinimalRpc(url, names.min_queue)
        await minimal.open_client()
        try:
            yield minimal.request
        finally:
            await minimal.close()
        return
    peer: RawPeer | FastStreamClient | FastStreamRequester
    if side == "aio-pika":
        peer = RawPeer(url, names.raw_exchange, client_id)
        await peer.open_client()
        call = peer.request
    elif side == "faststream":
        peer = FastStreamClient(url, names.fs_queue)
        await peer.open()
        call = peer.ping
    else:
        peer = FastStreamRequester(url, names.fs_queue, names.fs_reply(client_id))
        await peer.open()
        call = peer.ping
    try:
        yield call
    finally:
        await peer.close()


async def serve(side: str, url: str, names: Names) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if side == "agentbus":
        async with agentbus.connect(url, exchange=names.exchange, agent_id=SERVER_ID) as bus:

            async def echo(request: RequestEnvelope) -> Any:
                return request.payload.parameters

            await bus.serve(echo, service="echo", prefetch=PREFETCH)
            await stop.wait()
    elif side == "agent":
        settings = Settings(url=url, exchange=names.exchange)
        async with Pinger(agent_id=AGENT_ID, settings=settings, metrics=Metrics()):
            await stop.wait()
    elif side == "raw-min":
        minimal = MinimalRpc(url, names.min_queue)
        await minimal.open_server()
        try:
            await stop.wait()
        finally:
            await minimal.close()
    elif side == "aio-pika":
        peer = RawPeer(url, names.raw_exchange)
        await peer.open_server()
        try:
            await stop.wait()
        finally:
            await peer.close()
    else:
        broker = worker_broker(url, names.fs_queue, PREFETCH, "fs-server")
        await broker.start()
        try:
            await stop.wait()
        finally:
            await broker.stop()


async def load(
    side: str, url: str, names: Names, client_id: str, seconds: float, window: int
) -> None:
    """Warm up, wait for the go, then ``window`` lanes of back-to-back requests."""
    async with client(side, url, names, client_id) as call:
        for i in range(WARMUP):
            await call(i)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        done = [0]

        async def lane(i: int) -> None:
            while True:
                await call(i)
                done[0] += 1
                i += window

        cpu0, start = time.process_time(), time.perf_counter()
        lanes = [asyncio.create_task(lane(k)) for k in range(window)]
        await asyncio.sleep(seconds)
        count, elapsed, cpu = done[0], time.perf_counter() - start, time.process_time() - cpu0
        failed = [task for task in lanes if task.done() and task.exception() is not None]
        for task in lanes:
            task.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
    errors = [repr(task.exception()) for task in failed]
    figures = {"count": count, "seconds": elapsed, "cpu_s": cpu, "errors": errors[:3]}
    print(json.dumps(figures), flush=True)


def main() -> None:
    quiet_logging()
    command, side, url, exchange, *rest = sys.argv[1:]
    names = Names(exchange)
    if command == "serve":
        asyncio.run(serve(side, url, names))
    else:
        client_id, seconds, window = rest
        asyncio.run(load(side, url, names, client_id, float(seconds), int(window)))


if __name__ == "__main__":
    main()

"""Request/response peers for suite.py: agentbus, raw aio-pika and FastStream, one payload.

``python bench/_rr_sides.py serve SIDE URL EXCHANGE``: one side's echo server, until SIGTERM.
``python bench/_rr_sides.py load SIDE URL EXCHANGE CLIENT SECONDS WINDOW``: a client process.
It warms up, prints ``ready``, waits for a line on stdin, keeps WINDOW requests in flight for
SECONDS, and prints ``{"count", "seconds", "cpu_s", "errors"}`` as JSON.

Every side sends the same request envelope (``ping`` with ``{"i": n}``, persistent, with a
TTL) and its server answers with the parameters: agentbus is ``Bus.request`` against
``Bus.serve``; aio-pika is bench_bus.RawPeer; faststream is ``broker.request`` against a
``RabbitBroker`` subscriber; faststream-rq is the same server asked through a standing reply
queue (_faststream_side.FastStreamRequester).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aio_pika
import structlog

import agentbus
from _faststream_side import FastStreamClient, FastStreamRequester, worker_broker
from agentbus import RequestEnvelope
from agentbus.bus import Topology
from bench_bus import PREFETCH, TIMEOUT, WARMUP, Call, RawPeer

SIDES = ("agentbus", "aio-pika", "faststream", "faststream-rq")
SERVERS = ("agentbus", "aio-pika", "faststream")  # faststream-rq asks FastStream's server
SERVER_ID = "rr-server"


@dataclass(frozen=True, slots=True)
class Names:
    """Every exchange and queue of one run, from its exchange name."""

    exchange: str

    @property
    def raw_exchange(self) -> str:
        return f"{self.exchange}.raw"

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
        }
        return queues[side]

    def queues(self, clients: list[str]) -> list[str]:
        topology = Topology(self.exchange)
        ids = [SERVER_ID, *(f"rr-{client}" for client in clients)]
        names = [topology.service_queue("echo"), topology.dead_letter_queue, self.fs_queue]
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
    peer: RawPeer | FastStreamClient | FastStreamRequester
    if side == "aio-pika":
        peer = RawPeer(url, names.raw_exchange, client_id)
        await peer.open_client(sink=False)
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


async def consumers(connection: aio_pika.abc.AbstractConnection, queue: str) -> int:
    """Consumers of ``queue`` (0 while it does not exist)."""
    channel = await connection.channel()
    try:
        declared = await channel.declare_queue(queue, passive=True)
    except aio_pika.exceptions.ChannelClosed:
        return 0
    result = declared.declaration_result.consumer_count
    await channel.close()
    return int(result or 0)


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    logging.basicConfig(level=logging.WARNING)
    command, side, url, exchange, *rest = sys.argv[1:]
    names = Names(exchange)
    if command == "serve":
        asyncio.run(serve(side, url, names))
    else:
        client_id, seconds, window = rest
        asyncio.run(load(side, url, names, client_id, float(seconds), int(window)))


if __name__ == "__main__":
    main()

"""Benchmark agentbus against a raw aio-pika baseline on one broker.

Request/response latency, confirmed-publish throughput (raw and bus runs alternate,
the best of each is kept) and the envelope codec. See ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import aio_pika
import aiormq.abc
import orjson
import structlog
from aio_pika.abc import AbstractConnection, AbstractExchange, AbstractIncomingMessage

import agentbus
from agentbus.envelopes import RequestEnvelope, RequestPayload, decode, encode

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
WARMUP = 200
WINDOW = 256
PREFETCH = 64
TIMEOUT = 5.0
TARGET_P50 = 1.3
TARGET_THROUGHPUT = 0.8
TARGET_CODEC_US = 15.0
Call = Callable[[int], Awaitable[Any]]


def summary(samples_ns: list[int]) -> dict[str, float]:
    s = sorted(samples_ns)
    p50, p99 = (s[min(len(s) - 1, round(q * (len(s) - 1)))] / 1000 for q in (0.5, 0.99))
    return {"p50_us": p50, "p99_us": p99, "mean_us": statistics.fmean(s) / 1000}


def raw_envelope(kind: str, receiver: str, payload: Any, sender: str = "client") -> dict[str, Any]:
    """What a hand-rolled client would send: the same fields as an agentbus envelope."""
    return {
        "protocol_version": "1.0",
        "message_id": str(uuid.uuid4()),
        "timestamp": datetime.now(UTC),
        "sender_id": sender,
        "receiver_id": receiver,
        "metadata": {},
        "message_type": kind,
        "payload": payload,
    }


def message_of(
    envelope: dict[str, Any], *, persistent: bool = True, **props: Any
) -> aio_pika.Message:
    mode = aio_pika.DeliveryMode.PERSISTENT if persistent else aio_pika.DeliveryMode.NOT_PERSISTENT
    return aio_pika.Message(
        orjson.dumps(envelope),
        content_type="application/json",
        message_id=envelope["message_id"],
        delivery_mode=mode,
        **props,
    )


class RawPeer:
    """Request/reply and confirmed publishing straight on aio-pika, done properly.

    Robust connections, a confirm channel to publish on and a consume channel with a
    prefetch per side, durable service queue with manual ack, persistent mandatory
    requests, confirmed replies before the ack, futures keyed by correlation id.
    """

    def __init__(self, url: str, exchange: str, client_id: str = "") -> None:
        self.url = url
        self.exchange_name = exchange
        self.service_queue = f"{exchange}.echo"
        self.reply_queue = f"{exchange}.reply{'.' if client_id else ''}{client_id}"
        self.sink_queue = f"{exchange}.sink"
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._connections: list[AbstractConnection] = []

    async def open(self) -> None:
        await self.open_server()
        await self.open_client()

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

    async def open_client(self, *, sink: bool = True) -> None:
        """The requesting side, on its own connection; the exchange must exist."""
        client = await aio_pika.connect_robust(self.url)
        self._connections.append(client)
        client_pub = await client.channel()
        self.exchange: AbstractExchange = await client_pub.get_exchange(self.exchange_name)
        client_sub = await client.channel()
        await client_sub.set_qos(prefetch_count=512)
        replies = await client_sub.declare_queue(self.reply_queue, durable=False)
        await replies.consume(self._on_reply)
        if sink:
            queue = await client_sub.declare_queue(self.sink_queue, durable=True)
            await queue.bind(self.exchange_name, routing_key="raw.sink.event")

    async def close(self) -> None:
        for connection in self._connections:
            await connection.close()

    async def _serve(self, message: AbstractIncomingMessage) -> None:
        request = orjson.loads(message.body)
        result = {"status": "success", "result": request["payload"]["parameters"]}
        reply = raw_envelope("response", request["sender_id"], result, sender="srv")
        reply["metadata"] = {"correlation_id": request["message_id"]}
        out = message_of(reply, persistent=False, correlation_id=message.correlation_id)
        await self._reply_exchange.publish(out, routing_key=message.reply_to or "", mandatory=True)
        await message.ack()

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        future = self._pending.get(message.correlation_id or "")
        if future is not None and not future.done():
            future.set_result(orjson.loads(message.body))
        await message.ack()

    async def request(self, i: int) -> dict[str, Any]:
        envelope = raw_envelope("request", "echo", {"action": "ping", "parameters": {"i": i}})
        message_id = envelope["message_id"]
        future = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        message = message_of(
            envelope, correlation_id=message_id, reply_to=self.reply_queue, expiration=TIMEOUT
        )
        try:
            async with asyncio.timeout(TIMEOUT):
                await self._confirmed(message, "raw.echo.request")
                return await future
        finally:
            del self._pending[message_id]

    async def emit(self, i: int) -> None:
        envelope = raw_envelope("event", "sink", {"event_name": "tick", "event_data": {"i": i}})
        await self._confirmed(message_of(envelope), "raw.sink.event")

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


async def windowed(call: Call, n: int) -> dict[str, float]:
    """Publish ``n`` messages with at most ``WINDOW`` in flight; return messages/s."""
    numbers = iter(range(n))

    async def worker() -> None:
        for i in numbers:
            await call(i)

    gc.collect()
    start = time.perf_counter_ns()
    await asyncio.gather(*(worker() for _ in range(WINDOW)))
    elapsed = (time.perf_counter_ns() - start) / 1e9
    return {"msgs_per_s": n / elapsed, "seconds": elapsed}


def codec_bench(iterations: int) -> dict[str, float]:
    params = {"text": "lorem ipsum dolor sit amet " * 28, "max_words": 120, "tags": ["a", "b"]}
    payload = RequestPayload(action="summarize", parameters=params)
    envelope = RequestEnvelope(sender_id="bench-client", receiver_id="summarizer", payload=payload)
    size = len(encode(envelope))
    for _ in range(2000):
        decode(encode(envelope))
    gc.collect()
    samples: list[int] = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        decode(encode(envelope))
        samples.append(time.perf_counter_ns() - start)
    stats = summary(samples)
    return {"bytes": size, "mean_us": stats["mean_us"], "p50_us": stats["p50_us"]}


async def delete_all(
    connection: AbstractConnection, queues: list[str], exchanges: list[str]
) -> None:
    channel = await connection.channel()
    targets = [(q, "queue_delete") for q in queues] + [(e, "exchange_delete") for e in exchanges]
    for name, delete in targets:
        try:
            await getattr(channel, delete)(name)
        except Exception as exc:  # report, reopen the channel it closed, and go on
            print(f"cleanup: {delete} {name}: {exc!r}", file=sys.stderr)
            channel = await connection.channel()


def best_of(lat: list[dict[str, float]], thr: list[dict[str, float]]) -> dict[str, float]:
    best = {key: min(row[key] for row in lat) for key in ("p50_us", "p99_us", "mean_us")}
    return best | {"msgs_per_s": max(row["msgs_per_s"] for row in thr)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    raw = RawPeer(args.url, f"{name}.raw")
    server = agentbus.connect(args.url, exchange=name, agent_id="srv")
    client = agentbus.connect(args.url, exchange=name, agent_id="bench-client")
    topo = server.topology
    queues = [topo.service_queue("echo"), topo.dead_letter_queue, f"{name}.sink"]
    queues += [topo.instance_queue(bus.agent_id) for bus in (server, client)]
    queues += [raw.service_queue, raw.reply_queue, raw.sink_queue]
    admin = await aio_pika.connect(args.url)
    props = admin.transport.connection.server_properties if admin.transport else {}
    broker = props.get("version")
    machine = {"python": platform.python_version(), "cpus": os.cpu_count()}
    machine |= {"platform": platform.platform(), "broker": str(broker)}
    machine |= {pkg.replace("-", "_"): version(pkg) for pkg in ("aio-pika", "pydantic", "orjson")}
    params = {k: v for k, v in vars(args).items() if k not in ("url", "json")}
    params |= {"warmup": WARMUP, "window": WINDOW, "prefetch": PREFETCH}
    latency: dict[str, list[dict[str, float]]] = {"raw": [], "bus": []}
    throughput: dict[str, list[dict[str, float]]] = {"raw": [], "bus": []}
    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(server)

            async def echo(request: RequestEnvelope) -> Any:
                return request.payload.parameters

            await server.serve(echo, service="echo", prefetch=PREFETCH)
            await stack.enter_async_context(client)
            await raw.open()
            stack.push_async_callback(raw.close)
            admin_channel = await admin.channel()
            bus_sink = await admin_channel.declare_queue(f"{name}.sink", durable=True)
            await bus_sink.bind(name, routing_key="agent.sink.event")  # no consumer: purged

            async def bus_request(i: int) -> Any:
                return (await client.request("echo", "ping", {"i": i}, timeout=TIMEOUT)).result

            async def bus_emit(i: int) -> None:
                await client.emit("tick", {"i": i}, receiver="sink")

            sides: dict[str, tuple[Call, Call, Any]] = {
                "raw": (raw.request, raw.emit, await admin_channel.get_queue(raw.sink_queue)),
                "bus": (bus_request, bus_emit, bus_sink),
            }
            for _, emit, sink in sides.values():  # warm the publish paths up once
                await windowed(emit, 1000)
                await sink.purge()
            for _ in range(args.rounds):
                for side, (request, _, _) in sides.items():
                    latency[side].append(await sequential(request, args.requests))
            for _ in range(args.rounds):
                for side, (_, emit, sink) in sides.items():
                    throughput[side].append(await windowed(emit, args.publishes))
                    await sink.purge()
    finally:
        await delete_all(admin, queues, [name, topo.dead_letter_exchange, raw.exchange_name])
        await admin.close()
    best = {side: best_of(latency[side], throughput[side]) for side in ("raw", "bus")}
    ratios = {
        "p50": best["bus"]["p50_us"] / best["raw"]["p50_us"],
        "p99": best["bus"]["p99_us"] / best["raw"]["p99_us"],
        "throughput": best["bus"]["msgs_per_s"] / best["raw"]["msgs_per_s"],
    }
    codec = codec_bench(args.codec_iterations)
    verdicts = {
        "p50": ratios["p50"] <= TARGET_P50,
        "throughput": ratios["throughput"] >= TARGET_THROUGHPUT,
        "codec": max(codec["p50_us"], codec["mean_us"]) < TARGET_CODEC_US,
    }
    out = {"exchange": name, "machine": machine, "params": params, "latency": latency}
    out |= {"throughput": throughput, "best": best, "ratios": ratios}
    return out | {"codec": codec, "pass": verdicts}


def report(r: dict[str, Any]) -> None:
    m, p, best, ratios, ok, c = (
        r[k] for k in ("machine", "params", "best", "ratios", "pass", "codec")
    )
    print(f"agentbus bench  exchange={r['exchange']}  cpus={m['cpus']}  {m['platform']}")
    print(
        f"python {m['python']}  aio-pika {m['aio_pika']}  pydantic {m['pydantic']}  "
        f"orjson {m['orjson']}  RabbitMQ {m['broker']}"
    )
    print(f"rounds={p['rounds']}, raw and bus alternating; best = best figure over the rounds\n")
    print(
        f"1. request/response latency, sequential, n={p['requests']} (+{p['warmup']} warm-up), us"
    )
    print(f"   {'':<9}{'p50':>9}{'p99':>9}{'mean':>9}")
    for side in ("raw", "bus"):
        rows = [*enumerate(r["latency"][side], 1), ("best", best[side])]
        for k, row in rows:
            label = f"{side} {'#' if k != 'best' else ''}{k}"
            figures = "".join(f"{row[f]:>9.0f}" for f in ("p50_us", "p99_us", "mean_us"))
            print(f"   {label:<9}{figures}")
    print(f"\n2. confirmed publish throughput, n={p['publishes']}, window={p['window']}, msg/s")
    for side in ("raw", "bus"):
        runs = "".join(f"{row['msgs_per_s']:>9.0f}" for row in r["throughput"][side])
        print(f"   {side} rounds{runs}   best {best[side]['msgs_per_s']:>7.0f}")
    verdict = {True: "PASS", False: "MISS", None: ""}
    print(f"\n3. bus/raw{'value':>16}{'target':>10}")
    for label, key, target in (
        ("p50 latency", "p50", f"<= {TARGET_P50}"),
        ("p99 latency", "p99", "-"),
        ("throughput", "throughput", f">= {TARGET_THROUGHPUT}"),
    ):
        print(f"   {label:<16}{ratios[key]:>8.3f}{target:>10}  {verdict[ok.get(key)]}".rstrip())
    print(f"\n4. codec encode+decode round trip, {c['bytes']} B request envelope, us/op")
    print(
        f"   mean {c['mean_us']:.2f}  p50 {c['p50_us']:.2f}  target < {TARGET_CODEC_US:g}  "
        f"{verdict[ok['codec']]}"
    )


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("AGENTBUS_URL", DEFAULT_URL))
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--publishes", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--codec-iterations", type=int, default=50_000)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    report(results)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()

"""The envelope codec and the seams, timed in process: suite.py's ``codec`` and ``seams``."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace as Config
from typing import Any

import aio_pika
import orjson
import structlog
from pamqp.commands import Basic

import _harness as harness
from agentbus._logging import bind_delivery_ids
from agentbus.bus._rabbitmq._amqp import DeliveryConsumer
from agentbus.bus._rabbitmq._properties import message_properties
from agentbus.envelopes import Envelope, Metadata, RequestEnvelope, RequestPayload, decode, encode
from agentbus.envelopes._codec import decode_full, encode_full

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SIZES = {"1 KB": 1_000, "64 KB": 64_000, "1 MB": 1_000_000}


def request_of(size: int, **more: Any) -> RequestEnvelope:
    """A request whose parameters' JSON is about ``size`` bytes (records; ``{}`` for 0)."""

    def record(i: int) -> dict[str, Any]:
        return {"id": i, "name": f"item-{i:07d}", "score": i / 7, "tags": ["a", "bc"], "ok": True}

    count = max((size - 14) // (len(orjson.dumps(record(10**6))) + 1), 1) if size else 0
    parameters = {"records": [record(10**6 + i) for i in range(count)]} if size else more
    payload = RequestPayload(action="process", parameters=parameters)
    return RequestEnvelope(sender_id="bench-client", receiver_id="worker", payload=payload,
                           metadata=Metadata(trace=TRACE))  # fmt: skip


def p50_us(call: Callable[[], object], iterations: int) -> float:
    """The p50 µs of ``iterations`` calls one by one, after a tenth as warm-up."""
    for _ in range(max(iterations // 10, 3)):
        call()
    gc.collect()
    samples: list[int] = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    return harness.summary(samples)["p50_us"]


def run_codec(url: str, cfg: Config, say: harness.Say) -> list[dict[str, Any]]:
    cases = []
    for label, size in SIZES.items():
        iterations = min(max(cfg.budget // size, 20), 50_000)  # bytes through each call
        envelope = request_of(size)
        data = encode(envelope, max_size=None)
        fields = orjson.loads(data)
        runs = {"encode": lambda e=envelope: encode(e, max_size=None),
                "decode": lambda d=data: decode(d, max_size=None),
                "orjson_dumps": lambda f=fields: orjson.dumps(f),
                "orjson_loads": lambda d=data: orjson.loads(d)}  # fmt: skip
        case = {"payload": label, "envelope_bytes": len(data), "iterations": iterations}
        for name, call in runs.items():
            case[f"{name}_us"] = p50_us(call, iterations)
        cases.append(case)
    return cases


def row(fast: Callable[[], object], other: Callable[[], object],
        label: str = "public") -> dict[str, float]:  # fmt: skip
    """Best thread CPU µs a call, the fast and ``label`` ways in turn, in batches of ~1 ms."""
    start = time.perf_counter()
    fast(), other()
    batch, best = max(1, int(0.001 / (time.perf_counter() - start))), [float("inf")] * 2
    gc.collect()
    gc.disable()  # a collection lands on whichever batch it likes
    try:
        for _ in range(100):
            for which, call in enumerate((fast, other)):
                start = time.thread_time_ns()
                for _ in range(batch):
                    call()
                best[which] = min(best[which], time.thread_time_ns() - start)
    finally:
        gc.enable()
    fast_us, other_us = (ns / batch / 1000 for ns in best)
    return {"fast_us": fast_us, f"{label}_us": other_us, f"{label}/fast": other_us / fast_us}


async def drain(url: str, messages: int, fast: bool) -> float:
    """CPU seconds to consume ``messages`` no-ack: agentbus's ``DeliveryConsumer`` or aio-pika's."""
    async with await aio_pika.connect_robust(url) as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(f"bench-seams-{uuid.uuid4().hex[:8]}", exclusive=True)
        body = orjson.dumps({"payload": {"event_data": {"agent_id": "a", "n": 1}}})
        for _ in range(messages):
            await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue.name)
        done, seen = asyncio.Event(), [0]

        async def take(message: object) -> None:
            seen[0] += 1
            if seen[0] == messages:
                done.set()

        cpu = time.process_time()
        if fast:
            consumer = DeliveryConsumer(await connection.channel(), queue.name, take, no_ack=True)
            await consumer.start()
        else:
            await queue.consume(take, no_ack=True)
        await done.wait()
        return time.process_time() - cpu  # the queue is exclusive: it goes with the connection


def run_seams(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    rows: dict[str, dict[str, float]] = {}
    for label, size in SIZES.items():
        envelope = request_of(size)
        rows[f"codec encode, {label}"] = row(
            lambda e=envelope: encode(e, max_size=None),
            lambda d=envelope.model_dump: orjson.dumps(d(mode="json"), option=orjson.OPT_UTC_Z),
        )
    request = request_of(0, who="ann", n=3)
    response = request.response({"greeting": "hello ann"}, sender_id="worker-1")
    paths: dict[str, Envelope] = {"request": request, "response": response,
                                  "request 64 KB": request_of(64_000)}  # fmt: skip
    for name, envelope in paths.items():  # the codec's fast path against its full path
        data = encode_full(envelope, max_size=None)
        rows[f"codec decode (full path), {name}"] = row(
            lambda d=data: decode(d), lambda d=data: decode_full(d), "full"
        )
        rows[f"codec encode (full path), {name}"] = row(
            lambda e=envelope: encode(e), lambda e=envelope: encode_full(e), "full"
        )
    context = contextvars.copy_context()
    ids = {"agent_id": "agent-1", "message_id": "m-1", "correlation_id": "c-1"}
    rows["log ids per delivery"] = row(
        lambda: context.run(bind_delivery_ids, *ids.values()),
        lambda: context.run(structlog.contextvars.bind_contextvars, **ids),
    )
    sent, key = datetime.now(UTC), "agentbus.instance.a"
    common = {"app_id": "agentbus", "message_id": "m-1", "timestamp": sent, "reply_to": key}
    rows["publish properties"] = row(
        lambda: message_properties(**common, message_type="request", correlation_id=None,
                                   persistent=True, ttl=5.0, user_id=None),
        lambda: aio_pika.Message(b"{}", **common, content_type="application/json", type="request",
                                 delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                 expiration=5.0).properties)  # fmt: skip
    built = message_properties(**common, message_type="request", correlation_id="m-0",
                               persistent=True, ttl=None, user_id=None)  # fmt: skip
    rows["publish properties, marshalled"] = row(
        built.marshal, lambda: Basic.Properties.marshal(built)
    )
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(3):
        for fast in (True, False):
            times[fast].append(asyncio.run(drain(url, cfg.messages, fast)))
    fast_s, public_s = (statistics.median(times[fast]) / cfg.messages for fast in (True, False))
    rows[f"no-ack consume, per message (N={cfg.messages})"] = {
        "fast_us": fast_s * 1e6,
        "public_us": public_s * 1e6,
        "public/fast": public_s / fast_s,
    }
    return {"params": vars(cfg), "figures": rows, "ratios": {}}

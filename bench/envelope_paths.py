"""The envelope codec and the seams, timed in process: suite.py's ``codec`` and ``seams``.

``codec``: encode and decode of 1 KB, 64 KB and 1 MB requests beside ``orjson`` (p50 µs).
``seams``: each seam onto a library's internals (encode, log ids, AMQP properties, the no-ack
consumer) against the library's public way, and the codec's fast path (``envelopes/_fast.py``)
against its full path for a request, a response and a 64 KB request (the ways not taken for
the fast path: ``--alternatives`` in ``git show 239f431:bench/envelope_paths.py``); best
per-call thread CPU of batches taken in turn (other processes do not count). A seam this
checkout lacks is listed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import importlib
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
from agentbus.envelopes import (
    Envelope,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    _codec,
    decode,
    encode,
)

full_decode: Callable[..., Any] = getattr(_codec, "decode_full", decode)
full_encode: Callable[..., bytes] = getattr(_codec, "encode_full", encode)
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


def best_of(*calls: Callable[[], object], rounds: int, batch: int) -> list[float]:
    """Best microseconds per call of each, their batches taken in turn (thread CPU time)."""
    best = [float("inf")] * len(calls)
    gc.collect()
    gc.disable()  # a collection lands on whichever batch it likes
    try:
        for _ in range(rounds):
            for which, call in enumerate(calls):
                start = time.thread_time_ns()
                for _ in range(batch):
                    call()
                best[which] = min(best[which], time.thread_time_ns() - start)
    finally:
        gc.enable()
    return [ns / batch / 1000 for ns in best]


def envelopes() -> dict[str, Envelope]:
    request = request_of(0, who="ann", n=3)
    return {"request": request,
            "response": request.response({"greeting": "hello ann"}, sender_id="worker-1"),
            "request 64 KB": request_of(64_000)}  # fmt: skip


def p50_us(call: Callable[[], object], iterations: int) -> dict[str, float]:
    """p50, p99 and mean µs of ``iterations`` calls one by one, after a tenth as warm-up."""
    for _ in range(max(iterations // 10, 3)):
        call()
    gc.collect()
    samples: list[int] = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    return harness.summary(samples)


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
            stats = p50_us(call, iterations)
            case |= {f"{name}_us": stats["p50_us"], f"{name}_mean_us": stats["mean_us"]}
        cases.append(case)
    return cases


def row(fast: Callable[[], object], other: Callable[[], object],
        label: str = "public") -> dict[str, float]:  # fmt: skip
    """The fast way and the ``label`` way in turn, in batches of about a millisecond."""
    start = time.perf_counter()
    fast(), other()
    batch = max(1, int(0.001 / (time.perf_counter() - start)))
    fast_us, other_us = best_of(fast, other, rounds=100, batch=batch)
    return {"fast_us": fast_us, f"{label}_us": other_us, f"{label}/fast": other_us / fast_us}


def private(module: str, name: str) -> Any:
    """A seam of agentbus's, private by nature; None where this checkout lacks it."""
    with contextlib.suppress(ImportError, AttributeError):
        return getattr(importlib.import_module(module), name)
    return None


async def drain(url: str, messages: int, consumer: Any) -> float:
    """CPU seconds to consume ``messages`` waiting in a queue, no-ack: with ``consumer``
    (agentbus's ``DeliveryConsumer``), else with aio-pika's ``Queue.consume``."""
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
        if consumer is None:
            await queue.consume(take, no_ack=True)
        else:
            await consumer(await connection.channel(), queue.name, take, no_ack=True).start()
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
    for name, envelope in envelopes().items():  # the codec's fast path against its full path
        data = full_encode(envelope, max_size=None)
        rows[f"codec decode (full path), {name}"] = row(
            lambda d=data: decode(d), lambda d=data: full_decode(d), "full"
        )
        rows[f"codec encode (full path), {name}"] = row(
            lambda e=envelope: encode(e), lambda e=envelope: full_encode(e), "full"
        )
    bind_ids = private("agentbus._logging", "bind_delivery_ids")
    properties = private("agentbus.bus._rabbitmq._properties", "message_properties")
    consumer = private("agentbus.bus._rabbitmq._amqp", "DeliveryConsumer")
    if bind_ids is not None:
        context = contextvars.copy_context()
        ids = {"agent_id": "agent-1", "message_id": "m-1", "correlation_id": "c-1"}
        rows["log ids per delivery"] = row(
            lambda: context.run(bind_ids, *ids.values()),
            lambda: context.run(structlog.contextvars.bind_contextvars, **ids),
        )
    if properties is not None:
        sent, key = datetime.now(UTC), "agentbus.instance.a"
        common = {"app_id": "agentbus", "message_id": "m-1", "timestamp": sent, "reply_to": key}
        rows["publish properties"] = row(
            lambda: properties(**common, message_type="request", correlation_id=None,
                               persistent=True, ttl=5.0, user_id=None),
            lambda: aio_pika.Message(b"{}", **common, content_type="application/json",
                                     type="request", delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                     expiration=5.0).properties)  # fmt: skip
        built = properties(**common, message_type="request", correlation_id="m-0",
                           persistent=True, ttl=None, user_id=None)  # fmt: skip
        rows["publish properties, marshalled"] = row(
            built.marshal, lambda: Basic.Properties.marshal(built)
        )
    if consumer is not None:
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(3):
            for fast in (True, False):
                times[fast].append(
                    asyncio.run(drain(url, cfg.messages, consumer if fast else None))
                )
        fast_s, public_s = (statistics.median(times[fast]) / cfg.messages for fast in (True, False))
        rows[f"no-ack consume, per message (N={cfg.messages})"] = {
            "fast_us": fast_s * 1e6,
            "public_us": public_s * 1e6,
            "public/fast": public_s / fast_s,
        }
    seams = {"log ids": bind_ids, "publish properties": properties, "no-ack consume": consumer}
    rows |= {f"{name}: not in this checkout": {} for name, seam in seams.items() if seam is None}
    return {"params": vars(cfg), "figures": rows, "ratios": {}}

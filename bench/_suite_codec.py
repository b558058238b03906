"""In-process timings for suite.py: the envelope codec (``codec``) and the seams (``seams``).

``codec``: encode and decode of a request with 1 KB, 64 KB and 1 MB of parameters (small
records), beside ``orjson.dumps`` and ``orjson.loads`` of its fields (a hand-rolled client's
cost). ``seams``: each seam onto a library's internals against the library's public way:
``encode`` against ``orjson.dumps(model_dump(mode="json"))``, ``_logging.bind_delivery_ids``
against ``structlog.contextvars.bind_contextvars``, ``bus._properties.message_properties`` against
``aio_pika.Message(...)``, and ``bus._amqp.DeliveryConsumer`` against ``Queue.consume``
(no-ack, N messages waiting). Seams are private by nature: one this checkout lacks is listed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import importlib
import statistics
import time
import timeit
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import aio_pika
import orjson
import structlog
from pamqp.commands import Basic

import _harness as harness
from agentbus.envelopes import RequestEnvelope, RequestPayload, decode, encode

SIZES = (1_000, 64_000, 1_000_000)


def parameters_of(size: int) -> dict[str, Any]:
    """Parameters whose JSON is about ``size`` bytes."""

    def record(i: int) -> dict[str, Any]:
        return {"id": i, "name": f"item-{i:07d}", "score": i / 7, "tags": ["a", "bc"], "ok": True}

    per_record = len(orjson.dumps(record(10**6))) + 1
    count = max((size - len(b'{"records":[]}')) // per_record, 1)
    return {"records": [record(10**6 + i) for i in range(count)]}


def request_of(parameters: dict[str, Any]) -> RequestEnvelope:
    payload = RequestPayload(action="process", parameters=parameters)
    return RequestEnvelope(sender_id="bench-client", receiver_id="worker", payload=payload)


def timed(call: Callable[[], object], iterations: int) -> dict[str, float]:
    for _ in range(max(iterations // 10, 3)):
        call()
    gc.collect()
    samples: list[int] = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    return harness.summary(samples)


def run_codec(url: str, cfg: SimpleNamespace, say: harness.Say) -> list[dict[str, Any]]:
    cases = []
    for size in SIZES:
        iterations = min(max(cfg.budget // size, 20), 50_000)  # bytes through each call
        envelope = request_of(parameters_of(size))
        data = encode(envelope, max_size=None)
        fields = orjson.loads(data)
        runs = {"encode": timed(lambda e=envelope: encode(e, max_size=None), iterations),
                "decode": timed(lambda d=data: decode(d, max_size=None), iterations),
                "orjson_dumps": timed(lambda f=fields: orjson.dumps(f), iterations),
                "orjson_loads": timed(lambda d=data: orjson.loads(d), iterations)}  # fmt: skip
        case = {"payload_bytes": size, "envelope_bytes": len(data), "iterations": iterations}
        for name, stats in runs.items():
            case |= {f"{name}_us": stats["p50_us"], f"{name}_mean_us": stats["mean_us"]}
        cases.append(case)
    return cases


def per_call(fn: Callable[[], object]) -> float:
    """Median seconds per call over 7 timed loops (``timeit``: each of 0.2 s or more)."""
    timer = timeit.Timer(fn)
    loops = timer.autorange()[0]
    return statistics.median(timer.repeat(7, loops)) / loops


def row(fast: float, public: float) -> dict[str, float]:
    return {"fast_us": fast * 1e6, "public_us": public * 1e6, "public/fast": public / fast}


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


def run_seams(url: str, cfg: SimpleNamespace, say: harness.Say) -> dict[str, Any]:
    rows: dict[str, dict[str, float]] = {}
    for label, size in (("1 KB", 1_000), ("64 KB", 64_000), ("1 MB", 1_000_000)):
        envelope = request_of(parameters_of(size))
        dump = envelope.model_dump
        public = per_call(lambda d=dump: orjson.dumps(d(mode="json"), option=orjson.OPT_UTC_Z))
        fast = per_call(lambda e=envelope: encode(e, max_size=None))
        rows[f"codec encode, {label}"] = row(fast, public)
    bind_ids = private("agentbus._logging", "bind_delivery_ids")
    properties = private("agentbus.bus._rabbitmq._properties", "message_properties")
    consumer = private("agentbus.bus._rabbitmq._amqp", "DeliveryConsumer")
    if bind_ids is not None:
        context = contextvars.copy_context()
        ids = {"agent_id": "agent-1", "message_id": "m-1", "correlation_id": "c-1"}
        rows["log ids per delivery"] = row(
            per_call(lambda: context.run(bind_ids, *ids.values())),
            per_call(lambda: context.run(structlog.contextvars.bind_contextvars, **ids)),
        )
    if properties is not None:
        sent, key = datetime.now(UTC), "agentbus.instance.a"
        common = {"app_id": "agentbus", "message_id": "m-1", "timestamp": sent, "reply_to": key}
        rows["publish properties"] = row(
            per_call(lambda: properties(**common, message_type="request", correlation_id=None,
                                        persistent=True, ttl=5.0, user_id=None)),
            per_call(lambda: aio_pika.Message(b"{}", **common, content_type="application/json",
                     type="request", delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                     expiration=5.0).properties),
        )  # fmt: skip
        built = properties(**common, message_type="request", correlation_id="m-0",
                           persistent=True, ttl=None, user_id=None)  # fmt: skip
        rows["publish properties, marshalled"] = row(
            per_call(built.marshal), per_call(lambda: Basic.Properties.marshal(built))
        )
    if consumer is not None:
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(3):
            for fast in (True, False):
                seam = consumer if fast else None
                times[fast].append(asyncio.run(drain(url, cfg.messages, seam)))
        per_message = [statistics.median(times[fast]) / cfg.messages for fast in (True, False)]
        rows[f"no-ack consume, per message (N={cfg.messages})"] = row(*per_message)
    seams = {"log ids": bind_ids, "publish properties": properties, "no-ack consume": consumer}
    rows |= {f"{name}: not in this checkout": {} for name, seam in seams.items() if seam is None}
    return {"params": vars(cfg), "figures": rows, "ratios": {}}

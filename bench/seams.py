"""What each seam onto a library's internals buys: the fast path against the public one.

Each row times agentbus's shortcut and the library's documented way of doing the same,
alternated in this one process, and prints both with their ratio. The seams:

- codec (``envelopes/_dump.py``): ``encode`` against ``orjson.dumps(model_dump(mode="json"))``;
- log ids (``_logging.bind_delivery_ids``) against ``structlog.contextvars.bind_contextvars``;
- publish properties (``bus/_amqp.message_properties``) against ``aio_pika.Message(...)``;
- no-ack consume (``bus/_amqp.NoAckConsumer``) against aio-pika's ``Queue.consume``, on the
  broker at ``--url``: N messages waiting in a queue, drained by each in turn.

Usage: ``python bench/seams.py [--url URL] [--messages 20000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import os
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aio_pika
import orjson
import structlog

from agentbus.envelopes import RequestEnvelope, RequestPayload, encode

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"


def per_call(fn: Callable[[], object], *, rounds: int = 7, target: float = 0.05) -> float:
    """Median seconds per call over ``rounds`` timed loops of about ``target`` s each."""
    loops = 1
    while True:
        began = time.perf_counter()
        for _ in range(loops):
            fn()
        if time.perf_counter() - began >= target / 10:
            break
        loops *= 4
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - began) / loops)
    return statistics.median(samples)


def row(name: str, fast: float, public: float) -> None:
    print(f"{name:<34} fast {fast * 1e6:9.2f} µs   public {public * 1e6:9.2f} µs   "
          f"public/fast {public / fast:5.2f}x")  # fmt: skip


def codec_rows() -> None:
    for label, size in (("1 KB", 1_000), ("64 KB", 64_000), ("1 MB", 1_000_000)):
        words = ["lorem", 42, 3.5, True, None, {"k": "v"}]
        items = [words[i % len(words)] for i in range(size // 8)]
        envelope = RequestEnvelope(
            sender_id="bench",
            receiver_id="svc",
            payload=RequestPayload(action="go", parameters={"items": items}),
        )
        fast = per_call(lambda envelope=envelope: encode(envelope, max_size=None))
        public = per_call(
            lambda envelope=envelope: orjson.dumps(
                envelope.model_dump(mode="json"), option=orjson.OPT_UTC_Z
            )
        )
        row(f"codec encode, {label}", fast, public)


def log_row() -> None:
    from agentbus._logging import bind_delivery_ids

    def fast() -> None:
        bind_delivery_ids("agent-1", "m-1", "c-1")

    def public() -> None:
        structlog.contextvars.bind_contextvars(
            agent_id="agent-1", message_id="m-1", correlation_id="c-1"
        )

    context = contextvars.copy_context()
    row(
        "log ids per delivery",
        per_call(lambda: context.run(fast)),
        per_call(lambda: context.run(public)),
    )


def properties_row() -> None:
    from agentbus.bus._amqp import message_properties

    sent = datetime.now(UTC)
    body = b"{}"

    def fast() -> object:
        return message_properties(
            app_id="agentbus",
            message_id="m-1",
            message_type="request",
            timestamp=sent,
            correlation_id=None,
            reply_to="agentbus.instance.a",
            persistent=True,
            ttl=5.0,
            user_id=None,
        )

    def public() -> object:
        return aio_pika.Message(
            body,
            app_id="agentbus",
            content_type="application/json",
            message_id="m-1",
            type="request",
            timestamp=sent,
            reply_to="agentbus.instance.a",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            expiration=5.0,
        ).properties

    row("publish properties", per_call(fast), per_call(public))


async def consume_row(url: str, messages: int) -> None:
    from agentbus.bus._amqp import NoAckConsumer

    async with await aio_pika.connect_robust(url) as connection:
        channel = await connection.channel()
        body = orjson.dumps({"payload": {"event_data": {"agent_id": "a", "n": 1}}})
        fast_s: list[float] = []
        public_s: list[float] = []
        for _ in range(3):
            for results, kind in ((fast_s, "fast"), (public_s, "public")):
                results.append(
                    await _drain_once(connection, channel, body, messages, kind, NoAckConsumer)
                )
    fast, public = statistics.median(fast_s), statistics.median(public_s)
    row(f"no-ack consume, per message (N={messages})", fast / messages, public / messages)


async def _drain_once(
    connection: aio_pika.abc.AbstractRobustConnection,
    channel: aio_pika.abc.AbstractRobustChannel,
    body: bytes,
    messages: int,
    kind: str,
    consumer_class: Any,
) -> float:
    queue = await channel.declare_queue(f"bench-seams-{uuid.uuid4().hex[:8]}", exclusive=True)
    for _ in range(messages):
        await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue.name)
    done = asyncio.Event()
    seen = 0

    def take(*_: object) -> None:
        nonlocal seen
        seen += 1
        if seen == messages:
            done.set()

    async def take_async(message: object) -> None:
        take()

    cpu = time.process_time()
    if kind == "fast":
        consumer_channel = await connection.channel()
        consumer = consumer_class(consumer_channel, queue.name, take)
        await consumer.start()
        await done.wait()
        elapsed = time.process_time() - cpu
        await consumer.aclose()
    else:
        tag = await queue.consume(take_async, no_ack=True)
        await done.wait()
        elapsed = time.process_time() - cpu
        await queue.cancel(tag)
    await queue.delete()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("AGENTBUS_URL", DEFAULT_URL))
    parser.add_argument("--messages", type=int, default=20_000, help="for the consume row")
    args = parser.parse_args()
    print(f"seams: fast path against the public API, {time.strftime('%Y-%m-%d %H:%M')}")
    codec_rows()
    log_row()
    properties_row()
    asyncio.run(consume_row(args.url, args.messages))


if __name__ == "__main__":
    main()

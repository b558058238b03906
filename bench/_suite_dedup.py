"""What the shared de-duplication store costs, for suite.py (``--only dedup``).

- through the bus: ``Bus.serve`` echo with the in-process window (the default) and with
  ``AGENTBUS_DEDUP_URL`` (Redis), interleaved round by round: sequential p50/p99, requests/s
  with a window in flight (``bus_variants``);
- the store alone: what serving one request asks of it (``check_in`` then ``complete``
  with the encoded reply), one request after the other (p50/p99 µs) and 64 at once
  (requests/s), for the window and for Redis.

The Redis is ``$AGENTBUS_DEDUP_URL``, else ``$AGENTBUS_TEST_DEDUP_URL``, else the one
``scripts/ensure-redis`` starts (redis://127.0.0.1:6390/0). The keys it wrote are deleted.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from types import SimpleNamespace as Config
from typing import Any

from redis.asyncio import Redis

import _harness as harness
from _suite_costs import bus_variants
from agentbus.bus import DedupWindow, RedisDedupStore
from agentbus.envelopes import RequestEnvelope, RequestPayload, encode

DEFAULT_REDIS = "redis://127.0.0.1:6390/0"


def redis_url() -> str:
    return (
        os.environ.get("AGENTBUS_DEDUP_URL")
        or os.environ.get("AGENTBUS_TEST_DEDUP_URL")
        or DEFAULT_REDIS
    )


async def store_costs(url: str, cfg: Config) -> dict[str, dict[str, Any]]:
    """Per request: ``check_in`` and ``complete`` on the window, then on Redis."""
    request = RequestEnvelope(
        sender_id="bench-cli", receiver_id="echo", payload=RequestPayload(action="ping")
    )
    reply = request.response({"text": "x" * 200}, sender_id="bench-srv")
    body = encode(reply)
    namespace = f"bench-dedup-store-{uuid.uuid4().hex[:8]}"
    window = DedupWindow(600.0, 100_000)
    shared = RedisDedupStore(url, 600.0, namespace=namespace)
    run = uuid.uuid4().hex[:6]

    async def via_window(i: int) -> None:
        key = f"{run}-w-{i}"
        window.check_in(key)
        window.complete(key, reply, "bench-cli", body)

    async def via_redis(i: int) -> None:
        key = f"{run}-r-{i}"
        await shared.check_in(key)
        await shared.complete(key, reply, "bench-cli", body)

    figures: dict[str, dict[str, Any]] = {}
    try:
        latency = harness.summary(await harness.sequential(via_window, 20 * cfg.requests, 100))
        # never waits: 64 at once are 64 one after the other
        figures["store alone: window"] = latency | {"requests_per_s": 1e6 / latency["mean_us"]}
        latency = harness.summary(await harness.sequential(via_redis, cfg.requests, warmup=100))
        load = await harness.windowed(via_redis, 64, cfg.seconds / 2)
        figures["store alone: redis"] = latency | {"requests_per_s": load["per_s"]}
    finally:
        await shared.aclose()
        await forget_keys(url, namespace)
    return figures


async def forget_keys(url: str, *namespaces: str) -> None:
    """Delete what the bench wrote (it would stay for the 600 s window)."""
    client = Redis.from_url(url)
    try:
        for namespace in namespaces:
            keys = [key async for key in client.scan_iter(match=f"{namespace}*:dedup:*")]
            for start in range(0, len(keys), 1000):
                await client.delete(*keys[start : start + 1000])
    finally:
        await client.aclose()


def run_dedup(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    shared = redis_url()
    say(f"dedup: the window against Redis at {shared}")
    result = bus_variants(url, cfg, say, "dedup_url", {"window": None, "redis": shared})
    asyncio.run(forget_keys(shared, "bench-dedup-url-"))
    stores = asyncio.run(store_costs(shared, cfg))
    window, redis = stores["store alone: window"], stores["store alone: redis"]
    result["figures"] |= stores
    result["ratios"]["store alone p50, redis / window"] = redis["p50_us"] / window["p50_us"]
    result["ratios"]["redis store p50 over the bus p50 with the window"] = (
        redis["p50_us"] / result["figures"]["window"]["p50_us"]
    )
    return result

"""Classic or quorum service queues? The cost measured through the bus, both in one run.

.venv/bin/python bench/bench_queue_type.py [--requests 1500] [--concurrent 6000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import aio_pika

import agentbus
from agentbus import RequestEnvelope, Settings
from agentbus._logging import configure_logging
from agentbus.bus import Topology

URL = "amqp://guest:guest@localhost:5672/"


async def echo(request: RequestEnvelope) -> dict[str, Any]:
    return request.payload.parameters


async def measure(queue_type: str, requests: int, concurrent: int, window: int) -> dict[str, float]:
    exchange = f"bench-qt-{uuid.uuid4().hex[:8]}"
    settings = Settings(url=URL, exchange=exchange, queue_type=queue_type)  # type: ignore[arg-type]
    server = await agentbus.Bus(settings, agent_id=f"srv-{exchange}").open()
    client = await agentbus.Bus(settings).open()
    try:
        await server.serve(echo, service="echo", prefetch=64)
        payload = {"text": "x" * 200}
        for _ in range(100):
            await client.request("echo", "warm", payload, timeout=10)
        latencies = []
        for _ in range(requests):
            start = time.perf_counter_ns()
            await client.request("echo", "ping", payload, timeout=10)
            latencies.append((time.perf_counter_ns() - start) / 1000)
        latencies.sort()
        slots = asyncio.Semaphore(window)

        async def one() -> None:
            async with slots:
                await client.request("echo", "load", payload, timeout=30)

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(concurrent)))
        elapsed = time.perf_counter() - start
        return {
            "p50_us": latencies[len(latencies) // 2],
            "p99_us": latencies[int(len(latencies) * 0.99)],
            "requests_per_s": concurrent / elapsed,
        }
    finally:
        await client.aclose()
        await server.aclose()
        await _delete(exchange, [server.agent_id, client.agent_id])


async def _delete(exchange: str, agent_ids: list[str]) -> None:
    topology = Topology(exchange)
    connection = await aio_pika.connect(URL)
    async with connection:
        channel = await connection.channel()
        for name in [
            topology.service_queue("echo"),
            topology.dead_letter_queue,
            *(topology.instance_queue(agent_id) for agent_id in agent_ids),
        ]:
            await channel.queue_delete(name)
        for name in (exchange, topology.dead_letter_exchange):
            await channel.exchange_delete(name)


async def main() -> None:
    configure_logging("warning")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--concurrent", type=int, default=6000)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"classic": [], "quorum": []}
    for _ in range(args.rounds):
        for queue_type in ("classic", "quorum"):
            runs[queue_type].append(
                await measure(queue_type, args.requests, args.concurrent, args.window)
            )
    print(f"request/response through the bus, service queue type; {args.rounds} rounds, median")
    print(f"{'queue':<9}{'p50 us':>10}{'p99 us':>10}{'req/s':>10}")
    medians = {}
    for queue_type, results in runs.items():
        medians[queue_type] = {
            key: statistics.median(r[key] for r in results) for key in results[0]
        }
        m = medians[queue_type]
        print(
            f"{queue_type:<9}{m['p50_us']:>10.0f}{m['p99_us']:>10.0f}{m['requests_per_s']:>10.0f}"
        )
    q, c = medians["quorum"], medians["classic"]
    throughput = q["requests_per_s"] / c["requests_per_s"]
    print(
        f"quorum/classic: p50 x{q['p50_us'] / c['p50_us']:.2f}, "
        f"p99 x{q['p99_us'] / c['p99_us']:.2f}, throughput x{throughput:.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())

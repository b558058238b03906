"""Classic or quorum service queues? The cost measured through the bus, both in one run.

.venv/bin/python bench/bench_queue_type.py [--requests 1500] [--concurrent 6000] [--rounds 2]
    [--url URL] [--json FILE]
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

import agentbus
from _harness import delete_all, parser, quiet_logging, summary, write_json
from agentbus import RequestEnvelope, Settings
from agentbus.bus import Topology


async def echo(request: RequestEnvelope) -> dict[str, Any]:
    return request.payload.parameters


async def measure(
    url: str, queue_type: str, requests: int, concurrent: int, window: int
) -> dict[str, float]:
    exchange = f"bench-qt-{uuid.uuid4().hex[:8]}"
    settings = Settings(url=url, exchange=exchange, queue_type=queue_type)  # type: ignore[arg-type]
    server = await agentbus.Bus(settings, agent_id=f"srv-{exchange}").open()
    client = await agentbus.Bus(settings).open()
    try:
        await server.serve(echo, service="echo", prefetch=64)
        payload = {"text": "x" * 200}
        for _ in range(100):
            await client.request("echo", "warm", payload, timeout=10)
        samples = []
        for _ in range(requests):
            start = time.perf_counter_ns()
            await client.request("echo", "ping", payload, timeout=10)
            samples.append(time.perf_counter_ns() - start)
        latency = summary(samples)
        slots = asyncio.Semaphore(window)

        async def one() -> None:
            async with slots:
                await client.request("echo", "load", payload, timeout=30)

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(concurrent)))
        elapsed = time.perf_counter() - start
        latency.pop("mean_us")
        return latency | {"requests_per_s": concurrent / elapsed}
    finally:
        await client.aclose()
        await server.aclose()
        topology = Topology(exchange)
        queues = [topology.service_queue("echo"), topology.dead_letter_queue]
        queues += [topology.instance_queue(bus.agent_id) for bus in (server, client)]
        await delete_all(url, queues, [exchange, topology.dead_letter_exchange])


async def main() -> None:
    quiet_logging()
    cli = parser(__doc__)
    cli.add_argument("--requests", type=int, default=1500)
    cli.add_argument("--concurrent", type=int, default=6000)
    cli.add_argument("--window", type=int, default=128)
    cli.add_argument("--rounds", type=int, default=2)
    args = cli.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"classic": [], "quorum": []}
    for _ in range(args.rounds):
        for queue_type in ("classic", "quorum"):
            runs[queue_type].append(
                await measure(args.url, queue_type, args.requests, args.concurrent, args.window)
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
    write_json(args.json, {"rounds": runs, "medians": medians})


if __name__ == "__main__":
    asyncio.run(main())

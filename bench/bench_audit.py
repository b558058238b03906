"""The audit trail's cost per request: the same request/response with the stream off and on.

.venv/bin/python bench/bench_audit.py [--requests 1500] [--concurrent 4000] [--rounds 2]
    [--url URL] [--json FILE]

Each round measures sequential latency and windowed throughput with ``audit=False`` and
with ``audit=True`` (every served request appends a record to the stream), interleaved.
The stream and the rest of the topology are deleted afterwards.
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
    url: str, exchange: str, audit: bool, requests: int, concurrent: int, window: int
) -> dict[str, float]:
    settings = Settings(url=url, exchange=exchange, audit=audit)
    server = await agentbus.Bus(settings, agent_id=f"srv-{uuid.uuid4().hex[:6]}").open()
    client = await agentbus.Bus(settings.model_copy(update={"audit": False})).open()
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
        return latency | {"requests_per_s": concurrent / elapsed}
    finally:
        await client.aclose()
        await server.aclose()
        topology = Topology(exchange)
        queues = [topology.instance_queue(bus.agent_id) for bus in (server, client)]
        await delete_all(url, queues, [])


async def main() -> None:
    quiet_logging()
    cli = parser(__doc__)
    cli.add_argument("--requests", type=int, default=1500)
    cli.add_argument("--concurrent", type=int, default=4000)
    cli.add_argument("--window", type=int, default=128)
    cli.add_argument("--rounds", type=int, default=2)
    args = cli.parse_args()
    exchange = f"bench-audit-{uuid.uuid4().hex[:8]}"
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    try:
        for _ in range(args.rounds):
            for mode in ("off", "on"):
                runs[mode].append(
                    await measure(
                        args.url, exchange, mode == "on", args.requests, args.concurrent,
                        args.window,
                    )
                )  # fmt: skip
    finally:
        topology = Topology(exchange)
        queues = [topology.service_queue("echo"), topology.dead_letter_queue]
        await delete_all(
            args.url,
            [*queues, topology.audit_stream],
            [exchange, topology.dead_letter_exchange],
        )
    print(f"request/response through the bus, audit stream off/on; {args.rounds} rounds, median")
    print(f"{'audit':<7}{'mean us':>10}{'p50 us':>10}{'p99 us':>10}{'req/s':>10}")
    medians = {}
    for mode, results in runs.items():
        medians[mode] = {key: statistics.median(r[key] for r in results) for key in results[0]}
        m = medians[mode]
        print(
            f"{mode:<7}{m['mean_us']:>10.0f}{m['p50_us']:>10.0f}{m['p99_us']:>10.0f}"
            f"{m['requests_per_s']:>10.0f}"
        )
    on, off = medians["on"], medians["off"]
    per_request = 1e6 / on["requests_per_s"] - 1e6 / off["requests_per_s"]
    print(
        f"on/off: p50 x{on['p50_us'] / off['p50_us']:.2f}, p99 x{on['p99_us'] / off['p99_us']:.2f},"
        f" throughput x{on['requests_per_s'] / off['requests_per_s']:.2f}; cost per request"
        f" {on['mean_us'] - off['mean_us']:+.0f} us latency, {per_request:+.0f} us at load"
    )
    write_json(args.json, {"rounds": runs, "medians": medians})


if __name__ == "__main__":
    asyncio.run(main())

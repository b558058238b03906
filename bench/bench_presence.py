"""What failing fast costs: request latency with and without the presence check, and how fast
a request to a stopped service fails.

.venv/bin/python bench/bench_presence.py [--requests 500] [--rounds 6] [--url URL] [--json FILE]

One process runs a ``Pinger`` agent and two clients on the broker: one with the default
``presence_check`` (0.5 s) and one with it off (0). Each round sends the same number of
sequential requests from each client, in alternating order. Printed: p50 and p99 of each
(median of the rounds) and their ratio. Then the agent stops (its queue stays) and each
client sends one request: the time until it fails, and how.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

import agentbus
from _bench_agents import Pinger
from _harness import delete_all, parser, quiet_logging, summary, write_json
from agentbus import AgentBusError, Settings
from agentbus.bus import Topology

SIDES = {"presence check 0.5 s": 0.5, "presence check off": 0.0}
TIMEOUT = 5.0


async def sequential(bus: agentbus.Bus, n: int) -> list[int]:
    samples = []
    for i in range(n):
        start = time.perf_counter_ns()
        await bus.request("pinger", "answer", {"i": i}, timeout=TIMEOUT)
        samples.append(time.perf_counter_ns() - start)
    return samples


async def failing(bus: agentbus.Bus) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        await bus.request("pinger", "answer", {"i": 0}, timeout=TIMEOUT)
    except AgentBusError as exc:
        return {"seconds": time.perf_counter() - start, "code": exc.code, "message": str(exc)}
    raise RuntimeError("a stopped service answered")


async def main() -> None:
    args = parser(__doc__)
    args.add_argument("--requests", type=int, default=500)
    args.add_argument("--rounds", type=int, default=6)
    options = args.parse_args()
    quiet_logging()
    exchange = f"bench-presence-{uuid.uuid4().hex[:8]}"
    base = Settings(url=options.url, exchange=exchange)
    agent = Pinger(settings=base)
    clients = {
        side: agentbus.Bus(base.model_copy(update={"presence_check": after}))
        for side, after in SIDES.items()
    }
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    fails: dict[str, dict[str, Any]] = {}
    try:
        await agent.start()
        for bus in clients.values():
            await bus.open()
            await sequential(bus, 100)  # warm-up
        for round_ in range(options.rounds):
            order = list(SIDES) if round_ % 2 == 0 else list(reversed(SIDES))
            for side in order:
                rounds[side].append(summary(await sequential(clients[side], options.requests)))
        await agent.stop()  # its service queue stays, with no consumer
        for side, bus in clients.items():
            fails[side] = await failing(bus)
    finally:
        for bus in clients.values():
            await bus.aclose()
        topology = Topology(exchange)
        queues = [topology.service_queue("pinger"), topology.dead_letter_queue]
        ids = [agent.id, *(bus.agent_id for bus in clients.values())]
        queues += [topology.instance_queue(agent_id) for agent_id in ids]
        await delete_all(options.url, queues, [exchange, topology.dead_letter_exchange])
    report: dict[str, Any] = {}
    for side, results in rounds.items():
        p50 = statistics.median(r["p50_us"] for r in results)
        p99 = statistics.median(r["p99_us"] for r in results)
        report[side] = {"p50_us": p50, "p99_us": p99, "stopped_service": fails[side]}
        print(
            f"{side:<22} p50 {p50:7.0f} µs, p99 {p99:7.0f} µs; to a stopped service: "
            f"{fails[side]['code']} after {fails[side]['seconds']:.2f} s"
        )
    on, off = (report[side]["p50_us"] for side in SIDES)
    print(f"p50 with / without the check: {on / off:.3f} (median of {options.rounds} rounds)")
    print(f"message: {fails['presence check 0.5 s']['message']}")
    write_json(options.json, report | {"p50_ratio": on / off})


if __name__ == "__main__":
    asyncio.run(main())

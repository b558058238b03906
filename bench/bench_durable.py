"""What a durable plan costs: the same fan-out with and without the leaders' journal.

.venv/bin/python bench/bench_durable.py [--subtasks 2000] [--rounds 3] [--url URL] [--json FILE]

One process runs a registry, a leader and two echo workers on the broker; each round runs
the same fan-out of N ``echo`` subtasks once without the journal and once with it, in
alternating order. Printed: subtasks per second (best and median of the rounds), their
ratio, and the leader's Python heap growth over a plan (tracemalloc) for each side.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import tracemalloc
import uuid
from typing import Any

import agentbus
from _bench_agents import Echo
from _harness import delete_all, parser, quiet_logging, write_json
from agentbus import Leader, PlanClient, Settings
from agentbus.bus import Topology
from agentbus.registry import Registry


async def fan_out(url: str, durable: bool, subtasks: int) -> dict[str, float]:
    exchange = f"bench-durable-{uuid.uuid4().hex[:8]}"
    settings = Settings(url=url, exchange=exchange, max_message_size=16 * 1024 * 1024)
    agents = [
        Registry(settings=settings, heartbeat_interval=1),
        Leader(settings=settings, durable=durable, heartbeat_interval=1),
        Echo(settings=settings, heartbeat_interval=1),
        Echo(settings=settings, heartbeat_interval=1),
    ]
    client = agentbus.Bus(settings)
    try:
        for agent in agents:
            await agent.start()
        await client.open()
        plan = {
            "max_parallel": 64,
            "subtasks": [
                {"id": f"e{n}", "skill": "echo", "service": "echo", "parameters": {"n": n}}
                for n in range(subtasks)
            ],
        }
        warm = {"subtasks": plan["subtasks"][:50], "max_parallel": 64}
        await PlanClient(client).run(warm, timeout=120)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        aggregate = await PlanClient(client).run(plan, timeout=600)
        elapsed = time.perf_counter() - start
        grown = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.stop()
        assert aggregate.status.value == "completed", aggregate.error
        return {"subtasks_per_s": subtasks / elapsed, "peak_bytes_per_subtask": grown / subtasks}
    finally:
        await client.aclose()
        for agent in reversed(agents):
            await agent.stop()
        topology = Topology(exchange)
        queues = [topology.service_queue(s) for s in ("registry", "leader", "echo")]
        queues += [topology.dead_letter_queue, topology.journal_queue("plans")]
        queues += [topology.instance_queue(a.id) for a in agents]
        queues += [topology.instance_queue(client.agent_id)]
        await delete_all(url, queues, [exchange, topology.dead_letter_exchange])


async def main() -> None:
    args = parser(__doc__)
    args.add_argument("--subtasks", type=int, default=2000)
    args.add_argument("--rounds", type=int, default=3)
    options = args.parse_args()
    quiet_logging()
    sides: dict[str, list[dict[str, float]]] = {"plain": [], "durable": []}
    for round_ in range(options.rounds):
        order = [False, True] if round_ % 2 == 0 else [True, False]
        for durable in order:
            result = await fan_out(options.url, durable, options.subtasks)
            sides["durable" if durable else "plain"].append(result)
    report: dict[str, Any] = {}
    for side, results in sides.items():
        rates = [r["subtasks_per_s"] for r in results]
        heap = statistics.median(r["peak_bytes_per_subtask"] for r in results)
        report[side] = {"best": max(rates), "median": statistics.median(rates), "heap": heap}
        print(
            f"{side:<8} {max(rates):8.0f} subtasks/s best, {statistics.median(rates):8.0f} median;"
            f" leader heap peak {heap:7.0f} B per subtask"
        )
    ratio = report["durable"]["best"] / report["plain"]["best"]
    median = report["durable"]["median"] / report["plain"]["median"]
    print(f"durable / plain: {ratio:.2f} best, {median:.2f} median (N = {options.subtasks})")
    write_json(options.json, report | {"ratio_best": ratio, "ratio_median": median})


if __name__ == "__main__":
    asyncio.run(main())

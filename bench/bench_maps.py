"""A mapped step against a fixed plan of as many steps: throughput, and the leader's memory.

A registry, a leader and a worker (``Echo``: answers at once), each a process, on an
exchange of their own; this process sends the plans. Each round runs a fixed plan of N
steps (each a request to the worker) and a plan of one step mapped over N items, on a
fresh leader each (so its RSS growth is the plan's); the figures are items (or steps) a
second, the ratio map / fixed, and the leader's peak RSS growth per item.

    .venv/bin/python bench/bench_maps.py               # N = 10,000, 2 rounds
    .venv/bin/python bench/bench_maps.py --quick       # N = 2,000, 1 round
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from agentbus import Agent, PlanClient, Settings, connect, skill

HERE = Path(__file__).resolve().parent


class Echo(Agent):
    """The worker: each step and each item is one of its answers."""

    name = "echo"
    concurrency = 64

    @skill
    async def echo(self, n: int) -> int:
        return n

    @skill
    async def numbers(self, count: int) -> list[int]:
        return list(range(count))


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for {pid}")


def _start(url: str, exchange: str, *args: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "agentbus", "--url", url, "--exchange", exchange]
    env = {**os.environ, "PYTHONPATH": str(HERE), "AGENTBUS_LOOP": "asyncio"}
    return subprocess.Popen(
        [*command, "--log-level", "warning", *args], env=env, cwd=HERE, stdout=subprocess.DEVNULL
    )


def _fixed(count: int) -> dict[str, Any]:
    steps = [
        {"id": f"s{n}", "skill": "echo", "service": "echo", "parameters": {"n": n}}
        for n in range(count)
    ]
    return {"id": f"fixed-{uuid.uuid4().hex[:6]}", "subtasks": steps, "max_parallel": 64}


def _mapped(count: int) -> dict[str, Any]:
    return {
        "id": f"map-{uuid.uuid4().hex[:6]}",
        "subtasks": [
            {"id": "n", "skill": "numbers", "service": "echo", "parameters": {"count": count}},
            {
                "id": "m",
                "skill": "echo",
                "service": "echo",
                "depends_on": ["n"],
                "map": {"over": "n", "as": "n", "concurrency": 64},
            },
        ],
    }


async def _one(url: str, exchange: str, plan: dict[str, Any], count: int) -> dict[str, float]:
    leader = _start(url, exchange, "leader", "--id", f"leader-{uuid.uuid4().hex[:6]}")
    try:
        async with connect(url, exchange=exchange) as bus:
            await _ready(bus, "leader")
            await asyncio.sleep(1.0)  # its imports settled: the baseline is the idle leader
            before = _status(leader.pid, "VmRSS")
            began = time.perf_counter()
            aggregate = await PlanClient(bus).run(plan, timeout=900)
            seconds = time.perf_counter() - began
            peak = _status(leader.pid, "VmHWM")
    finally:
        leader.terminate()
        leader.wait(timeout=30)
    assert aggregate.status.value == "completed", aggregate.status
    return {"per_second": count / seconds, "rss_per_item": (peak - before) / count}


async def _ready(bus: Any, service: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            await bus.request(service, "ping", timeout=2)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)  # the process is starting: nothing to wait on


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=Settings().url)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count, rounds = (2_000, 1) if args.quick else (10_000, 2)
    exchange = f"bench-maps-{uuid.uuid4().hex[:8]}"
    team = [
        _start(args.url, exchange, "registry", "--id", "registry-1"),
        _start(args.url, exchange, "run", "bench_maps:Echo", "--id", "echo-1"),
    ]
    try:
        async with connect(args.url, exchange=exchange) as bus:
            await _ready(bus, "echo")
        runs: dict[str, list[dict[str, float]]] = {"fixed": [], "map": []}
        for _ in range(rounds):  # interleaved: both see the same host
            runs["fixed"].append(await _one(args.url, exchange, _fixed(count), count))
            runs["map"].append(await _one(args.url, exchange, _mapped(count), count))
    finally:
        for process in team:
            process.terminate()
            process.wait(timeout=30)
    best = {kind: max(r["per_second"] for r in found) for kind, found in runs.items()}
    memory = {kind: min(r["rss_per_item"] for r in found) for kind, found in runs.items()}
    figures = {
        "items": count,
        "rounds": rounds,
        "fixed_steps_per_s": round(best["fixed"]),
        "map_items_per_s": round(best["map"]),
        "map_vs_fixed": round(best["map"] / best["fixed"], 2),
        "fixed_rss_bytes_per_step": round(memory["fixed"]),
        "map_rss_bytes_per_item": round(memory["map"]),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

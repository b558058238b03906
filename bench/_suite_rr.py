"""Request/response for suite.py: latency (sequential) and throughput (concurrent clients).

The echo server of every side runs as its own process for the whole section. Latency is
measured from this process, the sides one after the other in each round; throughput from
1 and 4 client processes started together (_rr_sides.py ``load``), each keeping a window
of requests in flight. Each round also gives the CPU per request of the client (this
process, ``time.process_time``) and of the server (from /proc): on a shared host CPU time
is steadier than wall-clock latency. ``RRConfig.sides`` picks the sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import selectors
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import aio_pika

from _harness import BENCH_DIR, READY_TIMEOUT, Fleet, consumers, cpu_seconds, summary
from _rr_sides import SERVERS, SIDES, WARMUP, Call, Names, client

RR_SCRIPT = str(BENCH_DIR / "_rr_sides.py")


@dataclass(frozen=True, slots=True)
class RRConfig:
    requests: int  # sequential requests per side and latency round
    rounds: int  # latency rounds, the sides in turn in each
    load_rounds: int  # throughput rounds
    seconds: float  # per throughput run
    procs: tuple[int, ...] = (1, 4)
    window: int = 64  # requests in flight per client process (the servers' prefetch)
    sides: tuple[str, ...] = SIDES


def start_servers(fleet: Fleet, names: Names, sides: tuple[str, ...]) -> dict[str, int]:
    """Every side's echo server as its own process, ready; their pids by side."""
    assert fleet.url is not None
    servers = [
        side for side in SERVERS if side in sides or any(s.startswith(f"{side}-") for s in sides)
    ]
    for side in servers:
        argv = [sys.executable, RR_SCRIPT, "serve", side, fleet.url, names.exchange]
        fleet.spawn(side, f"{side} server", argv)
    asyncio.run(wait_servers(fleet, names, servers))
    pids = {side: fleet.pids(side)[0] for side in servers}
    # Sides asked through another side's server: FastStream with a reply queue, the
    # agent with transient requests.
    shared = {"faststream-rq": "faststream", "agent-transient": "agent"}
    return pids | {side: pids[server] for side, server in shared.items() if server in pids}


async def wait_servers(fleet: Fleet, names: Names, servers: list[str]) -> None:
    assert fleet.url is not None
    async with await aio_pika.connect(fleet.url) as connection:

        async def ready() -> bool:
            counts = [await consumers(connection, names.service_queue(s)) for s in servers]
            return all(counts)

        await fleet.wait(ready, "the echo servers")


async def timed_round(call: Call, requests: int, server: int) -> dict[str, float]:
    """Sequential requests: latency, and the CPU per request of the client and the server."""
    gc.collect()
    samples: list[int] = []
    server0, client0 = cpu_seconds(server), time.process_time()
    for i in range(requests):
        start = time.perf_counter_ns()
        await call(i)
        samples.append(time.perf_counter_ns() - start)
    client1, server1 = time.process_time(), cpu_seconds(server)
    per = 1e6 / requests
    cpu = {"client_cpu_us": (client1 - client0) * per, "server_cpu_us": (server1 - server0) * per}
    return summary(samples) | cpu


async def latency_rounds(
    url: str, names: Names, cfg: RRConfig, pids: dict[str, int], say: Callable[[str], None]
) -> dict[str, list[dict[str, float]]]:
    """Every side's client open at once, warmed up; then short rounds, the sides in turn."""
    rows: dict[str, list[dict[str, float]]] = {side: [] for side in cfg.sides}
    async with contextlib.AsyncExitStack() as stack:
        calls = {}
        for side in cfg.sides:
            calls[side] = await stack.enter_async_context(client(side, url, names, "lat"))
            for i in range(WARMUP):
                await calls[side](i)
        for k in range(cfg.rounds):
            for side, call in calls.items():
                rows[side].append(await timed_round(call, cfg.requests, pids[side]))
                figures = ", ".join(f"{key} {v:.0f}" for key, v in rows[side][-1].items())
                say(f"request/response latency {side} #{k + 1}: {figures}")
    return rows


def _line(popen: subprocess.Popen[bytes], timeout: float) -> str:
    assert popen.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(popen.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise TimeoutError(f"no word from client {popen.pid} within {timeout:g} s")
    line = popen.stdout.readline().decode().strip()
    if not line:
        raise RuntimeError(f"client {popen.pid} exited with status {popen.wait()}")
    return line


def load_run(side: str, url: str, names: Names, procs: int, cfg: RRConfig, server: int) -> dict:
    """``procs`` client processes of ``side``, started together; requests per second."""
    with Fleet() as clients:
        for k in range(procs):
            argv = [sys.executable, RR_SCRIPT, "load", side, url, names.exchange, f"c{k}"]
            argv += [str(cfg.seconds), str(cfg.window)]
            clients.spawn("client", f"{side} client {k}", argv, pipes=True)
        for proc in clients.procs:
            if _line(proc.popen, READY_TIMEOUT) != "ready":
                raise RuntimeError(f"{proc.name} did not say ready")
        cpu0 = cpu_seconds(server)
        for proc in clients.procs:
            proc.send("go")
        rows = [json.loads(_line(proc.popen, cfg.seconds + 60)) for proc in clients.procs]
        cpu1 = cpu_seconds(server)
    count = sum(row["count"] for row in rows)
    return {
        "per_s": sum(row["count"] / row["seconds"] for row in rows),
        "count": count,
        "server_cpu_us": (cpu1 - cpu0) / max(count, 1) * 1e6,
        "client_cpu_us": sum(row["cpu_s"] for row in rows) / max(count, 1) * 1e6,
        "errors": [error for row in rows for error in row["errors"]],
    }


def summarize(rows: list[dict[str, Any]], key: str, best: Callable[..., float]) -> dict:
    values = [row[key] for row in rows]
    return {"best": best(values), "median": statistics.median(values)}


def run_rr(url: str, cfg: RRConfig, say: Callable[[str], None]) -> dict[str, Any]:
    """Latency rounds, then throughput rounds with 1 and 4 client processes, every side."""
    names = Names(f"bench-suite-{uuid.uuid4().hex[:8]}")
    load: dict[str, dict[str, list[dict[str, Any]]]] = {}
    clients = ["lat", *(f"c{k}" for k in range(max(cfg.procs)))]
    fleet = Fleet(url, queues=names.queues(clients), exchanges=names.exchanges())
    with fleet:
        pids = start_servers(fleet, names, cfg.sides)
        latency = asyncio.run(latency_rounds(url, names, cfg, pids, say))
        for procs in cfg.procs:
            load[str(procs)] = {side: [] for side in cfg.sides}
            for k in range(cfg.load_rounds):
                for side in cfg.sides:
                    row = load_run(side, url, names, procs, cfg, pids[side])
                    load[str(procs)][side].append(row)
                    say(f"request/response throughput {side} x{procs} #{k + 1}: {row}")
    summary: dict[str, dict[str, Any]] = {}
    for side in cfg.sides:
        summary[side] = {
            key: summarize(latency[side], key, min)
            for key in ("p50_us", "p99_us", "client_cpu_us", "server_cpu_us")
        }
        for procs, sides in load.items():
            summary[side][f"per_s_x{procs}"] = summarize(sides[side], "per_s", max)
            summary[side][f"server_cpu_us_x{procs}"] = summarize(sides[side], "server_cpu_us", min)
    out = {"exchange": names.exchange, "params": asdict(cfg), "latency": latency}
    return out | {"throughput": load, "summary": summary}

"""What starting and a feature cost, for suite.py: each feature against itself without it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace as Config
from typing import Any

from redis.asyncio import Redis

import _harness as harness
import agentbus
from _bench_agents import Echo, echo
from agentbus import AgentBusError, Leader, PlanClient, RequestEnvelope, Settings
from agentbus.bus import DedupWindow, RedisDedupStore
from agentbus.envelopes import RequestPayload, encode
from agentbus.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
DEPENDENCIES = """import sys, agentbus
tops = {name for name in sys.modules if "." not in name and name != "agentbus"}
files = {t: getattr(sys.modules[t], "__file__", None) or "" for t in tops}
print(" ".join(sorted(t for t in tops if "site-packages" in files[t] and t[0] != "_")))"""
PAYLOAD = {"text": "x" * 200}
SMALL_PLANS = 40  # one-step plans timed one after another
Variant = Callable[[], Awaitable[dict[str, Any]]]


def python(*argv: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """A fresh interpreter's wall time, and what it printed."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True)
    return time.perf_counter() - start, done


def import_seconds() -> tuple[float, list[tuple[int, str]]]:
    """Wall time of ``python -c 'import agentbus'`` and its heaviest imports (µs, name)."""
    elapsed, done = python("-X", "importtime", "-c", "import agentbus")
    modules = []
    for line in done.stderr.splitlines()[1:]:
        _, cumulative, name = line.split("|")
        if name.startswith("  ") and not name.startswith("    "):  # agentbus's direct imports
            modules.append((int(cumulative), name.strip()))
    return elapsed, sorted(modules, reverse=True)[:5]


def ready_seconds(fleet: harness.Fleet, exchange: str, agent_id: str) -> float:
    """Seconds from spawning ``agentbus run`` to its "agent started" log line."""
    start = time.perf_counter()
    proc = fleet.agentbus(exchange, "--log-format", "json", "run", "examples.greeter:Greeter",
                          "--id", agent_id, role="agent", log="info", pipes=True,
                          stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip
    while '"agent started"' not in proc.readline(60):
        pass
    seconds = time.perf_counter() - start
    harness.stop([proc])
    return seconds


def run_startup(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    imports = [import_seconds() for _ in range(cfg.runs)]
    deps = python("-c", DEPENDENCIES)[1].stdout.split()
    exchange = harness.exchange_name("startup")
    ids = [f"greeter-{n}" for n in range(cfg.runs)]
    with harness.Fleet(url) as fleet:
        fleet.topology(exchange, ("greeter",), ids)
        ready = [ready_seconds(fleet, exchange, agent_id) for agent_id in ids]
    return {"import_s": [seconds for seconds, _ in imports], "deps": deps,
            "deps_import_s": [python("-c", f"import {', '.join(deps)}")[0]
                              for _ in range(cfg.runs)],
            "heaviest": imports[-1][1], "ready_s": ready}  # fmt: skip


async def bus_echo(fleet: harness.Fleet, exchange: str, cfg: Config, **update: Any) -> dict:
    """``Bus.serve`` echo and a client, ``update`` to their settings: latency and req/s."""
    assert fleet.url is not None
    settings = Settings(url=fleet.url, exchange=exchange, **update)
    server = agentbus.Bus(settings, agent_id=f"{exchange}-srv")
    client = agentbus.Bus(settings.model_copy(update={"audit": False}), agent_id=f"{exchange}-cli")
    async with server, client:
        await server.serve(echo, service="echo", prefetch=64)

        async def call(i: int) -> Any:
            return await client.request("echo", "ping", PAYLOAD, timeout=30)

        latency = harness.summary(await harness.sequential(call, cfg.requests, warmup=100))
        load = await harness.windowed(call, cfg.window, cfg.seconds)
    return latency | {"requests_per_s": load["per_s"]}


def bus_variants(url: str, cfg: Config, say: harness.Say, field: str, values: dict) -> dict:
    """``bus_echo`` with ``field`` at each of ``values``, an exchange each, interleaved."""
    base = harness.exchange_name(field.replace("_", "-"))
    with harness.Fleet(url) as fleet:
        variants: dict[str, Variant] = {}
        for k, (name, value) in enumerate(values.items()):
            exchange = f"{base}-{k}"
            topology = fleet.topology(exchange, ("echo",), [f"{exchange}-srv", f"{exchange}-cli"])
            fleet.queues.append(topology.audit_stream)
            variants[name] = lambda x=exchange, v=value: bus_echo(fleet, x, cfg, **{field: v})
        result = asyncio.run(harness.interleaved(variants, cfg.rounds))
    a, b = (result["figures"][name] for name in values)
    what = " / ".join(reversed(values))
    keys = ("p50_us", "p99_us", "requests_per_s")
    ratios = {f"{key.replace('_', ' ')}, {what}": b[key] / a[key] for key in keys}
    return result | {"params": vars(cfg), "ratios": ratios}


async def stopped(url: str, exchange: str, presence_check: float) -> dict[str, Any]:
    """A request to a service whose server has stopped (its queue stays): how fast it fails."""
    settings = Settings(url=url, exchange=exchange, presence_check=presence_check)
    async with agentbus.Bus(settings, agent_id=f"{exchange}-srv") as server:
        await server.serve(echo, service="echo")
    async with agentbus.Bus(settings, agent_id=f"{exchange}-cli") as client:
        start = time.perf_counter()
        try:
            await client.request("echo", "ping", PAYLOAD, timeout=5)
        except AgentBusError as exc:
            return {"to a stopped service, s": time.perf_counter() - start, "code": exc.code}
    raise RuntimeError("a stopped service answered")


def run_presence(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    checks = {"presence check 0.5 s": 0.5, "presence check off": 0.0}
    result = bus_variants(url, cfg, say, "presence_check", checks)
    for side, after in checks.items():
        exchange = harness.exchange_name("stopped")
        with harness.Fleet(url) as fleet:
            fleet.topology(exchange, ("echo",), (f"{exchange}-srv", f"{exchange}-cli"))
            result["figures"][side] |= asyncio.run(stopped(url, exchange, after))
    on, off = (result["figures"][side]["p50_us"] for side in checks)
    return result | {"ratios": {"p50 with / without the check": on / off}}


async def plan_rate(fleet: harness.Fleet, durable: bool, subtasks: int, run: int) -> dict:
    """A registry, a leader (``durable`` or not) and two ``Echo`` workers; one plan, timed."""
    assert fleet.url is not None
    exchange = f"bench-durable-{uuid.uuid4().hex[:6]}-{run}"
    ids = [f"{exchange}-{role}" for role in ("registry", "leader", "echo-0", "echo-1", "client")]
    fleet.topology(exchange, ("registry", "leader", "echo"), ids, leaders=True)
    settings = Settings(url=fleet.url, exchange=exchange, max_message_size=16 * 1024 * 1024)
    common: dict[str, Any] = {"settings": settings, "heartbeat_interval": 1}
    leader = Leader(agent_id=ids[1], durable=durable, **common)
    agents = [Registry(agent_id=ids[0], **common), leader]
    agents += [Echo(agent_id=agent_id, **common) for agent_id in ids[2:4]]
    bus = agentbus.Bus(settings, agent_id=ids[4])
    async with contextlib.AsyncExitStack() as stack:
        for resource in [*agents, bus]:
            await stack.enter_async_context(resource)
        client = PlanClient(bus)
        echoes = [{"id": f"e{n}", "skill": "echo", "service": "echo", "parameters": {"n": n}}
                  for n in range(subtasks)]  # fmt: skip
        await client.run({"subtasks": echoes[:50], "max_parallel": 64}, timeout=120)
        tracemalloc.start()
        before, start = tracemalloc.get_traced_memory()[0], time.perf_counter()
        aggregate = await client.run({"subtasks": echoes, "max_parallel": 64}, timeout=600)
        elapsed = time.perf_counter() - start
        grown = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.stop()
        # the per-plan cost (a reply queue, the journal's start and end): one-step plans
        small = await harness.sequential(
            lambda n: client.run({"subtasks": echoes[n : n + 1]}, timeout=60), SMALL_PLANS
        )
    if aggregate.status.value != "completed":
        raise RuntimeError(f"durable={durable}: {aggregate.status} {aggregate.error}")
    return {
        "subtasks_per_s": subtasks / elapsed,
        "heap_peak_per_subtask_bytes": grown / subtasks,
        "one_step_plan_p50_ms": statistics.median(small) / 1e6,
    }


def run_durable(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    runs = itertools.count()
    with harness.Fleet(url) as fleet:
        variants: dict[str, Variant] = {
            name: lambda durable=durable: plan_rate(fleet, durable, cfg.subtasks, next(runs))
            for name, durable in (("plain", False), ("durable", True))
        }
        result = asyncio.run(harness.interleaved(variants, cfg.rounds))
    median = {name: row["subtasks_per_s"] for name, row in result["figures"].items()}
    small = {name: row["one_step_plan_p50_ms"] for name, row in result["figures"].items()}
    ratios = {"subtasks/s, durable / plain": median["durable"] / median["plain"],
              "one-step plan p50, durable / plain": small["durable"] / small["plain"]}  # fmt: skip
    return result | {"params": vars(cfg), "ratios": ratios}


async def store_costs(url: str, cfg: Config) -> dict[str, dict[str, Any]]:
    """Per request: ``check_in`` and ``complete`` on the window, then on Redis."""
    payload = RequestPayload(action="ping")
    request = RequestEnvelope(sender_id="bench-cli", receiver_id="echo", payload=payload)
    reply = request.response(PAYLOAD, sender_id="bench-srv")
    body, run = encode(reply), uuid.uuid4().hex[:6]
    namespace = f"bench-dedup-store-{run}"
    window, shared = DedupWindow(600.0, 100_000), RedisDedupStore(url, 600.0, namespace=namespace)

    async def via_window(i: int) -> None:
        window.check_in(key := f"{run}-w-{i}")
        window.complete(key, reply, "bench-cli", body)

    async def via_redis(i: int) -> None:
        await shared.check_in(key := f"{run}-r-{i}")
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


async def forget_keys(url: str, namespace: str) -> None:
    """Delete what the bench wrote (it would stay for the 600 s window)."""
    client = Redis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{namespace}*:dedup:*")]
        for start in range(0, len(keys), 1000):
            await client.delete(*keys[start : start + 1000])
    finally:
        await client.aclose()


def run_dedup(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    shared = harness.redis_url()
    say(f"dedup: the window against Redis at {shared}")
    result = bus_variants(url, cfg, say, "dedup_url", {"window": None, "redis": shared})
    asyncio.run(forget_keys(shared, "bench-dedup-url-"))
    stores = asyncio.run(store_costs(shared, cfg))
    window, redis = stores["store alone: window"], stores["store alone: redis"]
    result["figures"] |= stores
    result["ratios"]["store alone p50, redis / window"] = redis["p50_us"] / window["p50_us"]
    bus_p50 = result["figures"]["window"]["p50_us"]
    result["ratios"]["redis store p50 over the bus p50 with the window"] = redis["p50_us"] / bus_p50
    return result

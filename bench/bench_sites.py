"""Benchmark two sites linked by federation: what a request pays to cross, and the registry's view.

Two private RabbitMQ nodes (``rabbitmq_federation``), one per site, each loading what
``agentbus federation`` generates, each site's link running through a chaos proxy (as in
tests/sites). An echo service at site ``b`` only, another at site ``a`` only, a client at
``a``: the p50/p99 of sequential requests and the throughput of ``--window`` in flight, across
and local, with no delay and with ``--delay`` added each way on the link. Then the registry
at ``a``: how long until an agent started at ``b`` is listed, until one stopped at ``b`` is
gone (its ``agent_offline`` crosses), and until ``b``'s agents are reported offline when the
link is cut (three silent heartbeat intervals). Prints figures; asserts nothing.

    PYTHONPATH=src python bench/bench_sites.py [--requests 300] [--seconds 5] [--json out.json]
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

import _harness as harness
from agentbus import Agent, AgentBusError, Settings, skill
from agentbus.bus import Bus
from agentbus.registry import Registry
from agentbus.security import federation_definitions
from agentbus.testing.chaos import ChaosProxy, PrivateBroker


class FarEcho(Agent):
    name = "far-echo"
    concurrency = 64

    @skill
    async def echo(self, text: str) -> str:
        """Return ``text``."""
        return text


class NearEcho(FarEcho):
    name = "near-echo"


async def _link(nodes: dict[str, PrivateBroker], uris: dict[str, str], folder: Path) -> str:
    exchange = f"bench-sites-{uuid.uuid4().hex[:8]}"
    for site, peer in (("a", "b"), ("b", "a")):
        path = folder / f"{site}.json"
        path.write_bytes(
            orjson.dumps(federation_definitions(site, {peer: uris[site]}, exchange=exchange))
        )
        await asyncio.to_thread(nodes[site].rabbitmqctl, "import_definitions", str(path))
    return exchange


async def _until(probe: Callable[[], Awaitable[bool]], seconds: float, what: str) -> float:
    began = time.monotonic()
    async with asyncio.timeout(seconds):
        while not await probe():  # noqa: ASYNC110 - a broker's answer polled, no event
            await asyncio.sleep(0.02)
    elapsed = time.monotonic() - began
    print(f"  {what}: {elapsed:.2f} s")
    return elapsed


async def _requests(bus: Bus, requests: int, window: int, seconds: float) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for service in ("near-echo", "far-echo"):

        async def call(i: int, service: str = service) -> None:
            await bus.request(service, "echo", {"text": "x" * 64}, timeout=30)

        latency = harness.summary(await harness.sequential(call, requests, warmup=20))
        rate = await harness.windowed(call, window, seconds)
        where = "local " if service == "near-echo" else "across"
        print(
            f"  {where}: p50 {latency['p50_us'] / 1000:7.2f} ms"
            f"  p99 {latency['p99_us'] / 1000:7.2f} ms"
            f"  {rate['per_s']:7.0f} req/s with {window} in flight"
            + (f"  errors {rate['errors']}" if rate["errors"] else "")
        )
        figures[where.strip()] = {**latency, "per_s": rate["per_s"], "errors": rate["errors"]}
    return figures


async def _registry_view(
    settings: dict[str, Settings], proxies: list[ChaosProxy], interval: float
) -> dict[str, float]:
    registry = Registry(agent_id="registry-a", settings=settings["a"])
    await registry.start()
    bus = await Bus(settings["a"], agent_id="viewer-a").open()
    figures: dict[str, float] = {}
    try:

        async def listed(agent_id: str) -> bool:
            reply = await bus.request("registry", "list_agents", {}, timeout=5)
            return any(agent["agent_id"] == agent_id for agent in reply.result)

        async def not_listed(agent_id: str) -> bool:
            return not await listed(agent_id)

        print(f"registry at a, agents at b beating every {interval:g} s:")
        for run in range(3):
            agent = FarEcho(
                agent_id=f"far-{run}", settings=settings["b"], heartbeat_interval=interval
            )
            await agent.start()
            figures.setdefault("listed", 0.0)
            seen = await _until(
                lambda a=agent.id: listed(a), 60, f"far-{run} started at b, listed at a"
            )
            figures["listed"] = max(figures["listed"], seen)
            await agent.stop()
            gone = await _until(
                lambda a=agent.id: not_listed(a), 60, f"far-{run} stopped, gone at a"
            )
            figures["gone_after_stop"] = max(figures.get("gone_after_stop", 0.0), gone)
        agent = FarEcho(agent_id="far-cut", settings=settings["b"], heartbeat_interval=interval)
        await agent.start()
        await _until(partial(listed, agent.id), 60, "far-cut listed at a")
        for proxy in proxies:
            proxy.refuse()
            proxy.cut()
        figures["offline_after_cut"] = await _until(
            partial(not_listed, agent.id), 60, "link cut: far-cut reported offline at a"
        )
        for proxy in proxies:
            proxy.heal()
        figures["listed_after_restore"] = await _until(
            partial(listed, agent.id), 60, "link restored: far-cut listed at a again"
        )
        await agent.stop()
    finally:
        await bus.aclose()
        await registry.stop()
    return figures


async def main() -> None:
    cli = harness.parser(__doc__)
    cli.add_argument("--requests", type=int, default=300, help="sequential requests per figure")
    cli.add_argument("--window", type=int, default=32, help="requests in flight for throughput")
    cli.add_argument("--seconds", type=float, default=5.0, help="seconds of each throughput run")
    cli.add_argument("--delay", type=float, default=0.05, help="seconds added each way on the link")
    cli.add_argument("--interval", type=float, default=1.0, help="agents' heartbeat interval")
    cli.add_argument("--json", type=Path, default=None)
    args = cli.parse_args()
    harness.quiet_logging()
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory() as folder,
        PrivateBroker("bench-site-a", plugins=["rabbitmq_federation"]) as a,
        PrivateBroker("bench-site-b", plugins=["rabbitmq_federation"]) as b,
    ):
        print(f"two nodes up in {time.monotonic() - began:.1f} s")
        async with ChaosProxy("127.0.0.1", a.port) as to_a, ChaosProxy("127.0.0.1", b.port) as to_b:
            nodes = {"a": a, "b": b}
            exchange = await _link(nodes, {"a": to_b.url(), "b": to_a.url()}, Path(folder))
            settings = {
                site: Settings(url=nodes[site].url, exchange=exchange, site=site, peer_sites=peer)
                for site, peer in (("a", "b"), ("b", "a"))
            }
            far = FarEcho(
                agent_id="far-echo-1", settings=settings["b"], heartbeat_interval=args.interval
            )
            near = NearEcho(
                agent_id="near-echo-1", settings=settings["a"], heartbeat_interval=args.interval
            )
            await far.start()
            await near.start()
            bus = await Bus(settings["a"], agent_id="client-a").open()
            results: dict[str, Any] = {}
            try:

                async def crosses() -> bool:
                    try:
                        await bus.request("far-echo", "echo", {"text": "x"}, timeout=2)
                    except AgentBusError:  # not yet: the link is starting
                        return False
                    return True

                await _until(crosses, 60, "link up: a request from a served at b")
                print("no delay on the link:")
                results["plain"] = await _requests(bus, args.requests, args.window, args.seconds)
                for proxy in (to_a, to_b):
                    proxy.slow(args.delay)
                print(f"{args.delay * 1000:g} ms added each way on the link:")
                results["delayed"] = await _requests(bus, args.requests, args.window, args.seconds)
                for proxy in (to_a, to_b):
                    proxy.fast()
            finally:
                await bus.aclose()
                await near.stop()
                await far.stop()
            results["registry"] = await _registry_view(settings, [to_a, to_b], args.interval)
            for node in nodes.values():
                await asyncio.to_thread(node.rabbitmqctl, "clear_policy", f"{exchange}-sites")
    harness.write_json(args.json, results)


if __name__ == "__main__":
    asyncio.run(main())

"""Benchmark two sites linked by federation: what a request pays to cross, and the registry's view.

Two private RabbitMQ nodes (``rabbitmq_federation``), one per site, each loading what
``agentbus federation`` generates. An echo service at site ``b`` only, another at site ``a``
only, a client at ``a``: the p50/p99 of sequential requests and the throughput of
``--window`` in flight, local and across, over links straight to the peer, through a chaos
proxy each way (in this process, as in tests/sites), and through the proxies with ``--delay``
added each way; ``--rounds`` rounds of each, in alternating order, and their medians. Then
the registry at ``a``: how long until an agent started at ``b`` is listed, until one stopped
at ``b`` is gone (its ``agent_offline`` crosses), and until ``b``'s agents are reported
offline when the link is cut (three silent heartbeat intervals), and listed again after.
Prints figures; asserts nothing.

    PYTHONPATH=src python bench/bench_sites.py [--requests 300] [--seconds 5] [--json out.json]
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

import _harness as harness
from agentbus import Agent, AgentBusError, Settings, skill
from agentbus.bus import Bus
from agentbus.definitions import federation_definitions
from agentbus.registry import Registry
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


async def _figures(bus: Bus, service: str, args: Any) -> dict[str, Any]:
    async def call(i: int) -> None:
        await bus.request(service, "echo", {"text": "x" * 64}, timeout=30)

    latency = harness.summary(await harness.sequential(call, args.requests, warmup=20))
    rate = await harness.windowed(call, args.window, args.seconds)
    return {**latency, "per_s": rate["per_s"], "errors": rate["errors"]}


def _line(name: str, figures: dict[str, Any]) -> str:
    return (
        f"{name:22} p50 {figures['p50_us'] / 1000:7.2f} ms  p99 {figures['p99_us'] / 1000:7.2f} ms"
        f"  {figures['per_s']:6.0f} req/s"
        + (f"  errors {figures['errors']}" if figures["errors"] else "")
    )


@contextlib.asynccontextmanager
async def _team(settings: dict[str, Settings], interval: float, tag: str) -> AsyncIterator[Bus]:
    """An echo service at each site, a client at a; the link up."""
    far = FarEcho(agent_id=f"far-{tag}", settings=settings["b"], heartbeat_interval=interval)
    near = NearEcho(agent_id=f"near-{tag}", settings=settings["a"], heartbeat_interval=interval)
    await far.start()
    await near.start()
    bus = await Bus(settings["a"], agent_id=f"client-{tag}").open()
    try:

        async def crosses() -> bool:
            try:
                await bus.request("far-echo", "echo", {"text": "x"}, timeout=2)
            except AgentBusError:  # not yet: the link is starting
                return False
            return True

        await _until(crosses, 60, f"{tag}: link up, a request from a served at b")
        yield bus
    finally:
        await bus.aclose()
        await near.stop()
        await far.stop()


async def _requests(
    buses: dict[str, Bus], proxies: list[ChaosProxy], args: Any
) -> dict[str, dict[str, Any]]:
    """Rounds of each variant, local and across, in alternating order; their medians."""
    variants = ("direct", "proxied", "delayed")
    rows: dict[str, list[dict[str, Any]]] = {}
    for k in range(args.rounds):
        print(f"round {k + 1}:")
        for variant in variants[:: -1 if k % 2 else 1]:
            for proxy in proxies:
                proxy.slow(args.delay if variant == "delayed" else 0.0)
            bus = buses["direct" if variant == "direct" else "proxied"]
            for where, service in (("local", "near-echo"), ("across", "far-echo"))[
                :: -1 if k % 2 else 1
            ]:
                figures = await _figures(bus, service, args)
                rows.setdefault(f"{variant} {where}", []).append(figures)
                print("  " + _line(f"{variant} {where}", figures))
    for proxy in proxies:
        proxy.fast()
    medians = {
        name: {
            key: statistics.median(row[key] for row in runs)
            for key in ("p50_us", "p99_us", "per_s")
        }
        | {"errors": [e for row in runs for e in row["errors"]]}
        for name, runs in rows.items()
    }
    print(f"medians of {args.rounds} rounds (delayed: {args.delay * 1000:g} ms each way):")
    for name, figures in medians.items():
        print("  " + _line(name, figures))
    return medians


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
            seen = await _until(partial(listed, agent.id), 60, f"far-{run} started, listed at a")
            figures["listed"] = max(figures["listed"], seen)
            await agent.stop()
            gone = await _until(partial(not_listed, agent.id), 60, f"far-{run} stopped, gone at a")
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
    cli.add_argument("--rounds", type=int, default=3, help="rounds of every variant")
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
            # Two teams: one whose links go straight to the peer, one's through the proxies.
            linked = {
                "direct": await _link(nodes, {"a": b.url, "b": a.url}, Path(folder)),
                "proxied": await _link(nodes, {"a": to_b.url(), "b": to_a.url()}, Path(folder)),
            }
            settings = {
                name: {
                    site: Settings(
                        url=nodes[site].url, exchange=exchange, site=site, peer_sites=peer
                    )
                    for site, peer in (("a", "b"), ("b", "a"))
                }
                for name, exchange in linked.items()
            }
            results: dict[str, Any] = {}
            async with (
                _team(settings["direct"], args.interval, "direct") as direct,
                _team(settings["proxied"], args.interval, "proxied") as proxied,
            ):
                results["requests"] = await _requests(
                    {"direct": direct, "proxied": proxied}, [to_a, to_b], args
                )
            results["registry"] = await _registry_view(
                settings["proxied"], [to_a, to_b], args.interval
            )
            for node in nodes.values():
                for exchange in linked.values():
                    await asyncio.to_thread(node.rabbitmqctl, "clear_policy", f"{exchange}-sites")
    harness.write_json(args.json, results)


if __name__ == "__main__":
    asyncio.run(main())

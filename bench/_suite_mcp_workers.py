"""``agentbus mcp`` over HTTP with 1, 2 and 4 processes, against the MCP SDK's own server.

Registry and ``Echo`` processes; the SDK's server with one ``echo`` tool and no bus
(``_bench_mcp_echo.py``: the ceiling of the transport); then ``agentbus mcp --transport
http`` as each of ``cfg.servers`` (label: workers; one process keeps sessions, several are
stateless), each started, measured and stopped in turn, the SDK's server measured again
between them (its median is the ratios' baseline). The client is the SDK's in the
2026-07-28 era (one HTTP exchange per call): ``count`` tool calls in a row (p50), then
``workers`` concurrent callers for ``seconds`` (calls/s, and the CPU µs a call costs each
process meanwhile). The direct bus request is the floor of the latency.

``python bench/_suite_mcp_workers.py [--count N] [--seconds S] [--only 1,2,4]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace as Config
from typing import Any

import _harness as harness
import agentbus
from _suite_gateway import echo_team, echo_up, family, free_port, ratios, source
from _suite_mcp import ECHO_SERVER, caller, http_client
from agentbus import Settings

BARE = "MCP SDK server alone"
DEFAULT_SERVERS = {
    "agentbus mcp: 1 process": 1,
    "agentbus mcp: 2 processes, stateless": 2,
    "agentbus mcp: 4 processes, stateless": 4,
}
ERA = "2026-07-28"


async def measure_calls(
    call: Callable[[int], Awaitable[None]], cfg: Config, roles: dict[str, list[int]]
) -> dict[str, Any]:
    """p50 of ``count`` calls in a row; calls/s of ``workers`` callers and CPU µs a call."""
    figures = harness.summary(await harness.sequential(call, cfg.count, warmup=50))
    before = harness.cpu_snapshot(roles)
    load = await harness.windowed(call, cfg.workers, cfg.seconds)
    spent = harness.cpu_split(before, harness.cpu_snapshot(roles))
    if load["errors"]:
        raise RuntimeError(f"calls failed: {load['errors']}")
    cpu = {f"cpu µs/call, {role}": seconds / load["count"] * 1e6 for role, seconds in spent.items()}
    cpu["cpu µs/call, client"] = load["cpu_s"] / load["count"] * 1e6
    return figures | {"calls_per_s": load["per_s"]} | cpu


async def listening(fleet: harness.Fleet, port: int, what: str) -> None:
    async def accepts() -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        await writer.wait_closed()
        return True

    await fleet.wait(accepts, what)


async def ready_tool(fleet: harness.Fleet, client: Any, what: str) -> None:
    async def listed() -> bool:
        with contextlib.suppress(Exception):
            return "echo__echo" in {tool.name for tool in (await client.list_tools()).tools}
        return False

    await fleet.wait(listed, what)


async def measure(fleet: harness.Fleet, ctx: Config, cfg: Config) -> dict[str, Any]:
    assert fleet.url is not None
    bus = agentbus.Bus(
        Settings(url=fleet.url, exchange=ctx.exchange), agent_id=f"{ctx.exchange}-cli"
    )
    figures: dict[str, dict[str, Any]] = {}
    bare_rounds: list[dict[str, Any]] = []
    broker = harness.broker_pid(fleet.url)
    bus_side = {"echo agent": fleet.pids("agent")} | ({"broker": [broker]} if broker else {})
    async with bus:

        async def direct(n: int) -> None:
            assert (await bus.request("echo", "echo", {"n": n}, timeout=30)).result == n

        await fleet.wait(lambda: echo_up(bus), "the echo agent")
        figures["direct bus"] = harness.summary(await harness.sequential(direct, cfg.count, 50))
        figures["direct bus"]["calls_per_s"] = (
            await harness.windowed(direct, cfg.workers, cfg.seconds)
        )["per_s"]

        async def bare() -> None:
            await listening(fleet, ctx.bare_port, BARE)
            async with http_client(ctx.bare, ctx.key, ERA) as client:
                await ready_tool(fleet, client, BARE)
                roles = {"server": fleet.pids("sdk")}
                bare_rounds.append(await measure_calls(caller(client), cfg, roles))

        await bare()
        for label, workers in cfg.servers.items():
            port = free_port()
            argv = [*ctx.cli, "mcp", "--transport", "http", "--port", str(port)]
            argv += ["--keys", ctx.keys]
            argv += ["--workers", str(workers)] if workers > 1 else []
            with source(cfg.before if label.startswith("agentbus mcp before") else None):
                # uvloop where installed, as the SDK's server runs under uvicorn
                proc = fleet.spawn("mcp", label, argv, env={"AGENTBUS_LOOP": "auto"})
            try:
                await listening(fleet, port, label)
                async with http_client(f"http://127.0.0.1:{port}/mcp", ctx.key, ERA) as client:
                    await ready_tool(fleet, client, label)
                    roles = {"server": family(proc.pid)} | bus_side
                    figures[label] = await measure_calls(caller(client), cfg, roles)
            finally:
                harness.stop([proc])
                fleet.procs.remove(proc)
            await bare()
    figures[BARE] = {key: statistics.median(row[key] for row in bare_rounds)
                     for key in bare_rounds[0]}  # fmt: skip
    figures[BARE]["rounds"] = len(bare_rounds)
    return figures


def run_mcp_workers(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    exchange, key = f"bench-mcpw-{uuid.uuid4().hex[:8]}", f"bench-key-{uuid.uuid4().hex}"
    servers = getattr(cfg, "servers", DEFAULT_SERVERS)
    cfg.before = getattr(cfg, "before", None)
    with tempfile.TemporaryDirectory() as tmp, harness.Fleet(url) as fleet:
        (keys := Path(tmp, "keys.json")).write_text(json.dumps({key: "bench"}))
        cli = echo_team(fleet, url, exchange)
        bare_port = free_port()
        fleet.spawn("sdk", "sdk", [sys.executable, ECHO_SERVER, "--http", str(bare_port)])
        ctx = Config(exchange=exchange, key=key, keys=str(keys), cli=cli,
                     bare=f"http://127.0.0.1:{bare_port}/mcp", bare_port=bare_port)  # fmt: skip
        config = Config(**{**vars(cfg), "servers": servers})
        figures = asyncio.run(measure(fleet, ctx, config))
    params = {k: v for k, v in vars(cfg).items() if k not in ("servers", "before")}
    return {"params": params | {"cpus": os.cpu_count(), "era": ERA}, "figures": figures,
            "ratios": ratios(figures, BARE)}  # fmt: skip


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--only", default="", help="processes: 1,2,4")
    parser.add_argument(
        "--before", metavar="SRC", help="also a server importing agentbus from SRC (1 process)"
    )
    args = parser.parse_args()
    harness.quiet_logging()
    harness.raise_on_sigterm()
    only = {int(s) for s in args.only.split(",") if s.strip()}
    servers = {k: v for k, v in DEFAULT_SERVERS.items() if not only or v in only}
    if args.before:
        servers = {f"agentbus mcp before ({args.before}): 1 process": 1, **servers}
    cfg = Config(count=args.count, workers=args.workers, seconds=args.seconds,
                 servers=servers, before=args.before)  # fmt: skip
    start = time.monotonic()
    result = run_mcp_workers(args.url, cfg, lambda text: print(text, file=sys.stderr))
    result["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()

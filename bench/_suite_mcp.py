"""What an MCP tool call costs over a plain bus request, for suite.py (``--only mcp``).

Registry and ``Echo`` processes; ``agentbus mcp`` over stdio (started by the SDK's client,
as a desktop client starts it) and over Streamable HTTP (a process of its own, with a
bearer key). Each path calls ``echo`` ``count`` times in a row, after a warm-up, with the
official SDK's client in both protocol eras (``legacy``: the 2025 handshake; ``2026``:
2026-07-28, one HTTP exchange per call); the direct bus request is the baseline, and the
SDK's own server with an ``echo`` tool and no bus (``_bench_mcp_echo.py``) the floor of the
MCP transports. Then ``workers`` concurrent callers for ``seconds`` on the direct bus and
on HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace as Config
from typing import Any

import _harness as harness
import agentbus
from agentbus import Settings

ERAS = {"legacy": "legacy", "2026": "2026-07-28"}
"""Path label: the SDK client's ``mode``."""


ECHO_SERVER = str(Path(__file__).with_name("_bench_mcp_echo.py"))


@contextlib.asynccontextmanager
async def stdio_client(args: list[str], env: dict[str, str], mode: str) -> AsyncIterator[Any]:
    from mcp import Client, StdioServerParameters

    server = StdioServerParameters(command=sys.executable, args=args, env={**os.environ, **env})
    async with Client(server, mode=mode) as client:
        yield client


@contextlib.asynccontextmanager
async def http_client(endpoint: str, key: str, mode: str) -> AsyncIterator[Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx2.Limits(max_connections=64)
    async with (
        httpx2.AsyncClient(headers=headers, limits=limits, timeout=30) as http,
        Client(streamable_http_client(endpoint, http_client=http), mode=mode) as client,
    ):
        yield client


def caller(client: Any) -> Callable[[int], Awaitable[None]]:
    async def call(n: int) -> None:
        result = await client.call_tool("echo__echo", {"n": n})
        assert result.structured_content == {"result": n}, result

    return call


async def listed(client: Any, fleet: harness.Fleet) -> None:
    async def ready() -> bool:
        return "echo__echo" in {tool.name for tool in (await client.list_tools()).tools}

    await fleet.wait(ready, "the echo tool")


async def measure(
    fleet: harness.Fleet, endpoints: dict[str, str], key: str, exchange: str, cfg: Config
) -> dict:
    assert fleet.url is not None
    figures: dict[str, dict[str, float]] = {}
    loads: dict[str, Callable[[int], Awaitable[None]]] = {}
    bus = agentbus.Bus(Settings(url=fleet.url, exchange=exchange), agent_id=f"{exchange}-cli")
    async with bus, contextlib.AsyncExitStack() as stack:

        async def direct(n: int) -> None:
            assert (await bus.request("echo", "echo", {"n": n}, timeout=30)).result == n

        paths: dict[str, Callable[[int], Awaitable[None]]] = {"direct bus": direct}
        bus_env = {"AGENTBUS_URL": fleet.url, "AGENTBUS_EXCHANGE": exchange,
                   "AGENTBUS_LOG_LEVEL": "warning"}  # fmt: skip
        for label, mode in ERAS.items():
            clients = {
                f"MCP stdio, {label}": stdio_client(["-m", "agentbus", "mcp"], bus_env, mode),
                f"MCP HTTP, {label}": http_client(endpoints["team"], key, mode),
                f"SDK server, no bus: stdio, {label}": stdio_client([ECHO_SERVER], {}, mode),
                f"SDK server, no bus: HTTP, {label}": http_client(endpoints["echo"], key, mode),
            }
            for path, opening in clients.items():
                client = await stack.enter_async_context(opening)
                await listed(client, fleet)
                paths[path] = caller(client)
            loads[f"MCP HTTP, {label}"] = paths[f"MCP HTTP, {label}"]
        for path, call in paths.items():
            figures[path] = harness.summary(await harness.sequential(call, cfg.count, warmup=20))
        for path, call in {"direct bus": direct, **loads}.items():
            figures[path]["calls_per_s"] = (await harness.windowed(call, cfg.workers, cfg.seconds))[
                "per_s"
            ]
    direct_p50 = figures["direct bus"]["p50_us"]
    for row in figures.values():
        row["p50 overhead µs"] = row["p50_us"] - direct_p50
    ratios = {f"p50 {path} / direct": row["p50_us"] / direct_p50
              for path, row in figures.items() if path != "direct bus"}  # fmt: skip
    return {"params": vars(cfg), "figures": figures, "ratios": ratios}


def run_mcp(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    exchange, key = f"bench-mcp-{uuid.uuid4().hex[:8]}", f"bench-key-{uuid.uuid4().hex}"
    port, echo_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp, harness.Fleet(url) as fleet:
        (keys := Path(tmp, "keys.json")).write_text(json.dumps({key: "bench"}))
        fleet.topology(exchange, ("registry", "echo"), ("registry-b", "echo-b", f"{exchange}-cli"))
        cli, env = harness.agentbus_cli(url, exchange), {"AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5"}
        for role, argv in (
            ("registry", ["registry", "--id", "registry-b", "--heartbeat", "0.5"]),
            ("agent", ["run", "_bench_agents:Echo", "--id", "echo-b", "--heartbeat", "0.5"]),
            ("mcp", ["mcp", "--transport", "http", "--port", str(port), "--keys", str(keys)]),
        ):
            fleet.spawn(role, role, [*cli, *argv], env=env)
        fleet.spawn("echo", "echo", [sys.executable, ECHO_SERVER, "--http", str(echo_port)])
        endpoints = {
            name: f"http://127.0.0.1:{p}/mcp" for name, p in (("team", port), ("echo", echo_port))
        }
        return asyncio.run(measure(fleet, endpoints, key, exchange, cfg))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port

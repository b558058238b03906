"""The protocol faces against their SDKs' own servers and a direct bus request, for suite.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace as Config
from typing import Any

import _harness as harness
import agentbus

SERVERS = str(harness.BENCH_DIR / "_bench_agents.py")  # the SDKs' echo servers, no bus
SDK_A2A = "SDK server alone, tracing off"
SDK_MCP = "MCP SDK server alone"
FAST = {"AGENTBUS_LOOP": "auto"}  # uvloop, as uvicorn runs the SDKs' servers
GATEWAYS = {  # label: worker processes, tasks in Redis
    "gateway: 1 process, tasks in memory": (1, False),
    "gateway: 1 process, tasks in Redis": (1, True),
    "gateway: 2 processes, tasks in Redis": (2, True),
    "gateway: 4 processes, tasks in Redis": (4, True),
}
MCP_SERVERS = {"agentbus mcp: 1 process": 1, "agentbus mcp: 2 processes, stateless": 2,
               "agentbus mcp: 4 processes, stateless": 4}  # fmt: skip
ERAS = {"legacy": "legacy", "2026": "2026-07-28"}  # path label: the SDK client's ``mode``
ERA = ERAS["2026"]
Call = harness.Call
Session = Callable[[int], contextlib.AbstractAsyncContextManager[Call]]


async def measure_calls(call: Call, cfg: Config, roles: dict[str, list[int]]) -> dict[str, Any]:
    """p50 of calls in a row; calls/s of concurrent callers, and each role's CPU µs a call."""
    figures = harness.summary(await harness.sequential(call, cfg.count, warmup=50))
    before = harness.cpu_snapshot(roles)
    load = await harness.windowed(call, cfg.workers, cfg.seconds)
    spent = harness.cpu_split(before, harness.cpu_snapshot(roles)) | {"client": load["cpu_s"]}
    if load["errors"]:
        raise RuntimeError(f"calls failed: {load['errors']}")
    cpu = {f"cpu µs/call, {role}": seconds / load["count"] * 1e6 for role, seconds in spent.items()}
    return figures | {"calls_per_s": load["per_s"]} | cpu


def in_team(url: str, cfg: Config, name: str, run: Callable[[Config], Awaitable[dict]]) -> dict:
    """``run(team)``: a registry, an ``Echo`` agent, a key file, a bus; the direct request timed."""
    exchange, key = harness.exchange_name(name), f"bench-key-{uuid.uuid4().hex}"
    with tempfile.TemporaryDirectory() as tmp, harness.Fleet(url) as fleet:
        (keys := Path(tmp) / "keys.json").write_text(json.dumps({key: "bench"}))
        fleet.topology(exchange, ("registry", "echo"), ("registry-b", "echo-b", f"{exchange}-cli"))
        env = {"AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5"}
        fleet.agentbus(exchange, "registry", "--heartbeat", "0.5", "--id", "registry-b", env=env)
        fleet.agentbus(exchange, "run", "_bench_agents:Echo", "--heartbeat", "0.5", "--id",
                       "echo-b", role="agent", env=env)  # fmt: skip
        broker = harness.broker_pid(url)
        bus_side = {"echo agent": fleet.pids("agent")} | ({"broker": [broker]} if broker else {})

        async def with_team() -> dict[str, Any]:
            async with agentbus.connect(url, exchange=exchange, agent_id=f"{exchange}-cli") as bus:

                async def direct(n: int) -> None:
                    assert (await bus.request("echo", "echo", {"n": n}, timeout=30)).result == n

                await fleet.wait(lambda: harness.answers(bus, "echo"), "the echo agent")
                figures = {"direct bus": await measure_calls(direct, cfg, {})}
                team = Config(fleet=fleet, exchange=exchange, key=key, keys=str(keys),
                              figures=figures, direct=direct, bus_side=bus_side)  # fmt: skip
                return await run(team)

        return asyncio.run(with_team())


async def in_turn(team: Config, cfg: Config, variants: dict[str, tuple[list[str], dict[str, str]]],
                  session: Session, bare: Callable[[], Awaitable[dict[str, Any]]],
                  baseline: str, before: tuple[str, list[str]]) -> dict[str, Any]:  # fmt: skip
    """Each variant (``--before SRC``'s first) started, measured and stopped; ``bare`` between."""
    if src := cfg.before:
        face, args = before
        first = {f"{face} before ({src}): 1 process": (args, FAST | {"PYTHONPATH": src})}
        variants = first | variants
    rounds = [await bare()]
    for label, (argv, env) in variants.items():
        port = harness.free_port()
        argv = [*argv, "--port", str(port)]
        proc = team.fleet.agentbus(team.exchange, *argv, role="face", name=label, env=env)
        try:
            async with session(port) as call:
                roles = {"server": harness.family(proc.pid)} | team.bus_side
                if (pid := harness.redis_pid(env.get("AGENTBUS_GATEWAY_TASK_STORE"))) is not None:
                    roles["redis"] = [pid]
                team.figures[label] = await measure_calls(call, cfg, roles)
        finally:
            team.fleet.retire(proc)
        rounds.append(await bare())
    team.figures[baseline] = {key: statistics.median(row[key] for row in rounds)
                              for key in rounds[0]} | {"rounds": len(rounds)}  # fmt: skip
    return {"params": {key: value for key, value in vars(cfg).items() if key != "before"}
            | {"cpus": os.cpu_count()}, "figures": team.figures,
            "ratios": ratios(team.figures, baseline)}  # fmt: skip


def ratios(figures: dict[str, dict[str, Any]], bare: str) -> dict[str, float]:
    """Each variant against the SDK's server alone (``bare``): throughput, p50, server CPU."""
    base, direct = figures[bare], figures["direct bus"]
    out: dict[str, float] = {}
    for label, row in figures.items():
        if label in (bare, "direct bus"):
            continue
        out[f"throughput, {label} / SDK alone"] = row["calls_per_s"] / base["calls_per_s"]
        out[f"p50, {label} / SDK alone"] = row["p50_us"] / base["p50_us"]
        if (cpu := row.get("cpu µs/call, server")) is not None:
            out[f"server CPU per call, {label} / SDK alone"] = cpu / base["cpu µs/call, server"]
        row["p50 over the direct bus µs"] = row["p50_us"] - direct["p50_us"]
    return out


def run_gateway(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    import httpx

    sdk = {SDK_A2A: ("false", []), "SDK server alone, tracing on": ("true", []),
           "SDK server alone, tracing off, its wrappers out": ("false",
                                                               ["--unwrapped"])}  # fmt: skip
    ports = {label: harness.free_port() for label in sdk}
    store = {"AGENTBUS_GATEWAY_TASK_STORE": harness.redis_url()}

    async def measure(team: Config) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {team.key}", "A2A-Version": "1.0"}
        for label, (traced, more) in sdk.items():
            argv = [sys.executable, SERVERS, "a2a", str(ports[label]), *more]
            env = {"OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": traced}
            team.fleet.spawn("sdk", label, argv, env=env)
        limits = httpx.Limits(max_connections=cfg.workers + 4)
        async with httpx.AsyncClient(headers=headers, timeout=30, limits=limits) as http:

            @contextlib.asynccontextmanager
            async def session(port: int, base: str = "/agents/echo") -> AsyncIterator[Call]:
                async def card() -> bool:
                    with contextlib.suppress(httpx.HTTPError):
                        url = f"http://127.0.0.1:{port}{base}/.well-known/agent-card.json"
                        return (await http.get(url)).status_code == 200
                    return False

                async def call(n: int) -> None:
                    message = {
                        "messageId": str(uuid.uuid4()),
                        "role": "ROLE_USER",
                        "parts": [{"data": {"n": n}}],
                        "metadata": {"skill": "echo"},
                    }
                    body = {"jsonrpc": "2.0", "id": n, "method": "SendMessage",
                            "params": {"message": message}}  # fmt: skip
                    reply = (await http.post(f"http://127.0.0.1:{port}{base}/", json=body)).json()
                    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

                await team.fleet.wait(card, f"the A2A server on {port}")
                yield call

            async def alone(label: str) -> dict[str, Any]:
                async with session(ports[label], "") as call:
                    pid = next(p.pid for p in team.fleet.procs if p.name == label)
                    return await measure_calls(call, cfg, {"server": [pid]})

            for label in list(sdk)[1:]:
                team.figures[label] = await alone(label)
            argv = ["gateway", "--keys", team.keys]
            variants = {label: ([*argv, *(["--workers", str(k)] if k > 1 else [])],
                                FAST | (store if in_redis else {}))
                        for label, (k, in_redis) in GATEWAYS.items()}  # fmt: skip
            return await in_turn(
                team, cfg, variants, session, lambda: alone(SDK_A2A), SDK_A2A, ("gateway", argv)
            )

    return in_team(url, cfg, "gw", measure)


@contextlib.asynccontextmanager
async def mcp_client(where: str | list[str], mode: str, key: str = "",
                     env: dict[str, str] | None = None) -> AsyncIterator[Call]:  # fmt: skip
    """An MCP SDK client of ``where`` (a URL, or a stdio server's arguments) once it serves."""
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    async with contextlib.AsyncExitStack() as stack:
        if isinstance(where, list):
            server = StdioServerParameters(command=sys.executable, args=where,
                                           env={**os.environ, **(env or {})})  # fmt: skip
        else:
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {key}"}, timeout=30,
                limits=httpx2.Limits(max_connections=64)))  # fmt: skip
            server = streamable_http_client(where, http_client=http)
        client = await stack.enter_async_context(Client(server, mode=mode))
        async with asyncio.timeout(harness.READY_TIMEOUT):
            while "echo__echo" not in {t.name for t in (await client.list_tools()).tools}:  # noqa: ASYNC110
                await asyncio.sleep(0.2)

        async def call(n: int) -> None:
            result = await client.call_tool("echo__echo", {"n": n})
            assert result.structured_content == {"result": n}, result

        yield call


async def listening(fleet: harness.Fleet, port: int) -> None:
    def accepts() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    await fleet.wait(accepts, f"a server on {port}")


def run_mcp(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    port, echo_port = harness.free_port(), harness.free_port()

    async def measure(team: Config) -> dict[str, Any]:
        argv = ["mcp", "--transport", "http", "--port", str(port), "--keys", team.keys]
        env = {"AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5"}
        team.fleet.agentbus(team.exchange, *argv, role="mcp", name="mcp", env=env)
        echo = [sys.executable, SERVERS, "mcp", "--http", str(echo_port)]
        team.fleet.spawn("echo", "echo", echo)
        for p in (port, echo_port):
            await listening(team.fleet, p)
        figures, loads = team.figures, {"direct bus": team.direct}
        bus_env = {"AGENTBUS_URL": url, "AGENTBUS_EXCHANGE": team.exchange,
                   "AGENTBUS_LOG_LEVEL": "warning"}  # fmt: skip
        team_http, echo_http = (f"http://127.0.0.1:{p}/mcp" for p in (port, echo_port))
        async with contextlib.AsyncExitStack() as stack:
            for label, mode in ERAS.items():
                for path, where, env in (
                    (f"MCP stdio, {label}", ["-m", "agentbus", "mcp"], bus_env),
                    (f"MCP HTTP, {label}", team_http, None),
                    (f"SDK server, no bus: stdio, {label}", [SERVERS, "mcp"], None),
                    (f"SDK server, no bus: HTTP, {label}", echo_http, None),
                ):
                    client = mcp_client(where, mode, team.key, env)
                    call = await stack.enter_async_context(client)
                    samples = await harness.sequential(call, cfg.count, warmup=20)
                    figures[path] = harness.summary(samples)
                    if path.startswith("MCP HTTP"):
                        loads[path] = call
            for path, call in loads.items():
                load = await harness.windowed(call, cfg.workers, cfg.seconds)
                figures[path]["calls_per_s"] = load["per_s"]
        direct_p50 = figures["direct bus"]["p50_us"]
        for row in figures.values():
            row["p50 overhead µs"] = row["p50_us"] - direct_p50
        ratios = {f"p50 {path} / direct": row["p50_us"] / direct_p50
                  for path, row in figures.items() if path != "direct bus"}  # fmt: skip
        return {"params": vars(cfg), "figures": figures, "ratios": ratios}

    return in_team(url, cfg, "mcp", measure)


def run_mcp_workers(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    bare_port = harness.free_port()

    async def measure(team: Config) -> dict[str, Any]:
        team.fleet.spawn("sdk", "sdk", [sys.executable, SERVERS, "mcp", "--http", str(bare_port)])

        @contextlib.asynccontextmanager
        async def session(port: int) -> AsyncIterator[Call]:
            await listening(team.fleet, port)
            async with mcp_client(f"http://127.0.0.1:{port}/mcp", ERA, team.key) as call:
                yield call

        async def alone() -> dict[str, Any]:
            async with session(bare_port) as call:
                return await measure_calls(call, cfg, {"server": team.fleet.pids("sdk")})

        argv = ["mcp", "--transport", "http", "--keys", team.keys]
        variants = {label: ([*argv, *(["--workers", str(k)] if k > 1 else [])], FAST)
                    for label, k in MCP_SERVERS.items()}  # fmt: skip
        result = await in_turn(team, cfg, variants, session, alone, SDK_MCP, ("agentbus mcp", argv))
        result["params"]["era"] = ERA
        return result

    return in_team(url, cfg, "mcpw", measure)

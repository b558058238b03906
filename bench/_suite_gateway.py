"""The A2A gateway against the a2a-sdk's own server and a direct bus request, for suite.py.

Registry and ``Echo`` processes; the SDK's server alone with an echo executor
(``_bench_a2a_echo.py``: the same task events, no bus), its OpenTelemetry spans off, on, and
off with its no-op wrappers taken out (as the gateway does); then ``agentbus gateway`` as
each variant of ``cfg.gateways`` (label: workers, task store): one process with its
in-memory store, and 1, 2, 4 worker processes behind one address sharing their tasks in
Redis (``scripts/ensure-redis``'s, or ``$AGENTBUS_DEDUP_URL``). Each HTTP path answers
``count`` blocking ``SendMessage`` calls in a row (p50), then ``workers`` concurrent callers
for ``seconds`` (calls/s, and the CPU µs a call costs each process meanwhile); the direct
bus request is the floor of the gateway's latency, the bare SDK the ceiling of its
throughput. Every variant is started, measured and stopped in turn, the bare SDK (spans
off) measured again between them: its median is the ratios' baseline (the host is shared).

``python bench/_suite_gateway.py [--count N] [--seconds S] [--only memory-1,redis-2,...]``
runs it alone and prints the figures as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace as Config
from typing import Any
from urllib.parse import urlsplit

import _harness as harness
import agentbus
from agentbus import Settings

BARE_SERVER = str(Path(__file__).with_name("_bench_a2a_echo.py"))
BARE = "SDK server alone, tracing off"
BARE_TRACED = "SDK server alone, tracing on"
BARE_UNWRAPPED = "SDK server alone, tracing off, its wrappers out"
DEFAULT_GATEWAYS = {
    "gateway: 1 process, tasks in memory": (1, "memory"),
    "gateway: 1 process, tasks in Redis": (1, "redis"),
    "gateway: 2 processes, tasks in Redis": (2, "redis"),
    "gateway: 4 processes, tasks in Redis": (4, "redis"),
}
"""Label: (worker processes, task store); ``--only`` names them ``memory-1``, ``redis-2``..."""
DEFAULT_REDIS = "redis://127.0.0.1:6390/0"


def redis_url() -> str:
    url = os.environ.get("AGENTBUS_DEDUP_URL") or os.environ.get("AGENTBUS_TEST_DEDUP_URL")
    if url:
        return url
    script = Path(__file__).resolve().parents[1] / "scripts" / "ensure-redis"
    subprocess.run([str(script)], check=True, capture_output=True, timeout=120)
    return DEFAULT_REDIS


def redis_pid(url: str) -> int | None:
    """The local redis-server serving ``url``'s port, to read its CPU; None if not found."""
    port = urlsplit(url).port or 6379
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            words = cmdline.read_bytes().split(b"\0")
            if (
                words
                and b"redis-server" in words[0]
                and any(f":{port}".encode() in word or word == str(port).encode() for word in words)
            ):
                return int(cmdline.parent.name)
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rpc_body(n: int) -> dict[str, Any]:
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": {"n": n}}],
               "metadata": {"skill": "echo"}}  # fmt: skip
    return {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message}}


def family(pid: int) -> list[int]:
    """``pid`` and its descendants (a gateway's worker processes)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
            parents.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(current := todo.pop())
        todo += parents.get(current, [])
    return found


async def measure_http(
    http: Any, endpoint: str, cfg: Config, roles: dict[str, list[int]]
) -> dict[str, Any]:
    """p50 of ``count`` calls in a row; calls/s of ``workers`` callers, and the CPU µs a call
    costs each of ``roles`` (processes) meanwhile."""

    async def call(n: int) -> None:
        reply = (await http.post(endpoint, json=rpc_body(n))).json()
        assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply

    figures = harness.summary(await harness.sequential(call, cfg.count, warmup=50))
    before = harness.cpu_snapshot(roles)
    load = await harness.windowed(call, cfg.workers, cfg.seconds)
    spent = harness.cpu_split(before, harness.cpu_snapshot(roles))
    if load["errors"]:
        raise RuntimeError(f"{endpoint}: {load['errors']}")
    cpu = {f"cpu µs/call, {role}": seconds / load["count"] * 1e6 for role, seconds in spent.items()}
    cpu["cpu µs/call, client"] = load["cpu_s"] / load["count"] * 1e6
    return figures | {"calls_per_s": load["per_s"]} | cpu


async def ready(fleet: harness.Fleet, http: Any, url: str, what: str) -> None:
    import httpx

    async def answers() -> bool:
        with contextlib.suppress(httpx.HTTPError, json.JSONDecodeError, KeyError):
            return (await http.get(url)).status_code == 200
        return False

    await fleet.wait(answers, what)


async def measure(fleet: harness.Fleet, ctx: Config, cfg: Config) -> dict[str, Any]:
    import httpx

    assert fleet.url is not None
    headers = {"Authorization": f"Bearer {ctx.key}", "A2A-Version": "1.0"}
    limits = httpx.Limits(max_connections=cfg.workers + 4)
    settings = Settings(url=fleet.url, exchange=ctx.exchange)
    bus = agentbus.Bus(settings, agent_id=f"{ctx.exchange}-cli")
    figures: dict[str, dict[str, Any]] = {}
    bare_rounds: list[dict[str, Any]] = []
    async with bus, httpx.AsyncClient(headers=headers, timeout=30, limits=limits) as http:

        async def direct(n: int) -> None:
            assert (await bus.request("echo", "echo", {"n": n}, timeout=30)).result == n

        await fleet.wait(lambda: echo_up(bus), "the echo agent")
        figures["direct bus"] = harness.summary(await harness.sequential(direct, cfg.count, 50))
        load = await harness.windowed(direct, cfg.workers, cfg.seconds)
        figures["direct bus"]["calls_per_s"] = load["per_s"]

        broker = harness.broker_pid(fleet.url)
        bus_side = {"echo agent": fleet.pids("agent")} | ({"broker": [broker]} if broker else {})

        async def bare() -> None:
            await ready(fleet, http, f"{ctx.bare}/.well-known/agent-card.json", BARE)
            roles = {"server": fleet.pids("sdk")[:1]}
            bare_rounds.append(await measure_http(http, f"{ctx.bare}/", cfg, roles))

        await bare()
        for label, k, base in ((BARE_TRACED, 1, ctx.traced), (BARE_UNWRAPPED, 2, ctx.unwrapped)):
            await ready(fleet, http, f"{base}/.well-known/agent-card.json", label)
            roles = {"server": fleet.pids("sdk")[k : k + 1]}
            figures[label] = await measure_http(http, f"{base}/", cfg, roles)
        for label, (workers, store) in cfg.gateways.items():
            port = free_port()
            argv = [*ctx.cli, "gateway", "--port", str(port), "--keys", ctx.keys]
            argv += ["--workers", str(workers)] if workers > 1 else []
            env = {"AGENTBUS_GATEWAY_TASK_STORE": ctx.redis} if store == "redis" else {}
            env["AGENTBUS_LOOP"] = "auto"  # uvloop where installed, as uvicorn runs the SDK's
            with source(cfg.before if store == "before" else None):
                proc = fleet.spawn("gateway", label, argv, env=env)
            base = f"http://127.0.0.1:{port}"
            try:
                await ready(fleet, http, f"{base}/agents/echo/.well-known/agent-card.json", label)
                roles = {"server": family(proc.pid)} | bus_side
                if store == "redis" and (pid := redis_pid(ctx.redis)) is not None:
                    roles["redis"] = [pid]
                figures[label] = await measure_http(http, f"{base}/agents/echo/", cfg, roles)
            finally:
                harness.stop([proc])
                fleet.procs.remove(proc)
            await bare()
    figures[BARE] = {key: statistics.median(row[key] for row in bare_rounds)
                     for key in bare_rounds[0]}  # fmt: skip
    figures[BARE]["rounds"] = len(bare_rounds)
    return figures


@contextlib.contextmanager
def source(src: str | None) -> Iterator[None]:
    """A process started in the block imports agentbus from ``src`` (code before a change)."""
    if src is None:
        yield
        return
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src
    try:
        yield
    finally:
        if previous is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = previous


def echo_team(fleet: harness.Fleet, url: str, exchange: str) -> list[str]:
    """Start a registry and an ``Echo`` agent on ``exchange``; return the agentbus command."""
    fleet.topology(exchange, ("registry", "echo"), ("registry-b", "echo-b", f"{exchange}-cli"))
    cli, env = harness.agentbus_cli(url, exchange), {"AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5"}
    for role, argv in (
        ("registry", ["registry", "--id", "registry-b", "--heartbeat", "0.5"]),
        ("agent", ["run", "_bench_agents:Echo", "--id", "echo-b", "--heartbeat", "0.5"]),
    ):
        fleet.spawn(role, role, [*cli, *argv], env=env)
    return cli


async def echo_up(bus: agentbus.Bus) -> bool:
    """Whether the echo agent answers."""
    try:
        await bus.request("echo", "echo", {"n": 0}, timeout=2)
    except agentbus.AgentBusError:
        return False
    return True


def ratios(figures: dict[str, dict[str, Any]], bare: str = BARE) -> dict[str, float]:
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
    exchange, key = f"bench-gw-{uuid.uuid4().hex[:8]}", f"bench-key-{uuid.uuid4().hex}"
    gateways = getattr(cfg, "gateways", DEFAULT_GATEWAYS)
    cfg.before = getattr(cfg, "before", None)
    shared = any(store == "redis" for _, store in gateways.values())
    with tempfile.TemporaryDirectory() as tmp, harness.Fleet(url) as fleet:
        (keys := Path(tmp, "keys.json")).write_text(json.dumps({key: "bench"}))
        cli = echo_team(fleet, url, exchange)
        ports = free_port(), free_port(), free_port()
        for port, traced, more in zip(
            ports, ("false", "true", "false"), ([], [], ["--unwrapped"]), strict=True
        ):
            fleet.spawn("sdk", f"sdk-{traced}{''.join(more)}",
                        [sys.executable, BARE_SERVER, str(port), *more],
                        env={"OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": traced})  # fmt: skip
        ctx = Config(
            exchange=exchange,
            key=key,
            keys=str(keys),
            cli=cli,
            redis=redis_url() if shared else "",
            bare=f"http://127.0.0.1:{ports[0]}",
            traced=f"http://127.0.0.1:{ports[1]}",
            unwrapped=f"http://127.0.0.1:{ports[2]}",
        )
        config = Config(**{**vars(cfg), "gateways": gateways})
        figures = asyncio.run(measure(fleet, ctx, config))
    params = {k: v for k, v in vars(cfg).items() if k not in ("gateways", "before")}
    return {"params": params | {"cpus": os.cpu_count()}, "figures": figures,
            "ratios": ratios(figures)}  # fmt: skip


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--only", default="", help="gateways: memory-1,redis-1,redis-2,redis-4")
    parser.add_argument(
        "--before", metavar="SRC", help="also a gateway importing agentbus from SRC (1 process)"
    )
    args = parser.parse_args()
    harness.quiet_logging()
    harness.raise_on_sigterm()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    gateways = {label: (workers, store) for label, (workers, store) in DEFAULT_GATEWAYS.items()
                if not only or f"{store}-{workers}" in only}  # fmt: skip
    if args.before:
        gateways = {f"gateway before ({args.before}): 1 process": (1, "before"), **gateways}
    cfg = Config(count=args.count, workers=args.workers, seconds=args.seconds,
                 gateways=gateways, before=args.before)  # fmt: skip
    start = time.monotonic()
    result = run_gateway(args.url, cfg, lambda text: print(text, file=sys.stderr))
    result["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()

"""Benchmark the A2A gateway: its latency overhead over a direct bus request, and throughput.

Starts ``agentbus registry``, an ``echo`` agent (``_bench_agents:Echo``) and ``agentbus
gateway`` as processes on a throwaway exchange. From this process it then times, in the
same run: direct bus requests (the baseline), the same calls as A2A ``SendMessage`` over
plain HTTP JSON-RPC and through the official a2a-sdk client (sequential: p50/p99), and
the throughput of the one gateway process with concurrent HTTP callers against the same
concurrency of direct bus callers. Prints figures and ratios; asserts nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_data_part, new_message
from a2a.types import a2a_pb2 as a2a

from _harness import Fleet, agentbus_cli, parser, quiet_logging, summary, write_json
from agentbus import AgentBusError, Settings
from agentbus.bus import Bus, Topology

KEY = "bench-key-" + uuid.uuid4().hex


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rpc_body(n: int) -> dict[str, Any]:
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"data": {"n": n}}],
        "metadata": {"skill": "echo"},
    }
    return {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message}}


async def timed(call: Callable[[int], Awaitable[None]], count: int) -> list[int]:
    samples = []
    for n in range(count):
        started = time.perf_counter_ns()
        await call(n)
        samples.append(time.perf_counter_ns() - started)
    return samples


async def throughput(call: Callable[[int], Awaitable[None]], workers: int, seconds: float) -> float:
    done = 0
    stop = time.monotonic() + seconds

    async def worker(offset: int) -> None:
        nonlocal done
        n = offset
        while time.monotonic() < stop:
            await call(n)
            done += 1
            n += workers

    started = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return done / (time.monotonic() - started)


async def measure(url: str, exchange: str, base: str, args: Any) -> dict[str, Any]:
    settings = Settings(url=url, exchange=exchange)
    async with Bus(settings) as bus:

        async def direct(n: int) -> None:
            reply = await bus.request("echo", "echo", {"n": n}, timeout=30)
            assert reply.result == n

        headers = {"Authorization": f"Bearer {KEY}", "A2A-Version": "1.0"}
        limits = httpx.Limits(max_connections=args.workers + 4)
        async with httpx.AsyncClient(headers=headers, timeout=30, limits=limits) as http:
            endpoint = f"{base}/agents/echo/"

            async def raw(n: int) -> None:
                response = await http.post(endpoint, json=rpc_body(n))
                task = response.json()["result"]["task"]
                assert task["status"]["state"] == "TASK_STATE_COMPLETED", task

            client = await create_client(
                f"{base}/agents/echo", ClientConfig(streaming=False, httpx_client=http)
            )

            async def sdk(n: int) -> None:
                message = new_message([new_data_part({"n": n})], role=a2a.Role.ROLE_USER)
                message.metadata.update({"skill": "echo"})
                async for item in client.send_message(a2a.SendMessageRequest(message=message)):
                    assert item.task.status.state == a2a.TaskState.TASK_STATE_COMPLETED

            for call in (direct, raw, sdk):  # warm up connections, caches, the JIT-less paths
                await timed(call, 20)
            latency = {
                "direct_bus": summary(await timed(direct, args.count)),
                "gateway_raw_http": summary(await timed(raw, args.count)),
                "gateway_sdk_client": summary(await timed(sdk, args.count)),
            }
            rates = {
                "direct_bus": await throughput(direct, args.workers, args.seconds),
                "gateway_raw_http": await throughput(raw, args.workers, args.seconds),
            }
            await client.close()
    return {"latency": latency, "throughput_per_s": rates}


async def wait_listed(base: str, deadline: float = 30) -> None:
    async with httpx.AsyncClient() as http:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            try:
                listing = (await http.get(f"{base}/agents")).json()
                if any(card["name"] == "echo" for card in listing["agents"]):
                    return
            except (httpx.HTTPError, json.JSONDecodeError):
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError("the gateway did not list echo")


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--count", type=int, default=300, help="sequential calls per path")
    cli.add_argument("--workers", type=int, default=16, help="concurrent callers")
    cli.add_argument("--seconds", type=float, default=4.0, help="per throughput run")
    args = cli.parse_args()
    quiet_logging()
    exchange = f"bench-gw-{uuid.uuid4().hex[:8]}"
    topology = Topology(exchange)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp, Fleet(args.url) as fleet:
        keys = Path(tmp, "keys.json")
        keys.write_text(json.dumps({KEY: "bench"}))
        fleet.queues += [topology.service_queue(s) for s in ("registry", "echo")]
        fleet.queues += [topology.instance_queue(i) for i in ("registry-b", "echo-b")]
        fleet.queues.append(topology.dead_letter_queue)
        fleet.exchanges += [exchange, topology.dead_letter_exchange]
        cli_base = agentbus_cli(args.url, exchange)
        os.environ["AGENTBUS_INSTANCE_QUEUE_EXPIRES"] = "5"
        fleet.spawn(
            "registry",
            "registry",
            [*cli_base, "registry", "--id", "registry-b", "--heartbeat", "0.5"],
        )
        fleet.spawn(
            "agent",
            "echo",
            [*cli_base, "run", "_bench_agents:Echo", "--id", "echo-b", "--heartbeat", "0.5"],
        )
        fleet.spawn(
            "gateway", "gateway", [*cli_base, "gateway", "--port", str(port), "--keys", str(keys)]
        )
        asyncio.run(wait_listed(base))
        figures = asyncio.run(measure(args.url, exchange, base, args))
    latency, rates = figures["latency"], figures["throughput_per_s"]
    direct_p50 = latency["direct_bus"]["p50_us"]
    print(f"A2A gateway vs direct bus request ({args.count} sequential calls each, echo skill)")
    for path, figure in latency.items():
        overhead = figure["p50_us"] - direct_p50
        p50, p99 = figure["p50_us"] / 1000, figure["p99_us"] / 1000
        ratio = figure["p50_us"] / direct_p50
        print(
            f"  {path:20s} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms"
            f"  p50 overhead {overhead / 1000:+7.2f} ms  ratio {ratio:5.2f}x"
        )
    print(f"Throughput with {args.workers} concurrent callers, {args.seconds:g} s each")
    for path, rate in rates.items():
        print(f"  {path:20s} {rate:8.0f} calls/s  ratio {rate / rates['direct_bus']:5.2f}x")
    write_json(args.json, {"args": vars(args) | {"json": str(args.json)}, **figures})


if __name__ == "__main__":
    try:
        main()
    except AgentBusError as exc:
        raise SystemExit(f"bench_gateway: {exc}") from exc

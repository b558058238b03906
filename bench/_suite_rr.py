"""Request/response for suite.py: latency (sequential) and throughput (concurrent clients).

Every side sends ``ping`` with ``{"i": n}`` in a request envelope; its server answers with
the parameters. Sides: ``agentbus`` (``Bus.request`` against ``Bus.serve``), ``agent`` (a
``Pinger`` asked as an agent asks another), ``agent-transient`` (``persistent=False``),
``agent-uvloop`` (``agent`` with its server and clients on uvloop: what ``agentbus[fast]``
gives; every other side runs on asyncio's own loop) and the peers of ``_peers``:
``aio-pika``, ``raw-min``, ``faststream``, ``faststream-rq``.
Each server is a process (``_suite_rr.py serve SIDE URL EXCHANGE ID PREFETCH``, as the
fan-out's peer workers). Latency is taken here, the sides in turn each round, with the CPU
per request of this client and the server (/proc); throughput from 1 and 4 client processes
(``load SIDE URL EXCHANGE CLIENT SECONDS WINDOW``: warms up, says ``ready``, waits for a
line, keeps WINDOW in flight for SECONDS, prints its figures as JSON).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace as Config
from typing import Any

import _harness as harness
import _peers as peers
import agentbus
from _bench_agents import Pinger, UvPinger
from agentbus import Metrics, RequestEnvelope, Settings
from agentbus.bus import DedupWindow, Topology

# side: the server it asks
SERVERS = {"agentbus": "agentbus", "agent": "agent", "agent-transient": "agent",
           "agent-uvloop": "agent-uvloop",
           "aio-pika": "aio-pika", "raw-min": "raw-min", "faststream": "faststream",
           "faststream-rq": "faststream"}  # fmt: skip
SIDES = tuple(SERVERS)
Call = harness.Call
BUS_SIDES = ("agentbus", "agent", "agent-transient", "agent-uvloop")
UVLOOP_SIDES = ("agent-uvloop",)  # run in processes of their own on uvloop, latency included
SCRIPT = str(harness.BENCH_DIR / "_suite_rr.py")
WARMUP, PREFETCH, TIMEOUT = 200, 64, 5.0


class Names:
    """The queues and exchanges of the peers on one exchange (the fan-out's too)."""

    def __init__(self, exchange: str) -> None:
        self.exchange, self.raw_exchange = exchange, f"{exchange}.raw"
        bus = Topology(exchange)
        self.queues = {"agentbus": bus.service_queue("echo"),
                       "agent": bus.service_queue(Pinger.name),
                       "agent-uvloop": bus.service_queue(UvPinger.name),
                       "aio-pika": f"{exchange}.raw.work", "raw-min": f"{exchange}.min.echo",
                       "faststream": f"{exchange}.fs.work"}  # fmt: skip

    def reply(self, kind: str, client: str) -> str:
        return f"{self.exchange}.{kind}.reply.{client}"

    def clean(self, fleet: harness.Fleet, clients: list[str], agents: list[str]) -> None:
        """Have ``fleet`` delete them all, with the bus clients' and agents' queues."""
        ids = [f"rr-{side}-{client}" for side in BUS_SIDES for client in clients]
        fleet.topology(self.exchange, ("echo", Pinger.name, UvPinger.name), [*agents, *ids])
        fleet.queues += [self.queues[s] for s in ("aio-pika", "raw-min", "faststream")]
        fleet.queues += [self.reply(kind, client) for kind in ("raw", "fs") for client in clients]
        fleet.exchanges.append(self.raw_exchange)


async def serve(side: str, url: str, names: Names, agent_id: str, prefetch: int) -> None:
    """One side's server, until SIGTERM. ``agentbus`` prints its bus's counters and its
    de-duplication entries as a JSON line every 2 s and once closed (soak.py reads them)."""
    stop, settings = harness.stop_event(), Settings(url=url, exchange=names.exchange)
    queue, window = names.queues[side], DedupWindow(settings.dedup_window, settings.dedup_size)
    bus: agentbus.Bus | None = None

    def counters() -> None:
        if bus is not None:
            print(json.dumps({"stats": bus.stats.as_dict(), "dedup": len(window)}), flush=True)

    async with contextlib.AsyncExitStack() as stack:
        if side == "agentbus":
            bus = agentbus.Bus(settings, agent_id=agent_id, dedup=window)
            await stack.enter_async_context(bus)

            async def echo(request: RequestEnvelope) -> Any:
                return request.payload.parameters

            await bus.serve(echo, service="echo", prefetch=prefetch)
        elif side in ("agent", "agent-uvloop"):
            kind = Pinger if side == "agent" else UvPinger
            pinger = kind(agent_id=agent_id, settings=settings, metrics=Metrics())
            await stack.enter_async_context(pinger)
        elif side == "raw-min":
            await (minimal := peers.MinimalRpc(url, queue, prefetch)).serve()
            stack.push_async_callback(minimal.close)
        else:
            server: peers.RawServer | peers.FastStreamServer
            server = peers.FastStreamServer(url, queue, prefetch, agent_id)
            if side == "aio-pika":
                server = peers.RawServer(url, names.raw_exchange, queue, prefetch, agent_id)
            await server.open()
            stack.push_async_callback(server.close)
        while not stop.is_set():
            counters()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 2.0)
    counters()


@contextlib.asynccontextmanager
async def connected(side: str, url: str, names: Names, client_id: str) -> AsyncIterator[Call]:
    """A connected client of ``side``: ``await call(i)`` is one request/response."""
    if side in BUS_SIDES:  # its own id: two buses on one instance queue take each other's replies
        agent_id = f"rr-{side}-{client_id}"
        async with agentbus.connect(url, exchange=names.exchange, agent_id=agent_id) as bus:
            receiver, action = {"agentbus": ("echo", "ping"),
                                "agent-uvloop": (UvPinger.name, "answer"),
                                }.get(side, (Pinger.name, "answer"))  # fmt: skip
            persistent = side != "agent-transient"

            async def call(i: int) -> Any:
                reply = await bus.request(receiver, action, {"i": i}, timeout=TIMEOUT,
                                          persistent=persistent)  # fmt: skip
                return reply.result

            yield call
        return
    queue = names.queues[SERVERS[side]]
    raw, fs = names.reply("raw", client_id), names.reply("fs", client_id)
    peer = {"raw-min": lambda: peers.MinimalRpc(url, queue, timeout=TIMEOUT),
            "aio-pika": lambda: peers.RawClient(url, names.raw_exchange, raw, TIMEOUT),
            "faststream": lambda: peers.FastStreamClient(url, queue, TIMEOUT),
            "faststream-rq": lambda: peers.FastStreamRequester(url, queue, TIMEOUT, fs),
            }[side]()  # fmt: skip
    await peer.open()
    try:
        yield peer.ping
    finally:
        await peer.close()


async def load(side: str, url: str, exchange: str, client: str, seconds: str, window: str) -> None:
    """Warm up, say ``ready``, wait for the go, then ``window`` requests in flight."""
    async with connected(side, url, Names(exchange), client) as call:
        await harness.sequential(call, 0, warmup=WARMUP)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        print(json.dumps(await harness.windowed(call, int(window), float(seconds))), flush=True)


async def rounds(side: str, url: str, exchange: str, n: str) -> None:
    """A latency client in a process of its own (a uvloop side): warm up, say ``ready``, then
    for each line read, ``n`` sequential requests; print their samples and client CPU."""
    async with connected(side, url, Names(exchange), "lat") as call:
        await harness.sequential(call, 0, warmup=WARMUP)
        print("ready", flush=True)
        while await asyncio.to_thread(sys.stdin.readline):
            gc.collect()
            client0 = time.process_time()
            samples = await harness.sequential(call, int(n))
            cpu_s = time.process_time() - client0
            print(json.dumps({"samples": samples, "cpu_s": cpu_s}), flush=True)


async def latency_rounds(url: str, names: Names, cfg: Config, pids: dict[str, int],
                         say: harness.Say) -> dict[str, list[dict[str, float]]]:  # fmt: skip
    """Every side's client open at once, warmed up; then short rounds, the sides in turn."""
    rows: dict[str, list[dict[str, float]]] = {side: [] for side in cfg.sides}
    with harness.Fleet() as remote:
        async with contextlib.AsyncExitStack() as stack:
            calls: dict[str, Any] = {}
            for side in cfg.sides:
                if side in UVLOOP_SIDES:
                    argv = [sys.executable, SCRIPT, "rounds", side, url, names.exchange]
                    proc = remote.spawn("client", f"{side} latency", [*argv, str(cfg.requests)],
                                        pipes=True)  # fmt: skip
                    if proc.readline(harness.READY_TIMEOUT) != "ready":
                        raise RuntimeError(f"{proc.name} did not say ready")
                    calls[side] = proc
                    continue
                calls[side] = await stack.enter_async_context(connected(side, url, names, "lat"))
                await harness.sequential(calls[side], 0, warmup=WARMUP)
            for k in range(cfg.rounds):
                for side, call in calls.items():
                    gc.collect()
                    server0, client0 = harness.cpu_seconds(pids[side]), time.process_time()
                    if isinstance(call, harness.Proc):
                        assert call.popen.stdin is not None
                        call.popen.stdin.write(b"go\n")
                        call.popen.stdin.flush()
                        row = json.loads(call.readline(cfg.requests * TIMEOUT))
                        samples, client_s = row["samples"], row["cpu_s"]
                    else:
                        samples = await harness.sequential(call, cfg.requests)
                        client_s = time.process_time() - client0
                    server1 = harness.cpu_seconds(pids[side])
                    per = 1e6 / cfg.requests
                    cpu = {"client_cpu_us": client_s * per,
                           "server_cpu_us": (server1 - server0) * per}  # fmt: skip
                    rows[side].append(harness.summary(samples) | cpu)
                    figures = ", ".join(f"{key} {v:.0f}" for key, v in rows[side][-1].items())
                    say(f"request/response latency {side} #{k + 1}: {figures}")
    return rows


def load_run(side: str, url: str, names: Names, procs: int, cfg: Config, pid: int) -> dict:
    """``procs`` client processes of ``side``, started together; requests per second."""
    with harness.Fleet() as clients:
        for k in range(procs):
            argv = [sys.executable, SCRIPT, "load", side, url, names.exchange, f"c{k}"]
            clients.spawn("client", f"{side} client {k}",
                          [*argv, str(cfg.seconds), str(cfg.window)], pipes=True)  # fmt: skip
        for proc in clients.procs:
            if proc.readline(harness.READY_TIMEOUT) != "ready":
                raise RuntimeError(f"{proc.name} did not say ready")
        cpu0 = harness.cpu_seconds(pid)
        for proc in clients.procs:
            assert proc.popen.stdin is not None
            proc.popen.stdin.write(b"go\n")
            proc.popen.stdin.flush()
        rows = [json.loads(proc.readline(cfg.seconds + 60)) for proc in clients.procs]
        server_cpu = harness.cpu_seconds(pid) - cpu0
    count = sum(row["count"] for row in rows)
    per = 1e6 / max(count, 1)
    return {"per_s": sum(row["per_s"] for row in rows), "count": count,
            "server_cpu_us": server_cpu * per, "client_cpu_us": sum(r["cpu_s"] for r in rows) * per,
            "errors": [error for row in rows for error in row["errors"]]}  # fmt: skip


def run_rr(url: str, cfg: Config, say: harness.Say) -> dict[str, Any]:
    """Latency rounds, then throughput rounds with 1 and 4 client processes, every side."""
    names = Names(f"bench-suite-{uuid.uuid4().hex[:8]}")
    load: dict[str, dict[str, list[dict[str, Any]]]] = {}
    servers = sorted({SERVERS[side] for side in cfg.sides})
    ids = {"agentbus": "rr-server", "agent": "rr-agent", "agent-uvloop": "rr-agent-uv"}
    with harness.Fleet(url) as fleet:
        names.clean(fleet, ["lat", *(f"c{k}" for k in range(max(cfg.procs)))], list(ids.values()))
        for server in servers:
            argv = [sys.executable, SCRIPT, "serve", server, url, names.exchange]
            argv += [ids.get(server, "rr-peer"), str(PREFETCH)]
            fleet.spawn(server, f"{server} server", argv)
        asyncio.run(fleet.consumed([names.queues[server] for server in servers]))
        pids = {side: fleet.pids(SERVERS[side])[0] for side in cfg.sides}
        latency = asyncio.run(latency_rounds(url, names, cfg, pids, say))
        for procs in cfg.procs:
            load[str(procs)] = {side: [] for side in cfg.sides}
            for k in range(cfg.load_rounds):
                for side in cfg.sides:
                    row = load_run(side, url, names, procs, cfg, pids[side])
                    load[str(procs)][side].append(row)
                    say(f"request/response throughput {side} x{procs} #{k + 1}: {row}")
    table: dict[str, dict[str, Any]] = {}
    best = harness.best_median
    for side in cfg.sides:
        keys = ("p50_us", "p99_us", "client_cpu_us", "server_cpu_us")
        table[side] = {key: best(row[key] for row in latency[side]) for key in keys}
        for procs, sides in load.items():
            table[side][f"per_s_x{procs}"] = best((r["per_s"] for r in sides[side]), max)
            table[side][f"server_cpu_us_x{procs}"] = best(r["server_cpu_us"] for r in sides[side])
    out = {"exchange": names.exchange, "params": vars(cfg), "latency": latency}
    return out | {"throughput": load, "summary": table}


if __name__ == "__main__":
    harness.quiet_logging()
    command, side, url, exchange, *rest = sys.argv[1:]
    if side in UVLOOP_SIDES:
        import uvloop  # the fast extra: agentbus[fast]

        factory: Any = uvloop.new_event_loop
    else:
        factory = None  # asyncio's own loop, whatever is installed
    with asyncio.Runner(loop_factory=factory) as runner:
        if command == "serve":
            runner.run(serve(side, url, Names(exchange), rest[0], int(rest[1])))
        elif command == "rounds":
            runner.run(rounds(side, url, exchange, *rest))
        else:
            runner.run(load(side, url, exchange, *rest))

"""Request/response for suite.py: latency (sequential) and throughput (concurrent clients).

The echo server of every side runs as its own process for the whole section. Latency is
measured from this process, the sides one after the other in each round; throughput from
1 and 4 client processes started together (_rr_sides.py ``load``), each keeping a window
of requests in flight. The server's CPU per request is read from /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import aio_pika

from _fleet import BENCH_DIR, Proc, cpu_seconds, dump_logs, shielded, spawn, stop_fleet
from _rr_sides import SERVERS, SIDES, Names, client, consumers
from bench_bus import delete_all, sequential

RR_SCRIPT = str(BENCH_DIR / "_rr_sides.py")
READY_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class RRConfig:
    requests: int  # sequential requests per side and latency round
    rounds: int  # latency rounds, the sides in turn in each
    load_rounds: int  # throughput rounds
    seconds: float  # per throughput run
    procs: tuple[int, ...] = (1, 4)
    window: int = 64  # requests in flight per client process (the servers' prefetch)


async def wait_servers(url: str, names: Names, fleet: list[Proc]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    async with await aio_pika.connect(url) as connection:
        while time.monotonic() < deadline:
            for proc in fleet:
                if proc.popen.poll() is not None:
                    raise RuntimeError(f"{proc.name} exited with status {proc.popen.returncode}")
            counts = [await consumers(connection, names.service_queue(s)) for s in SERVERS]
            if all(counts):
                return
            await asyncio.sleep(0.2)
    raise TimeoutError(f"the echo servers were not ready within {READY_TIMEOUT:g} s")


async def latency_rounds(
    url: str, names: Names, cfg: RRConfig, say: Callable[[str], None]
) -> dict[str, list[dict[str, float]]]:
    """Every side's client open at once, warmed up; then short rounds, the sides in turn."""
    rows: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    async with contextlib.AsyncExitStack() as stack:
        calls = {}
        for side in SIDES:
            calls[side] = await stack.enter_async_context(client(side, url, names, "lat"))
            await sequential(calls[side], 1)  # bench_bus.WARMUP requests first
        for k in range(cfg.rounds):
            for side, call in calls.items():
                rows[side].append(await sequential(call, cfg.requests, warmup=0))
                say(f"request/response latency {side} #{k + 1}: {rows[side][-1]}")
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
    clients: list[Proc] = []
    try:
        for k in range(procs):
            argv = [sys.executable, RR_SCRIPT, "load", side, url, names.exchange, f"c{k}"]
            log = tempfile.TemporaryFile()  # noqa: SIM115 -- closed by stop_fleet
            popen = subprocess.Popen(  # own session: Ctrl-C reaches only us, and we stop it
                [*argv, str(cfg.seconds), str(cfg.window)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, "PYTHONPATH": str(BENCH_DIR)},
                start_new_session=True,
            )
            clients.append(Proc("client", f"{side} client {k}", popen, log))
        for proc in clients:
            if _line(proc.popen, READY_TIMEOUT) != "ready":
                raise RuntimeError(f"{proc.name} did not say ready")
        cpu0 = cpu_seconds(server)
        for proc in clients:
            assert proc.popen.stdin is not None
            proc.popen.stdin.write(b"go\n")
            proc.popen.stdin.flush()
        rows = [json.loads(_line(proc.popen, cfg.seconds + 60)) for proc in clients]
        cpu1 = cpu_seconds(server)
    except Exception:
        dump_logs(clients)
        raise
    finally:
        stop_fleet(clients)
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
    names = Names(f"bench-suite-{uuid.uuid4().hex[:8]}")
    fleet: list[Proc] = []
    latency: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    load: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        for side in SERVERS:
            argv = [sys.executable, RR_SCRIPT, "serve", side, url, names.exchange]
            spawn(fleet, side, f"{side} server", argv)
        asyncio.run(wait_servers(url, names, fleet))
        server_pid = {proc.role: proc.popen.pid for proc in fleet}
        server_pid["faststream-rq"] = server_pid["faststream"]
        latency = asyncio.run(latency_rounds(url, names, cfg, say))
        for procs in cfg.procs:
            load[str(procs)] = {side: [] for side in SIDES}
            for k in range(cfg.load_rounds):
                for side in SIDES:
                    row = load_run(side, url, names, procs, cfg, server_pid[side])
                    load[str(procs)][side].append(row)
                    say(f"request/response throughput {side} x{procs} #{k + 1}: {row}")
    except Exception:
        dump_logs(fleet)
        raise
    finally:
        with shielded():
            stop_fleet(fleet)
            try:
                asyncio.run(_cleanup(url, names, cfg))
            except Exception as exc:
                print(f"cleanup of {names.exchange!r} failed: {exc!r}", file=sys.stderr)
    summary: dict[str, dict[str, Any]] = {}
    for side in SIDES:
        summary[side] = {
            "p50_us": summarize(latency[side], "p50_us", min),
            "p99_us": summarize(latency[side], "p99_us", min),
        }
        for procs, sides in load.items():
            summary[side][f"per_s_x{procs}"] = summarize(sides[side], "per_s", max)
            summary[side][f"server_cpu_us_x{procs}"] = summarize(sides[side], "server_cpu_us", min)
    out = {"exchange": names.exchange, "params": asdict(cfg), "latency": latency}
    return out | {"throughput": load, "summary": summary}


async def _cleanup(url: str, names: Names, cfg: RRConfig) -> None:
    clients = ["lat", *(f"c{k}" for k in range(max(cfg.procs)))]
    async with await aio_pika.connect(url) as connection:
        await delete_all(connection, names.queues(clients), names.exchanges())

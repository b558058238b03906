"""Fan-out and fan-in of N subtasks for suite.py: the leader vs raw aio-pika vs FastStream.

bench_leader.py's fleet (a registry, W ``Echo`` workers and a leader as ``agentbus``
processes, W raw aio-pika workers) plus W FastStream workers. For each N the sides run in
turn, the same plan each: N ``echo`` subtasks at most ``W x concurrency`` in flight, then a
``total`` fan-in over all their results. The raw and FastStream "leaders" run in this process.

FastStream is asked two ways, the same FastStream workers answering both (same work, same
message count, persistent requests, mandatory, confirmed):

- ``faststream``: FastStream's own request API as its user fans out, ``asyncio.gather`` over
  ``broker.request`` with ``W x concurrency`` lanes; FastStream's RPC lock lets one request
  per broker be in flight, so the lanes take turns.
- ``faststream-rq``: the stronger hand-rolled variant, a FastStream publisher with ``reply_to``
  a standing reply queue its subscriber consumes, replies matched by correlation id, up to
  ``W x concurrency`` in flight.

Memory, leader side: the peak RSS of the leader process during each timed run (VmHWM, reset
before each run: this process for raw and FastStream), and, untimed, the tracemalloc peak
of the leader's work: bench_leader's memory case for agentbus (Plan + PlanRunner on the
in-memory bus), a traced run on the broker for raw and FastStream.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import aio_pika

from _faststream_side import FastStreamClient, FastStreamRequester
from _fleet import (
    BENCH_DIR,
    Proc,
    dump_logs,
    peak_rss,
    reset_peak_rss,
    shielded,
    spawn,
    stop_fleet,
)
from _leader_memory import memory_case
from _raw_leader import RawLeader
from _rr_sides import consumers
from agentbus import Settings
from agentbus.agents.leader import PlanClient
from agentbus.bus import Bus
from bench_bus import delete_all
from bench_leader import READY_TIMEOUT, WARMUP, Names, cleanup, leader_run, start_fleet, wait_ready

SIDES = ("agentbus", "aio-pika", "faststream", "faststream-rq")
BIG_CAP = 16 * 1024 * 1024
CAP_NOTE = (
    "AGENTBUS_MAX_MESSAGE_SIZE=16777216 for the leader, the workers and the client: a "
    "10,000-subtask plan request is ~1.6 MB and its aggregate ~2.3 MB, over the 1 MiB default"
)
Run = Callable[[int], Awaitable[dict[str, Any]]]


def fs_names(names: Names) -> SimpleNamespace:
    ex = names.exchange
    workers = [worker.replace("echo-", "fs-", 1) for worker in names.workers]
    return SimpleNamespace(queue=f"{ex}.fs.work", reply=f"{ex}.fs.reply", workers=workers)


async def wait_fs(url: str, queue: str, wanted: int, fleet: list[Proc]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    async with await aio_pika.connect(url) as connection:
        while await consumers(connection, queue) < wanted:
            failed = [proc.name for proc in fleet if proc.popen.poll() is not None]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(f"FastStream workers not ready; exited: {failed}")
            await asyncio.sleep(0.2)


async def traced(run: Run, n: int) -> int:
    """The tracemalloc peak of one run, in bytes."""
    gc.collect()
    tracemalloc.start()
    try:
        await run(n)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def measure(
    url: str, names: Names, fleet: list[Proc], cfg: SimpleNamespace, say: Callable[[str], None]
) -> dict[str, Any]:
    fs = fs_names(names)
    ex, max_parallel = names.exchange, cfg.workers * cfg.concurrency
    raw = RawLeader(url, f"{ex}.raw", f"{ex}.raw.work")
    requester = FastStreamRequester(url, fs.queue, fs.reply)
    fs_client = FastStreamClient(url, fs.queue)
    leader_pid = next(proc.popen.pid for proc in fleet if proc.role == "leader")
    timed: dict[str, dict[str, list[dict[str, Any]]]] = {side: {} for side in SIDES}
    tracemalloc_peak: dict[str, dict[str, int]] = {side: {} for side in SIDES[1:]}
    async with Bus(Settings(url=url, exchange=ex), agent_id=names.client) as bus:
        await raw.open(f"{ex}.raw.reply")
        await requester.open()
        await fs_client.open()
        try:
            await wait_ready(bus, names, raw, fleet)
            await wait_fs(url, fs.queue, len(fs.workers), fleet)
            client = PlanClient(bus)
            sides: dict[str, tuple[Run, int]] = {
                "agentbus": (lambda n: leader_run(client, n, max_parallel), leader_pid),
                "aio-pika": (lambda n: raw.run(n, max_parallel), os.getpid()),
                "faststream": (lambda n: fs_client.run(n, max_parallel), os.getpid()),
                "faststream-rq": (lambda n: requester.run(n, max_parallel), os.getpid()),
            }
            for run, _ in sides.values():  # warm up connections, caches and the directory
                await run(min(WARMUP, max(cfg.sizes)))
            for n in cfg.sizes:
                rounds = cfg.rounds + (2 if n <= 100 else 0)  # small plans: noisier, cheap
                for k in range(rounds):
                    for side, (run, pid) in sides.items():
                        base = reset_peak_rss(pid)
                        figures = await run(n)
                        figures["rss_peak_delta"] = peak_rss(pid) - base
                        timed[side].setdefault(str(n), []).append(figures)
                        say(f"fan-out N={n} {side} #{k + 1}: {figures['per_s']:.0f} subtasks/s")
                        await asyncio.sleep(0.3)  # let heartbeats and stragglers settle
            for n in cfg.sizes:
                for side in SIDES[1:]:
                    tracemalloc_peak[side][str(n)] = await traced(sides[side][0], n)
                    say(f"fan-out memory N={n} {side}: {tracemalloc_peak[side][str(n)]} B")
        finally:
            await fs_client.close()
            await requester.close()
            await raw.close()
    return {"timed": timed, "tracemalloc": tracemalloc_peak, "broker": raw.broker_version}


def summarize(result: dict[str, Any], sizes: list[int]) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for side in SIDES:
        rows[side] = {}
        for n in sizes:
            runs = result["timed"][side][str(n)]
            per_s = [run["per_s"] for run in runs]
            seconds = [run["seconds"] for run in runs]
            rows[side][str(n)] = {
                "per_s": {"best": max(per_s), "median": statistics.median(per_s)},
                "seconds": {"best": min(seconds), "median": statistics.median(seconds)},
                "us_per_subtask": {
                    "best": min(seconds) / n * 1e6,
                    "median": statistics.median(seconds) / n * 1e6,
                },
                "rss_peak_delta": statistics.median(run["rss_peak_delta"] for run in runs),
                "tracemalloc_peak": result["memory"][side][str(n)]["peak_bytes"],
            }
    return rows


def run_fanout(url: str, cfg: SimpleNamespace, say: Callable[[str], None]) -> dict[str, Any]:
    """cfg: sizes, rounds, workers, concurrency."""
    names = Names.make(cfg.workers)
    fs = fs_names(names)
    fleet: list[Proc] = []
    capped = max(cfg.sizes) > 4000
    saved = os.environ.get("AGENTBUS_MAX_MESSAGE_SIZE")
    if capped:
        os.environ["AGENTBUS_MAX_MESSAGE_SIZE"] = str(BIG_CAP)
    try:
        start_fleet(argparse.Namespace(url=url, concurrency=cfg.concurrency), names, fleet)
        script = str(BENCH_DIR / "_faststream_side.py")
        for worker in fs.workers:
            argv = [sys.executable, script, url, fs.queue, str(cfg.concurrency), worker]
            spawn(fleet, "faststream", worker, argv)
        result = asyncio.run(measure(url, names, fleet, cfg, say))
    except Exception:
        dump_logs(fleet)
        raise
    finally:
        with shielded():
            stop_fleet(fleet)
            try:
                asyncio.run(cleanup(url, names))
                asyncio.run(_cleanup_fs(url, fs))
            except Exception as exc:
                print(f"cleanup of {names.exchange!r} failed: {exc!r}", file=sys.stderr)
            if saved is None:
                os.environ.pop("AGENTBUS_MAX_MESSAGE_SIZE", None)
            else:
                os.environ["AGENTBUS_MAX_MESSAGE_SIZE"] = saved
    memory: dict[str, dict[str, dict[str, Any]]] = {side: {} for side in SIDES}
    for n in cfg.sizes:
        case = asyncio.run(memory_case(n, cfg.workers, cfg.concurrency, max_parallel(cfg)))
        memory["agentbus"][str(n)] = case
        say(f"fan-out memory N={n} agentbus: {case['peak_bytes']} B")
        for side in SIDES[1:]:
            peak = result["tracemalloc"][side][str(n)]
            memory[side][str(n)] = {"peak_bytes": peak, "peak_per_subtask": peak / n}
    result |= {"memory": memory, "exchange": names.exchange, "capped": capped}
    result |= {"params": {**vars(cfg), "max_parallel": max_parallel(cfg)}}
    result["cap_note"] = CAP_NOTE if capped else ""
    return result | {"summary": summarize(result, cfg.sizes)}


def max_parallel(cfg: SimpleNamespace) -> int:
    return int(cfg.workers * cfg.concurrency)


async def _cleanup_fs(url: str, fs: SimpleNamespace) -> None:
    async with await aio_pika.connect(url) as connection:
        await delete_all(connection, [fs.queue, fs.reply], [])

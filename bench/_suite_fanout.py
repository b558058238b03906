"""Fan-out and fan-in of N subtasks for suite.py: the leader vs raw aio-pika vs FastStream.

One fleet: a registry, W ``Echo`` workers and a leader as ``agentbus`` processes, W raw
aio-pika workers (_raw_worker.py) and W FastStream workers (_faststream_side.py). For each
N the sides run in turn, the same plan each: N ``echo`` subtasks at most ``W x concurrency``
in flight, then a ``total`` fan-in over all their results. The raw and FastStream "leaders"
run in this process.

FastStream is asked two ways, the same FastStream workers answering both (same work, same
message count, persistent requests, mandatory, confirmed):

- ``faststream``: FastStream's own request API as its user fans out, ``asyncio.gather`` over
  ``broker.request`` with ``W x concurrency`` lanes; FastStream's RPC lock lets one request
  per broker be in flight, so the lanes take turns.
- ``faststream-rq``: the stronger hand-rolled variant, a FastStream publisher with ``reply_to``
  a standing reply queue its subscriber consumes, replies matched by correlation id, up to
  ``W x concurrency`` in flight.

Each timed run also records the CPU seconds of every role (leader, workers, registry, raw
and FastStream workers, the broker, this process, the rest of the host) from /proc.

Memory, leader side: the peak RSS of the leader process during each timed run (VmHWM, reset
before each run: this process for raw and FastStream), and, untimed, the tracemalloc peak
of the leader's work: _leader_memory's case for agentbus (Plan + PlanRunner on the
in-memory bus), a traced run on the broker for raw and FastStream.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import statistics
import sys
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aio_pika

from _faststream_side import FastStreamClient, FastStreamRequester
from _harness import (
    BENCH_DIR,
    Fleet,
    agentbus_cli,
    broker_pid,
    consumers,
    cpu_snapshot,
    peak_rss,
    reset_peak_rss,
)
from _leader_memory import memory_case, plan_document
from _raw_leader import RawLeader
from agentbus import AgentBusError, Settings
from agentbus.bus import Bus
from agentbus.leader import PlanClient, PlanStatus

SIDES = ("agentbus", "aio-pika", "faststream", "faststream-rq")
WARMUP = 200
ROLES = ("leader", "worker", "registry", "raw", "faststream")  # the fleet's processes
BIG_CAP = 16 * 1024 * 1024
CAP_NOTE = (
    "AGENTBUS_MAX_MESSAGE_SIZE=16777216 for the leader, the workers and the client: a "
    "10,000-subtask plan request is ~1.6 MB and its aggregate ~2.3 MB, over the 1 MiB default"
)
Run = Callable[[int], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Names:
    """Every process, queue and exchange of one fan-out run."""

    exchange: str
    run: str
    workers: int

    @classmethod
    def make(cls, workers: int) -> Names:
        run = uuid.uuid4().hex[:8]
        return cls(f"bench-leader-{run}", run, workers)

    @property
    def registry(self) -> str:
        return f"registry-{self.run}"

    @property
    def leader(self) -> str:
        return f"leader-{self.run}"

    @property
    def client(self) -> str:
        return f"bench-client-{self.run}"

    def worker_ids(self, kind: str) -> list[str]:
        """``echo`` (agentbus), ``raw`` or ``fs`` worker ids."""
        return [f"{kind}-{self.run}-{k}" for k in range(self.workers)]

    def queues(self) -> list[str]:
        ex = self.exchange
        queues = [f"{ex}.service.{service}" for service in ("registry", "echo", "leader")]
        ids = [self.registry, self.leader, self.client, *self.worker_ids("echo")]
        queues += [f"{ex}.instance.{agent_id}" for agent_id in ids]
        queues += [f"{ex}.dead-letter", f"{ex}.raw.work", f"{ex}.raw.reply"]
        return [*queues, f"{ex}.fs.work", f"{ex}.fs.reply"]

    def exchanges(self) -> list[str]:
        return [self.exchange, f"{self.exchange}.dlx", f"{self.exchange}.raw"]


def start_fleet(fleet: Fleet, names: Names, concurrency: int) -> None:
    """A registry, W ``Echo`` workers and a leader; W raw and W FastStream workers."""
    assert fleet.url is not None
    url, ex, width = fleet.url, names.exchange, str(concurrency)
    cli = agentbus_cli(url, ex)
    fleet.spawn("registry", names.registry, [*cli, "registry", "--id", names.registry])
    for worker in names.worker_ids("echo"):
        argv = [*cli, "run", "_bench_agents:Echo", "--id", worker, "--concurrency", width]
        fleet.spawn("worker", worker, argv)
    fleet.spawn("leader", names.leader, [*cli, "leader", "--id", names.leader])
    raw = [sys.executable, str(BENCH_DIR / "_raw_worker.py"), url, f"{ex}.raw", f"{ex}.raw.work"]
    for worker in names.worker_ids("raw"):
        fleet.spawn("raw", worker, [*raw, width, worker])
    fs = [sys.executable, str(BENCH_DIR / "_faststream_side.py"), url, f"{ex}.fs.work", width]
    for worker in names.worker_ids("fs"):
        fleet.spawn("faststream", worker, [*fs, worker])


async def wait_ready(bus: Bus, names: Names, fleet: Fleet) -> None:
    """Until the registry lists every worker and the leader, and the other workers consume."""
    wanted = {*names.worker_ids("echo"), names.leader}
    assert fleet.url is not None
    async with await aio_pika.connect(fleet.url) as connection:

        async def ready() -> bool:
            listed: set[str] = set()
            with contextlib.suppress(AgentBusError):
                reply = await bus.request("registry", "list_agents", timeout=2)
                listed = {row["agent_id"] for row in reply.result if row["status"] == "ready"}
            work = [f"{names.exchange}.{kind}.work" for kind in ("raw", "fs")]
            counts = [await consumers(connection, queue) for queue in work]
            return wanted <= listed and min(counts) >= names.workers

        await fleet.wait(ready, "the fan-out fleet")


async def leader_run(client: PlanClient, n: int, max_parallel: int) -> dict[str, Any]:
    """One plan through the leader: N echoes and the fan-in, timed from here."""
    document = plan_document(n, max_parallel)
    start = time.perf_counter()
    aggregate = await client.run(document, timeout=600)
    seconds = time.perf_counter() - start
    total = aggregate.subtask("sum").result
    if aggregate.status is not PlanStatus.COMPLETED or total != n * (n - 1) // 2:
        raise RuntimeError(f"leader run wrong: {aggregate.status} {aggregate.error} sum={total}")
    totals = aggregate.totals
    last = max(o.ended_at for o in aggregate.subtasks if o.ended_at is not None)
    figures = {"seconds": seconds, "per_s": n / seconds, "leader_wall_s": totals.wall_time}
    # After the last subtask ended, the leader still sends the progress events queued.
    figures["progress_drain_s"] = (aggregate.ended_at - last).total_seconds()
    return figures | {"attempts": totals.attempts, "agents_used": len(totals.agents_used)}


def cpu_split(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per role between two snapshots; ``others``: the rest of the host's."""
    cpu = {role: round(after[role] - before[role], 3) for role in before}
    cpu["others"] = round(cpu.pop("host") - sum(cpu.values()), 3)
    return cpu


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
    url: str, names: Names, fleet: Fleet, cfg: SimpleNamespace, say: Callable[[str], None]
) -> dict[str, Any]:
    ex, max_parallel = names.exchange, cfg.workers * cfg.concurrency
    raw = RawLeader(url, f"{ex}.raw", f"{ex}.raw.work")
    requester = FastStreamRequester(url, f"{ex}.fs.work", f"{ex}.fs.reply")
    fs_client = FastStreamClient(url, f"{ex}.fs.work")
    leader_pid = fleet.pids("leader")[0]
    pids = {role: fleet.pids(role) for role in ROLES}
    pids |= {"bench": [os.getpid()], "broker": [pid] if (pid := broker_pid(url)) else []}
    timed: dict[str, dict[str, list[dict[str, Any]]]] = {side: {} for side in SIDES}
    tracemalloc_peak: dict[str, dict[str, int]] = {side: {} for side in SIDES[1:]}
    async with Bus(Settings(url=url, exchange=ex), agent_id=names.client) as bus:
        await raw.open(f"{ex}.raw.reply")
        await requester.open()
        await fs_client.open()
        try:
            await wait_ready(bus, names, fleet)
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
                        base, cpu0 = reset_peak_rss(pid), cpu_snapshot(pids)
                        figures = await run(n)
                        figures["rss_peak_delta"] = peak_rss(pid) - base
                        figures["cpu_s"] = cpu_split(cpu0, cpu_snapshot(pids))
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
    capped = max(cfg.sizes) > 4000
    saved = os.environ.get("AGENTBUS_MAX_MESSAGE_SIZE")
    if capped:
        os.environ["AGENTBUS_MAX_MESSAGE_SIZE"] = str(BIG_CAP)
    try:
        with Fleet(url, queues=names.queues(), exchanges=names.exchanges()) as fleet:
            start_fleet(fleet, names, cfg.concurrency)
            result = asyncio.run(measure(url, names, fleet, cfg, say))
    finally:
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

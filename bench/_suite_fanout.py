"""Fan-out and fan-in of N subtasks for suite.py: the leader vs raw aio-pika vs FastStream
(the tracemalloc study of the leader's work: ``git show 239f431:bench/_suite_fanout.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from types import SimpleNamespace as Config
from typing import Any

import _harness as harness
from _suite_rr import SCRIPT, FastStreamClient, Names, RawClient
from agentbus import AgentBusError, PlanClient, Settings
from agentbus.bus import Bus
from agentbus.leader import PlanStatus

SIDES = ("agentbus", "aio-pika", "faststream")
WARMUP = 200
TIMEOUT = 30.0  # s per request, the default subtask timeout
CAP = 16 * 1024 * 1024  # bytes: a 10,000-subtask plan is ~1.6 MB, its aggregate ~2.3 MB
CAP_NOTE = f"AGENTBUS_MAX_MESSAGE_SIZE={CAP} for the leader, the workers and the client"
Run = Callable[[int], Awaitable[dict[str, Any]]]


def plan_document(n: int, max_parallel: int) -> dict[str, Any]:
    """N independent ``echo`` subtasks and a ``total`` fan-in over all their results."""
    ids = [f"t{i}" for i in range(n)]
    subtasks = [{"id": t, "skill": "echo", "parameters": {"n": i}} for i, t in enumerate(ids)]
    subtasks.append({"id": "sum", "skill": "total", "depends_on": ids, "inputs": {"values": ids}})
    return {"description": f"bench: {n} echoes and their sum", "max_parallel": max_parallel,
            "subtasks": subtasks}  # fmt: skip


def start_fleet(fleet: harness.Fleet, run: str, cfg: Config, env: dict[str, str]) -> None:
    """A registry, W ``Echo`` workers and a leader; W raw and W FastStream workers."""
    assert fleet.url is not None
    names, width, workers = Names(f"bench-leader-{run}"), str(cfg.concurrency), cfg.workers
    echoes = [f"echo-{run}-{k}" for k in range(workers)]
    ids = [f"registry-{run}", f"leader-{run}", f"bench-client-{run}", *echoes]
    names.clean(fleet, [run], ("registry", "echo", "leader"), ids, leaders=True)
    fleet.agentbus(names.exchange, "registry", "--id", ids[0], env=env)
    for worker in echoes:
        argv = ["run", "_bench_agents:Echo", "--concurrency", width, "--id", worker]
        fleet.agentbus(names.exchange, *argv, role="worker", env=env)
    fleet.agentbus(names.exchange, "leader", "--no-durable", "--id", ids[1], env=env)
    for role, side in (("raw", "aio-pika"), ("faststream", "faststream")):
        for k in range(workers):
            argv = [sys.executable, SCRIPT, "serve", side, fleet.url, names.exchange]
            fleet.spawn(role, f"{role}-{run}-{k}", [*argv, f"{role}-{run}-{k}", width])


async def leader_run(client: PlanClient, n: int, max_parallel: int) -> dict[str, Any]:
    """One plan through the leader: N echoes and the fan-in, timed from here."""
    start = time.perf_counter()
    aggregate = await client.run(plan_document(n, max_parallel), timeout=600)
    seconds = time.perf_counter() - start
    total = aggregate.subtask("sum").result
    if aggregate.status is not PlanStatus.COMPLETED or total != n * (n - 1) // 2:
        raise RuntimeError(f"leader run wrong: {aggregate.status} {aggregate.error} sum={total}")
    return {"seconds": seconds, "per_s": n / seconds, "attempts": aggregate.totals.attempts}


async def measure(url: str, run: str, fleet: harness.Fleet, cfg: Config, say: harness.Say,
                  limits: dict[str, int]) -> dict:  # fmt: skip
    names, width = Names(f"bench-leader-{run}"), cfg.workers * cfg.concurrency
    raw = RawClient(url, names.raw_exchange, names.reply(run), TIMEOUT)
    fs_client = FastStreamClient(url, names.queues["faststream"], TIMEOUT)
    leader_pid, me = fleet.pids("leader")[0], os.getpid()
    timed: dict[str, dict[str, list[dict[str, Any]]]] = {side: {} for side in SIDES}
    settings = Settings(url=url, exchange=names.exchange, **limits)
    bus = Bus(settings, agent_id=f"bench-client-{run}")
    async with bus, contextlib.AsyncExitStack() as stack:
        for peer in (raw, fs_client):
            await peer.open()
            stack.push_async_callback(peer.close)
        wanted = {f"leader-{run}", *(f"echo-{run}-{k}" for k in range(cfg.workers))}

        async def listed() -> bool:  # the registry lists the leader and the workers ready
            with contextlib.suppress(AgentBusError):
                rows = (await bus.request("registry", "list_agents", timeout=2)).result
                return wanted <= {row["agent_id"] for row in rows if row["status"] == "ready"}
            return False

        await fleet.wait(listed, "the leader and its workers")
        await fleet.consumed([names.queues[s] for s in ("aio-pika", "faststream")], cfg.workers)
        client = PlanClient(bus)
        sides: dict[str, tuple[Run, int]] = {
            "agentbus": (lambda n: leader_run(client, n, width), leader_pid),
            "aio-pika": (lambda n: raw.run(n, width), me),
            "faststream": (lambda n: fs_client.run(n, width), me)}  # fmt: skip
        for go, _ in sides.values():  # warm up connections, caches and the directory
            await go(min(WARMUP, max(cfg.sizes)))
        for n in cfg.sizes:
            for k in range(cfg.rounds + (2 if n <= 100 else 0)):  # small plans: noisier, cheap
                for side, (go, pid) in sides.items():
                    base = harness.reset_peak_rss(pid)
                    figures = await go(n)
                    figures["rss_peak_delta"] = (harness.rss(pid, "VmHWM") or 0) - base
                    timed[side].setdefault(str(n), []).append(figures)
                    say(f"fan-out N={n} {side} #{k + 1}: {figures['per_s']:.0f} subtasks/s")
                    await asyncio.sleep(0.3)  # let heartbeats and stragglers settle
    return {"timed": timed}


def run_fanout(url: str, cfg: Config, say: Callable[[str], None]) -> dict[str, Any]:
    """cfg: sizes, rounds, workers, concurrency."""
    run, width = uuid.uuid4().hex[:8], cfg.workers * cfg.concurrency
    capped = max(cfg.sizes) > 4000  # over the 1 MiB default
    with harness.Fleet(url) as fleet:
        start_fleet(fleet, run, cfg, {"AGENTBUS_MAX_MESSAGE_SIZE": str(CAP)} if capped else {})
        limits = {"max_message_size": CAP} if capped else {}
        result = asyncio.run(measure(url, run, fleet, cfg, say, limits))
    summary: dict[str, dict[str, Any]] = {side: {} for side in SIDES}
    for n in cfg.sizes:
        for side in SIDES:
            runs = result["timed"][side][str(n)]
            seconds = [row["seconds"] for row in runs]
            summary[side][str(n)] = {
                "per_s": harness.best_median((row["per_s"] for row in runs), max),
                "us_per_subtask": harness.best_median(s / n * 1e6 for s in seconds),
                "rss_peak_delta": harness.best_median(r["rss_peak_delta"] for r in runs)["median"],
            }
    result |= {"exchange": f"bench-leader-{run}", "capped": capped}
    result |= {"params": {**vars(cfg), "max_parallel": width}, "summary": summary}
    return result | {"cap_note": CAP_NOTE if capped else ""}

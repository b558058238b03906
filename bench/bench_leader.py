"""Benchmark the leader: a plan of N trivial subtasks and a fan-in, against raw aio-pika.

One run, one broker, one throwaway exchange: a registry, W ``Echo`` workers and a leader
run as ``agentbus`` processes, next to W raw aio-pika workers; raw and leader runs
alternate and the best of each is kept. Then the leader-side memory of 1k and 10k-subtask
plans, in-process on the in-memory bus. See ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import aio_pika
import structlog

from _fleet import BENCH_DIR, Proc, broker_pid, cpu_snapshot, dump_logs, spawn, stop_fleet
from _leader_memory import MEMORY_NOTE, memory_case, plan_document
from _raw_leader import RawLeader
from agentbus import AgentBusError, Settings
from agentbus.agents.leader import PlanClient, PlanStatus
from agentbus.bus import Bus

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
TARGET_RATIO = 0.7
READY_TIMEOUT = 60.0
WARMUP = 200


@dataclass(slots=True)
class Names:
    exchange: str
    registry: str
    leader: str
    client: str
    workers: list[str]
    raw_workers: list[str]

    @classmethod
    def make(cls, workers: int) -> Names:
        run = uuid.uuid4().hex[:8]
        return cls(
            exchange=f"bench-leader-{run}",
            registry=f"registry-{run}",
            leader=f"leader-{run}",
            client=f"bench-client-{run}",
            workers=[f"echo-{run}-{k}" for k in range(workers)],
            raw_workers=[f"raw-{run}-{k}" for k in range(workers)],
        )


def start_fleet(args: argparse.Namespace, names: Names, fleet: list[Proc]) -> None:
    cli = [str(Path(sys.executable).with_name("agentbus"))]  # the venv's console script
    cli += ["--url", args.url, "--exchange", names.exchange, "--log-level", "warning"]
    spawn(fleet, "registry", names.registry, [*cli, "registry", "--id", names.registry])
    for worker in names.workers:
        argv = [*cli, "run", "_bench_agents:Echo", "--id", worker]
        spawn(fleet, "worker", worker, [*argv, "--concurrency", str(args.concurrency)])
    spawn(fleet, "leader", names.leader, [*cli, "leader", "--id", names.leader])
    raw = [sys.executable, str(BENCH_DIR / "_raw_worker.py"), args.url]
    raw += [f"{names.exchange}.raw", f"{names.exchange}.raw.work", str(args.concurrency)]
    for worker in names.raw_workers:
        spawn(fleet, "raw", worker, [*raw, worker])


async def cleanup(url: str, names: Names) -> None:
    ex = names.exchange
    queues = [f"{ex}.service.{service}" for service in ("registry", "echo", "leader")]
    ids = [names.registry, names.leader, names.client, *names.workers]
    queues += [f"{ex}.instance.{agent_id}" for agent_id in ids]
    queues += [f"{ex}.dead-letter", f"{ex}.raw.work", f"{ex}.raw.reply"]
    async with await aio_pika.connect(url) as connection:
        channel = await connection.channel()
        targets = [(q, channel.queue_delete) for q in queues]
        for name, delete in [*targets, *((e, None) for e in (ex, f"{ex}.dlx", f"{ex}.raw"))]:
            try:
                await (delete or channel.exchange_delete)(name)
            except Exception as exc:  # say so, reopen the channel it closed, go on
                print(f"cleanup: {name}: {exc!r}", file=sys.stderr)
                channel = await connection.channel()


async def wait_ready(bus: Bus, names: Names, raw: RawLeader, fleet: list[Proc]) -> None:
    """Wait until the registry lists every worker and the leader, and raw workers consume."""
    wanted = {*names.workers, names.leader}
    deadline = time.monotonic() + READY_TIMEOUT
    listed: set[str] = set()
    consuming = 0
    while time.monotonic() < deadline:
        for proc in fleet:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with status {proc.popen.returncode}")
        listed = set()
        with contextlib.suppress(AgentBusError):
            reply = await bus.request("registry", "list_agents", timeout=2)
            listed = {row["agent_id"] for row in reply.result if row["status"] == "ready"}
        consuming = await raw.consumers()
        if wanted <= listed and consuming >= len(names.raw_workers):
            return
        await asyncio.sleep(0.2)
    missing = sorted(wanted - listed)
    print(f"not ready: registry lacks {missing}; {consuming} raw consumers", file=sys.stderr)
    raise TimeoutError(f"the fleet was not ready within {READY_TIMEOUT:g} s")


async def leader_run(client: PlanClient, n: int, max_parallel: int) -> dict[str, Any]:
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


async def bench(args: argparse.Namespace, names: Names, fleet: list[Proc]) -> dict[str, Any]:
    max_parallel = args.workers * args.concurrency
    settings = Settings(url=args.url, exchange=names.exchange)
    raw = RawLeader(args.url, f"{names.exchange}.raw", f"{names.exchange}.raw.work")
    roles = {"leader": "leader", "worker": "worker", "registry": "registry", "raw": "raw_workers"}
    pids = {key: [p.popen.pid for p in fleet if p.role == role] for role, key in roles.items()}
    pids |= {"bench": [os.getpid()], "broker": [pid] if (pid := broker_pid(args.url)) else []}
    rounds: dict[str, list[dict[str, Any]]] = {"raw": [], "leader": []}
    async with Bus(settings, agent_id=names.client) as bus:
        await raw.open(f"{names.exchange}.raw.reply")
        try:
            await wait_ready(bus, names, raw, fleet)
            client = PlanClient(bus)
            sides: dict[str, Callable[[int], Awaitable[dict[str, Any]]]] = {
                "raw": lambda n: raw.run(n, max_parallel),
                "leader": lambda n: leader_run(client, n, max_parallel),
            }
            for run in sides.values():  # warm up connections, caches and the directory
                await run(min(WARMUP, args.subtasks))
            for _ in range(args.rounds):
                for side, run in sides.items():
                    cpu0 = cpu_snapshot(pids)
                    figures = await run(args.subtasks)
                    cpu1 = cpu_snapshot(pids)
                    cpu = {role: round(cpu1[role] - cpu0[role], 3) for role in cpu0}
                    cpu["others"] = round(cpu.pop("host") - sum(cpu.values()), 3)
                    rounds[side].append(figures | {"cpu_s": cpu})
                    await asyncio.sleep(0.5)  # let heartbeats and stragglers settle
        finally:
            await raw.close()
    best = {side: max(rounds[side], key=lambda r: r["per_s"]) for side in rounds}
    ratio = best["leader"]["per_s"] / best["raw"]["per_s"]
    out = {"rounds": rounds, "best": best, "ratio": ratio, "pass": ratio >= TARGET_RATIO}
    return out | {"broker": raw.broker_version}


def report(r: dict[str, Any]) -> None:
    p, best, memory = r["params"], r["best"], r["memory"]
    print(f"leader bench  exchange={r['exchange']}  cpus={os.cpu_count()}  {platform.platform()}")
    print(f"python {platform.python_version()}  RabbitMQ {r['broker']}")
    print(
        f"plan: {p['subtasks']} independent echo subtasks + 1 fan-in total(values=[all]); "
        f"{p['workers']} worker processes x concurrency {p['concurrency']}; "
        f"max_parallel {p['max_parallel']}; warm-up {WARMUP}; {p['rounds']} rounds raw/leader\n"
    )
    roles = ("leader", "worker", "raw_workers", "registry", "broker", "bench", "others")
    heads = ("leader", "workers", "raw wkrs", "registry", "broker", "bench", "others")
    print(
        f"   {'run':<10}{'wall s':>8}{'drain s':>8}{'subtasks/s':>11}  CPU s:"
        + "".join(f"{h:>9}" for h in heads)
    )
    for side in ("raw", "leader"):
        for k, row in enumerate(r["rounds"][side], 1):
            cpu = "".join(f"{row['cpu_s'][x]:>9.2f}" for x in roles)
            label, drain = f"{side} #{k}", row.get("progress_drain_s")
            drained = "-" if drain is None else f"{drain:.3f}"
            print(
                f"   {label:<10}{row['seconds']:>8.3f}{drained:>8}{row['per_s']:>11.0f}{'':8}{cpu}"
            )
    print("   (drain: the leader sending queued progress events after the last subtask ended)")
    verdict = "PASS" if r["pass"] else "MISS"
    rows = [
        ("subtasks", f"{p['subtasks']} + 1 fan-in"),
        ("workers", f"{p['workers']} x concurrency {p['concurrency']}"),
        ("max_parallel", str(p["max_parallel"])),
        ("leader (best)", f"{best['leader']['seconds']:.3f} s  {best['leader']['per_s']:.0f}/s"),
        ("raw (best)", f"{best['raw']['seconds']:.3f} s  {best['raw']['per_s']:.0f}/s"),
        ("leader/raw", f"{r['ratio']:.3f}  target >= {TARGET_RATIO}  {verdict}"),
    ]
    for m in memory["cases"]:
        rows.append(
            (
                f"memory {m['subtasks']}",
                f"peak {m['peak_bytes'] / 1e6:.1f} MB = {m['peak_per_subtask']:.0f} B/subtask"
                f" (plan model {m['plan_per_subtask']:.0f} B; validate {m['validate_s']:.2f} s,"
                f" run {m['run_s']:.1f} s; progress events queued up to"
                f" {m['progress_backlog_max']})",
            )
        )
    rows.append(("memory growth", f"{memory['marginal_per_subtask']:.0f} B per extra subtask"))
    width = max(len(name) for name, _ in rows)
    print("\n" + "\n".join(f"   {name:<{width}}  {value}" for name, value in rows))
    print(f"   ({MEMORY_NOTE})")


def interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM: clean up as on Ctrl-C


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--subtasks", type=int, default=2000, help="<= 4000: plan and aggregate must fit 1 MiB"
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--memory-subtasks", type=int, default=10_000)
    parser.add_argument("--url", default=os.environ.get("AGENTBUS_URL", DEFAULT_URL))
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if not 1 <= args.subtasks <= 4000:
        parser.error("--subtasks must be 1 to 4000 (the aggregate must fit the 1 MiB message cap)")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    signal.signal(signal.SIGTERM, interrupt)
    names = Names.make(args.workers)
    fleet: list[Proc] = []
    try:
        start_fleet(args, names, fleet)
        results = asyncio.run(bench(args, names, fleet))
        mp = args.workers * args.concurrency
        results |= {"exchange": names.exchange, "params": vars(args) | {"max_parallel": mp}}
    except KeyboardInterrupt:
        print("interrupted: cleaning up", file=sys.stderr)
        return 130
    except Exception:
        dump_logs(fleet)
        raise
    finally:  # a second Ctrl-C must not leave processes or queues behind
        previous = (
            signal.signal(signal.SIGINT, signal.SIG_IGN),
            signal.signal(signal.SIGTERM, signal.SIG_IGN),
        )
        stop_fleet(fleet)
        try:
            asyncio.run(cleanup(args.url, names))
        except Exception as exc:
            print(f"cleanup of {names.exchange!r} failed: {exc!r}", file=sys.stderr)
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    try:
        sizes = sorted({min(1000, args.memory_subtasks), args.memory_subtasks})
        cases = [asyncio.run(memory_case(n, args.workers, args.concurrency, mp)) for n in sizes]
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    low, high = cases[0], cases[-1]
    span = high["subtasks"] - low["subtasks"]
    marginal = (high["peak_bytes"] - low["peak_bytes"]) / span if span else low["peak_per_subtask"]
    results["memory"] = {"cases": cases, "marginal_per_subtask": marginal}
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

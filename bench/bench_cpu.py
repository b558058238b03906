"""CPU time per request/response, agentbus against raw aio-pika, both sides measured.

Wall-clock latency on a shared 2-core host is noisy; CPU seconds per request are not (much).
The echo servers run as their own processes (_rr_sides.py ``serve``); the clients run here.
In each round every side makes ``--requests`` sequential requests; the client's CPU is
``time.process_time`` and the server's is read from /proc. Prints microseconds of CPU per
request (client, server, both) and the p50 latency, per round and as medians, with the
bus/raw ratios. ``--profile FILE`` writes a cProfile of each client's requests to FILE.SIDE.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import logging
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import aio_pika
import structlog

from _fleet import CLK_TCK, Proc, dump_logs, shielded, spawn, stop_fleet
from _rr_sides import Names, client, consumers
from bench_bus import DEFAULT_URL, delete_all, summary

SIDES = ("agentbus", "aio-pika")
RR_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rr_sides.py")


def cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


async def wait_ready(url: str, names: Names, fleet: list[Proc]) -> None:
    deadline = time.monotonic() + 60
    async with await aio_pika.connect(url) as connection:
        while time.monotonic() < deadline:
            for proc in fleet:
                if proc.popen.poll() is not None:
                    raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}")
            if all([await consumers(connection, names.service_queue(s)) for s in SIDES]):
                return
            await asyncio.sleep(0.2)
    raise TimeoutError("the echo servers were not ready")


async def measure(
    url: str, names: Names, pids: dict[str, int], args: argparse.Namespace
) -> dict[str, list[dict[str, float]]]:
    rows: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    profiles = {side: cProfile.Profile() for side in SIDES} if args.profile else {}
    async with contextlib.AsyncExitStack() as stack:
        calls = {
            side: await stack.enter_async_context(client(side, url, names, "cpu")) for side in SIDES
        }
        for call in calls.values():
            for i in range(500):
                await call(i)
        for k in range(args.rounds):
            for side, call in calls.items():
                gc.collect()
                samples: list[int] = []
                server0, times0 = cpu_split(pids[side]), os.times()
                if profiles:
                    profiles[side].enable()
                for i in range(args.requests):
                    start = time.perf_counter_ns()
                    await call(i)
                    samples.append(time.perf_counter_ns() - start)
                if profiles:
                    profiles[side].disable()
                times1, server1 = os.times(), cpu_split(pids[side])
                per = 1e6 / args.requests
                user, system = times1.user - times0.user, times1.system - times0.system
                row = {
                    "client_us": (user + system) * per,
                    "server_us": (sum(server1) - sum(server0)) * per,
                    "client_user_us": user * per,
                    "server_user_us": (server1[0] - server0[0]) * per,
                    "p50_us": summary(samples)["p50_us"],
                }
                rows[side].append(row)
                print(
                    f"round {k + 1} {side:<9} "
                    + "  ".join(f"{key} {v:7.1f}" for key, v in row.items()),
                    flush=True,
                )
    for side, profile in profiles.items():
        profile.dump_stats(f"{args.profile}.{side}")
    return rows


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("AGENTBUS_URL", DEFAULT_URL))
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", metavar="FILE", help="cProfile the clients to FILE.SIDE")
    parser.add_argument("--profile-server", metavar="FILE", help="cProfile the agentbus server")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    names = Names(f"bench-cpu-{uuid.uuid4().hex[:8]}")
    fleet: list[Proc] = []
    try:
        for side in SIDES:
            argv = [sys.executable, RR_SCRIPT, "serve", side, args.url, names.exchange]
            if side == "agentbus" and args.profile_server:
                argv[1:1] = ["-m", "cProfile", "-o", args.profile_server]
            spawn(fleet, side, f"{side} server", argv)
        asyncio.run(wait_ready(args.url, names, fleet))
        pids = {proc.role: proc.popen.pid for proc in fleet}
        rows = asyncio.run(measure(args.url, names, pids, args))
    except Exception:
        dump_logs(fleet)
        raise
    finally:
        with shielded():
            stop_fleet(fleet)
            asyncio.run(_cleanup(args.url, names))
    medians = {
        side: {key: statistics.median(row[key] for row in rows[side]) for key in rows[side][0]}
        for side in SIDES
    }
    for side in SIDES:
        medians[side]["total_us"] = medians[side]["client_us"] + medians[side]["server_us"]
    print("\nmedian over rounds, us per request")
    keys = ("client_us", "server_us", "total_us", "client_user_us", "server_user_us", "p50_us")
    print(f"{'':<10}{'client':>9}{'server':>9}{'total':>9}{'cl.user':>9}{'sv.user':>9}{'p50':>9}")
    for side in SIDES:
        m = medians[side]
        print(f"{side:<10}" + "".join(f"{m[k]:>9.1f}" for k in keys))
    ratio = {k: medians["agentbus"][k] / medians["aio-pika"][k] for k in medians["agentbus"]}
    print(f"{'bus/raw':<10}" + "".join(f"{ratio[k]:>9.2f}" for k in keys))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rounds": rows, "medians": medians, "ratios": ratio}, handle, indent=2)


async def _cleanup(url: str, names: Names) -> None:
    async with await aio_pika.connect(url) as connection:
        await delete_all(connection, names.queues(["cpu"]), names.exchanges())


if __name__ == "__main__":
    main()

"""Schedules across two leaders: each tick once through a kill -9, and the tick precision.

Two ``agentbus leader`` processes on their own exchange; a schedule ticking every second
sends a request to ``tickrec``, whose routing key a raw queue of this process is bound to
(every copy sent arrives there: a second copy of a tick would show). Halfway, the leader
that holds the lease is killed with SIGKILL and started again (two leaders again). The
once-check: every tick from the first to the last arrived exactly once. Precision, p50
and p99: the ticking leader's lag (the tick's time to its run's publish confirmed, from
``schedule_fired``) and the arrival lag (the tick's time to its arrival here).

    .venv/bin/python bench/bench_schedules.py              # 10 minutes
    .venv/bin/python bench/bench_schedules.py --minutes 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika

from agentbus import Settings, Unroutable, connect
from agentbus.envelopes import EventEnvelope
from agentbus.leader import SCHEDULE_FIRED, PlanClient


def _leader(url: str, exchange: str, agent_id: str, logs: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "agentbus", "--url", url, "--exchange", exchange]
    command += ["--log-format", "json", "leader", "--id", agent_id, "--heartbeat", "1"]
    with (logs / f"{agent_id}-{time.time():.0f}.log").open("wb") as log:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)


def _holder(logs: Path) -> str | None:
    # The leader that logged taking the schedules last (its log file's name says which).
    latest: tuple[str, str] | None = None
    for path in logs.glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if '"schedules taken"' in line:
                record = json.loads(line)
                if latest is None or record["timestamp"] > latest[0]:
                    latest = (record["timestamp"], record["leader"])
    return None if latest is None else latest[1]


def _tick(message_id: str) -> float:
    label = message_id.rsplit("-", 1)[1]
    return datetime.strptime(label, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()


def _percentiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"p50": values[0] if values else float("nan"), "p99": float("nan")}
    cuts = statistics.quantiles(values, n=100)
    p50, p99 = statistics.median(values), cuts[98]
    return {
        "p50": round(p50 * 1000, 2),
        "p99": round(p99 * 1000, 2),
        "max": round(max(values) * 1000, 2),
    }


async def bench(url: str, minutes: float, logs: Path) -> dict[str, Any]:
    exchange = f"bench-sched-{uuid.uuid4().hex[:8]}"
    leaders = {i: _leader(url, exchange, f"leader-{i}", logs) for i in (1, 2)}
    arrived: list[tuple[str, float]] = []
    fired: list[float] = []
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel()
        topic = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind(topic, routing_key="agent.tickrec.request")

        async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            arrived.append((str(message.message_id), time.time()))
            await message.ack()

        await queue.consume(take)
        async with connect(settings=Settings(url=url, exchange=exchange)) as bus:

            async def on_fired(event: EventEnvelope) -> None:
                if event.payload.event_data.get("lag") is not None:
                    fired.append(float(event.payload.event_data["lag"]))

            await bus.subscribe(f"broadcast.event.{SCHEDULE_FIRED}", on_fired)
            plans = PlanClient(bus)
            request = {"service": "tickrec", "action": "record"}
            schedule = {"name": "bench", "every": 1, "missed": "all", "request": request}
            for _ in range(600):  # the leaders start: their queue is not there yet
                try:
                    await plans.add_schedule(schedule, timeout=60)
                    break
                except Unroutable:
                    await asyncio.sleep(0.1)
            await asyncio.sleep(minutes * 30)  # the first half, ticking
            holder = _holder(logs)
            victim = int(str(holder).rsplit("-", 1)[1])
            leaders[victim].send_signal(signal.SIGKILL)
            leaders[victim].wait()
            killed_at = time.time()
            leaders[victim] = _leader(url, exchange, f"leader-{victim}", logs)
            await asyncio.sleep(minutes * 30)  # the second half
            await plans.remove_schedule("bench", timeout=30)
            await asyncio.sleep(2)  # the last runs on their way arrive
        await channel.queue_delete(f"{exchange}.lease.schedules")
        for name in ("schedules", "plans"):
            await channel.queue_delete(f"{exchange}.journal.{name}")
        await channel.queue_delete(f"{exchange}.service.leader")
    finally:
        for process in leaders.values():
            process.terminate()
        for process in leaders.values():
            process.wait(timeout=30)
        await connection.close()
    counts = Counter(message_id for message_id, _ in arrived)
    ticks = sorted({_tick(message_id) for message_id in counts})
    expected = round(ticks[-1] - ticks[0]) + 1 if ticks else 0
    arrival = [at - _tick(message_id) for message_id, at in arrived]
    return {
        "minutes": minutes,
        "killed": f"{holder} at {datetime.fromtimestamp(killed_at, UTC).isoformat()}",
        "ticks": len(ticks),
        "expected": expected,
        "twice": sum(1 for count in counts.values() if count > 1),
        "once_each": len(ticks) == expected and all(c == 1 for c in counts.values()),
        "leader_lag_ms": _percentiles(fired),
        "arrival_lag_ms": _percentiles(arrival),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument(
        "--url", default=os.environ.get("AGENTBUS_URL", "amqp://guest:guest@127.0.0.1:5672/")
    )
    parser.add_argument("--logs", type=Path, default=Path("/tmp/bench-schedules"))
    args = parser.parse_args()
    args.logs.mkdir(parents=True, exist_ok=True)
    for old in args.logs.glob("*.log"):
        old.unlink()
    result = asyncio.run(bench(args.url, args.minutes, args.logs))
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["once_each"] else 1)


if __name__ == "__main__":
    main()

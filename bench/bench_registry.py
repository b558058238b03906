"""Benchmark the registry: its CPU under N agents' heartbeats, and offline detection.

Starts a real ``agentbus registry`` process on a throwaway exchange, beats for N
simulated agents from this process (raw aio-pika without confirms, but exactly the
messages ``Agent.beat()`` sends), reads the registry's CPU from /proc, then silences K
agents and times their ``agent_offline`` events. See ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
import structlog
from aio_pika.abc import AbstractExchange

from agentbus import Settings
from agentbus._exceptions import AgentBusError
from agentbus.agents import HEARTBEAT, AgentCard, AgentStatus, Heartbeat, SkillCard
from agentbus.bus import Bus
from agentbus.envelopes import BROADCAST, EventEnvelope, EventPayload, encode, utcnow

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
MISSED = 3  # the registry's rule: offline after 3 silent intervals (receive time)
SERVICES = 10
CAPACITY = 8
CPU_TARGET = 0.5  # of one core
SWEEP_SLACK = 0.3  # s: the sweeper's 50 ms floor, delivery and event-loop jitter
READY_TIMEOUT = 30.0
HEARTBEAT_KEY = f"broadcast.event.{HEARTBEAT}"
CLK_TCK = os.sysconf("SC_CLK_TCK")
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
SKILLS = [SkillCard(name=f"op{j}", parameters=SCHEMA, result={"type": "string"}) for j in range(3)]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def host_busy_seconds() -> float:
    """CPU time all cores of the host spent busy (not idle nor iowait), from /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK


@dataclass(slots=True)
class SimAgent:
    id: str
    first: dict[str, Any]  # heartbeat event_data with the full card
    later: dict[str, Any]  # the card's digest only
    beats: int = 0
    last_sent: float = 0.0


def make_agents(n: int, interval: float, run: str) -> list[SimAgent]:
    started = utcnow()
    agents = []
    for i in range(n):
        service = f"bench-svc-{i % SERVICES}"
        agent_id = f"bench-{run}-{i:05d}"
        card = AgentCard(
            id=agent_id, name=service, description="simulated", skills=SKILLS, capacity=CAPACITY
        )
        beat = Heartbeat(
            agent_id=agent_id,
            service=service,
            status=AgentStatus.READY,
            in_flight=0,
            capacity=CAPACITY,
            interval=interval,
            card_digest=card.digest(),
            card=card,
            started_at=started,
        )
        first = beat.model_dump(mode="json", exclude_none=True)
        later = {key: value for key, value in first.items() if key != "card"}
        agents.append(SimAgent(agent_id, first, later))
    return agents


@dataclass
class Generator:
    """Beats for every agent once per interval, spread evenly over it."""

    exchange: AbstractExchange
    agents: list[SimAgent]
    interval: float
    silenced: set[int] = field(default_factory=set)
    sent: int = 0
    max_lag: float = 0.0
    started: float = 0.0  # wall clock

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        n = len(self.agents)
        step = self.interval / n
        start, self.started = loop.time(), time.time()
        k = 0
        while True:
            now = loop.time()
            while start + k * step <= now:
                self.max_lag = max(self.max_lag, loop.time() - (start + k * step))
                if k % n not in self.silenced:
                    await self._beat(self.agents[k % n])
                k += 1
            await asyncio.sleep(max(start + k * step - loop.time(), 0.002))

    async def _beat(self, agent: SimAgent) -> None:
        in_flight = agent.beats % CAPACITY  # some variety, as real agents have
        data = {**agent.later, "in_flight": in_flight} if agent.beats else agent.first
        envelope = EventEnvelope(
            sender_id=agent.id,
            receiver_id=BROADCAST,
            payload=EventPayload(event_name=HEARTBEAT, event_data=data),
        )
        message = aio_pika.Message(  # as agentbus's Publisher builds it for Agent.beat()
            encode(envelope),
            content_type="application/json",
            message_id=envelope.message_id,
            type=envelope.message_type,
            timestamp=envelope.timestamp,
            app_id="agentbus",
            delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
            expiration=self.interval * MISSED,
        )
        agent.last_sent = time.time()
        await self.exchange.publish(message, HEARTBEAT_KEY, mandatory=False)
        agent.beats += 1
        self.sent += 1


async def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def wait_ready(bus: Bus, registry_id: str, proc: subprocess.Popen[bytes]) -> None:
    """Wait until the registry answers and knows itself (so it hears heartbeats)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the registry exited with status {proc.returncode}")
        with contextlib.suppress(AgentBusError):
            reply = await bus.request(
                registry_id, "list_agents", {"service": "registry"}, timeout=1
            )
            if any(row["agent_id"] == registry_id for row in reply.result):
                return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the registry was not ready within {READY_TIMEOUT:g} s")


async def count_known(bus: Bus, registry_id: str, ids: set[str]) -> int:
    known = 0
    for i in range(SERVICES):  # one service at a time keeps each reply far under 1 MiB
        reply = await bus.request(
            registry_id, "list_agents", {"service": f"bench-svc-{i}"}, timeout=10
        )
        known += sum(row["agent_id"] in ids for row in reply.result)
    return known


async def bench(
    args: argparse.Namespace, run: str, registry_id: str, proc: subprocess.Popen[bytes]
) -> dict[str, Any]:
    interval = args.interval
    agents = make_agents(args.agents, interval, run)
    ids = {agent.id for agent in agents}
    online: dict[str, float] = {}
    offline: dict[str, tuple[float, float]] = {}  # agent id: (emitted, received)

    async def on_online(event: EventEnvelope) -> None:
        if event.sender_id == registry_id:
            online.setdefault(str(event.payload.event_data.get("agent_id")), time.time())

    async def on_offline(event: EventEnvelope) -> None:
        data = event.payload.event_data
        if event.sender_id == registry_id and data.get("reason") == "timeout":
            sent = event.timestamp.timestamp()
            offline.setdefault(str(data.get("agent_id")), (sent, time.time()))

    settings = Settings(url=args.url, exchange=args.exchange)
    async with (
        await aio_pika.connect(args.url) as connection,
        Bus(settings, agent_id=f"bench-client-{run}") as bus,
    ):
        await bus.subscribe("broadcast.event.agent_online", on_online)
        await bus.subscribe("broadcast.event.agent_offline", on_offline)
        await wait_ready(bus, registry_id, proc)
        channel = await connection.channel(publisher_confirms=False)
        generator = Generator(await channel.get_exchange(args.exchange), agents, interval)
        task = asyncio.create_task(generator.run())
        try:
            figures: dict[str, Any] = {"agents": args.agents, "interval_s": interval}
            figures["beats_offered_per_s"] = args.agents / interval
            if await wait_for(lambda: ids <= online.keys(), 10 * interval + 10):
                figures["time_to_know_all_s"] = max(online.values()) - generator.started
            await asyncio.sleep(interval)  # let the agent_online burst settle

            generator.max_lag = 0.0
            cpu0, wall0, sent0 = cpu_seconds(proc.pid), time.monotonic(), generator.sent
            host0, own0 = host_busy_seconds(), time.process_time()
            await asyncio.sleep(args.duration)
            cpu1, wall1, sent1 = cpu_seconds(proc.pid), time.monotonic(), generator.sent
            host1, own1 = host_busy_seconds(), time.process_time()
            probe = await connection.channel()
            queue = await probe.declare_queue(
                f"{args.exchange}.instance.{registry_id}", passive=True
            )
            beats = sent1 - sent0
            figures |= {
                "window_s": wall1 - wall0,
                "beats_achieved_per_s": beats / (wall1 - wall0),
                "generator_max_lag_s": generator.max_lag,
                "registry_cpu_cores": (cpu1 - cpu0) / (wall1 - wall0),
                "cpu_per_heartbeat_us": (cpu1 - cpu0) / beats * 1e6,
                "registry_backlog": queue.declaration_result.message_count,
                "generator_cpu_cores": (own1 - own0) / (wall1 - wall0),
                "host_busy_cores": (host1 - host0) / (wall1 - wall0),
                "host_cores": os.cpu_count(),
                "known_agents": await count_known(bus, registry_id, ids),
            }

            victims = range(0, args.agents, max(args.agents // args.kill, 1))[: args.kill]
            generator.silenced.update(victims)
            victim_agents = [agents[i] for i in victims]
            victim_ids = {agent.id for agent in victim_agents}
            await wait_for(lambda: victim_ids <= offline.keys(), 2 * MISSED * interval + 5)
            await asyncio.sleep(interval)  # a last chance for false alarms to show
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        gone = [(*offline[a.id], a.last_sent) for a in victim_agents if a.id in offline]
        latencies = sorted(emitted - last for emitted, _, last in gone)
        figures |= {
            "killed": len(victim_ids),
            "detected": len(latencies),
            "false_offline": sorted(offline.keys() - victim_ids),
            "detect_max_received_s": max((got - last for _, got, last in gone), default=None),
            "detect_min_s": latencies[0] if latencies else None,
            "detect_p50_s": statistics.median(latencies) if latencies else None,
            "detect_max_s": latencies[-1] if latencies else None,
        }
    bound = MISSED * interval
    figures["cpu_target_pass"] = figures["registry_cpu_cores"] < CPU_TARGET
    figures["detect_target_s"] = bound + SWEEP_SLACK
    figures["detect_target_pass"] = (
        len(latencies) == len(victim_ids)
        and not figures["false_offline"]
        and bound <= latencies[0]
        and latencies[-1] <= bound + SWEEP_SLACK
    )
    return figures


def report(f: dict[str, Any]) -> None:
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f} s = {value / f['interval_s']:.2f} intervals"

    know, lag = f.get("time_to_know_all_s"), f["generator_max_lag_s"] * 1000
    cpu, pass_cpu = f["registry_cpu_cores"], verdict(f["cpu_target_pass"])
    rows = [
        ("agents", f"{f['agents']} (interval {f['interval_s']:g} s)"),
        ("beats/s offered", f"{f['beats_offered_per_s']:.0f}"),
        ("beats/s achieved", f"{f['beats_achieved_per_s']:.1f} (max lag {lag:.1f} ms)"),
        ("registry CPU", f"{cpu:.3f} core over {f['window_s']:.1f} s"),
        ("CPU target", f"< {CPU_TARGET} core: {pass_cpu}"),
        ("CPU per heartbeat", f"{f['cpu_per_heartbeat_us']:.0f} µs"),
        ("registry backlog", f"{f['registry_backlog']} messages at window end"),
        ("host busy", f"{f['host_busy_cores']:.2f} of {f['host_cores']} cores "
         f"(generator + client {f['generator_cpu_cores']:.2f})"),
        ("known agents", f"{f['known_agents']} / {f['agents']}"),
        ("time to know all", "-" if know is None else f"{know:.3f} s"),
        ("offline detected", f"{f['detected']} / {f['killed']}, false alarms: "
         + (", ".join(f["false_offline"]) or "none")),
        ("detection min", seconds(f["detect_min_s"])),
        ("detection p50", seconds(f["detect_p50_s"])),
        ("detection max", seconds(f["detect_max_s"])),
        ("  as received", seconds(f["detect_max_received_s"])),
        ("detection target", f"{MISSED} intervals to {f['detect_target_s']:.3f} s: "
         + verdict(f["detect_target_pass"])),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    print("\n".join(f"{name:<{width}}  {value}" for name, value in rows))


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def cleanup(url: str, exchange: str, ids: list[str]) -> None:
    queues = [f"{exchange}.instance.{i}" for i in ids]
    queues += [f"{exchange}.service.registry", f"{exchange}.dead-letter"]
    async with await aio_pika.connect(url) as connection:
        channel = await connection.channel()
        for name in queues:
            await channel.queue_delete(name)
        for name in (exchange, f"{exchange}.dlx"):
            await channel.exchange_delete(name)


def registry_command(args: argparse.Namespace, registry_id: str) -> list[str]:
    return [
        str(Path(sys.executable).with_name("agentbus")),  # the venv's console script
        *("--url", args.url, "--exchange", args.exchange, "--log-level", "warning"),
        *("registry", "--heartbeat", str(args.interval), "--missed", str(MISSED)),
        *("--id", registry_id),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000, help="simulated agents [1000]")
    parser.add_argument("--interval", type=float, default=1.0, help="heartbeat interval, s [1]")
    parser.add_argument("--duration", type=float, default=20.0, help="CPU window, s [20]")
    parser.add_argument("--kill", type=int, default=20, help="agents silenced at the end [20]")
    parser.add_argument("--url", default=os.environ.get("AGENTBUS_URL", DEFAULT_URL))
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    if not 1 <= args.kill <= args.agents:
        parser.error("--kill must be between 1 and --agents")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    run = uuid.uuid4().hex[:8]
    args.exchange = f"bench-registry-{run}"
    registry_id = f"registry-{run}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            registry_command(args, registry_id),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches only us; we stop the registry
        )
        try:
            figures = asyncio.run(bench(args, run, registry_id, proc))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except Exception:
            log.seek(0)
            sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
            raise
        finally:
            stop(proc)
            try:
                asyncio.run(cleanup(args.url, args.exchange, [registry_id, f"bench-client-{run}"]))
            except Exception as exc:
                print(f"cleanup of {args.exchange!r} failed: {exc!r}", file=sys.stderr)
    report(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

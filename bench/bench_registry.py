"""The registry under simulated agents, suite.py's ``registry`` section: ``Agent.beat()``'s
messages from this process and sender children (``bench_registry.py CONFIG INDEX COUNT``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace as Config
from typing import Any

import aio_pika
import orjson
from pamqp.commands import Basic

import _harness as harness
from agentbus import AgentBusError, Bus, EventEnvelope, Settings, encode
from agentbus.agents import HEARTBEAT, AgentCard, AgentStatus, Heartbeat, SkillCard
from agentbus.envelopes import BROADCAST, EventPayload, new_message_id, utcnow

MISSED = 3  # the registry's rule: offline after 3 silent intervals (receive time)
SERVICES = 25  # 50,000 agents: 2,000 a service, a list_agents reply of ~500 KB (cap 1 MiB)
CAPACITY = 8
SWEEP_SLACK = 0.3  # s: the sweeper's 50 ms floor, delivery and event-loop jitter
KEEP_UP = 0.95  # of the beats offered per second, sent in the window
PROBE_EVERY = 1.0  # s: a list_agents round trip through the registry's own queue
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
SKILLS = [SkillCard(name=f"op{j}", parameters=SCHEMA, result={"type": "string"}) for j in range(3)]
TEMPLATE = orjson.loads(encode(EventEnvelope(sender_id="x", receiver_id=BROADCAST,
                        payload=EventPayload(event_name=HEARTBEAT, event_data={}))))  # fmt: skip


@dataclass(slots=True)
class SimAgent:
    id: str
    first: dict[str, Any]  # heartbeat event_data with the full card
    later: dict[str, Any]  # the card's digest only
    beats: int = 0
    last_sent: float = 0.0


def make_agents(n: int, interval: float, run: str, indices: Any = None) -> list[SimAgent]:
    """The simulated agents ``0..n-1`` of a run, or only those at ``indices``."""
    started, agents = utcnow(), []
    for i in range(n) if indices is None else indices:
        service, agent_id = f"bench-svc-{i % SERVICES}", f"bench-{run}-{i:05d}"
        card = AgentCard(id=agent_id, name=service, description="simulated", skills=SKILLS,
                         capacity=CAPACITY)  # fmt: skip
        beat = Heartbeat(agent_id=agent_id, service=service, status=AgentStatus.READY,
                         in_flight=0, capacity=CAPACITY, interval=interval,
                         card_digest=card.digest(), card=card, started_at=started)  # fmt: skip
        first = beat.model_dump(mode="json", exclude_none=True)
        later = {key: value for key, value in first.items() if key != "card"}
        agents.append(SimAgent(agent_id, first, later))
    return agents


def victims(n: int, kill: int) -> list[int]:
    """The indices of the ``kill`` agents silenced at the end, spread over all ``n``."""
    return list(range(0, n, max(n // kill, 1))[:kill])


@dataclass
class Generator:
    """Each agent's beat once an interval, spread over it; joining over ``ramp`` s if given."""

    agents: list[SimAgent]
    interval: float
    ramp: float = 0.0
    silenced: set[int] = field(default_factory=set)
    sent: int = 0
    task: asyncio.Task[None] | None = None

    async def start(self, url: str, exchange: str) -> None:
        self._connection = await aio_pika.connect(url)
        channel = await self._connection.channel(publisher_confirms=False)
        self._exchange = await channel.get_exchange(exchange)
        self.task = asyncio.create_task(self._run())

    async def aclose(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self._connection.close()

    async def _run(self) -> None:
        loop, n = asyncio.get_running_loop(), len(self.agents)
        step, k = self.interval / n, 0
        start = loop.time()
        while True:
            now = loop.time()
            joined = n if now - start >= self.ramp else int(n * (now - start) / self.ramp)
            while start + k * step <= now:
                if k % n not in self.silenced and k % n < joined:
                    await self._beat(self.agents[k % n])
                k += 1
            await asyncio.sleep(max(start + k * step - loop.time(), 0.002))

    async def _beat(self, agent: SimAgent) -> None:
        data = {**agent.later, "in_flight": agent.beats % CAPACITY} if agent.beats else agent.first
        data = {**data, "seq": agent.beats}  # numbered as Agent.beat() numbers them
        # Agent.beat()'s bytes and properties, built without models: the host is shared.
        message_id, now = new_message_id(), utcnow()
        envelope = {**TEMPLATE, "message_id": message_id, "timestamp": now, "sender_id": agent.id,
                    "payload": {**TEMPLATE["payload"], "event_data": data}}  # fmt: skip
        properties = Basic.Properties(
            app_id="agentbus", content_type="application/json", delivery_mode=1,
            expiration=str(int(self.interval * MISSED * 1000)), headers={},
            message_id=message_id, message_type="event", priority=0, timestamp=now,
        )  # fmt: skip
        agent.last_sent = time.time()
        channel = await self._exchange.channel.get_underlay_channel()
        await channel.basic_publish(orjson.dumps(envelope, option=orjson.OPT_UTC_Z),
                                    exchange=self._exchange.name, properties=properties,
                                    routing_key=f"broadcast.event.{HEARTBEAT}")  # fmt: skip
        agent.beats += 1
        self.sent += 1


async def sender(cfg: Config, index: int, count: int) -> None:
    """Sender process ``index`` of ``count``: its share of beats; ``beats SENT`` each 0.2 s."""
    silent = set(victims(cfg.agents, cfg.kill))
    share = [i for i in range(cfg.agents) if i not in silent][index::count]
    generator = Generator(make_agents(cfg.agents, cfg.interval, cfg.run, share), cfg.interval,
                          cfg.ramp)  # fmt: skip
    await generator.start(cfg.url, cfg.exchange)
    while True:
        await asyncio.sleep(0.2)
        print(f"beats {generator.sent}", flush=True)


def beats(senders: list[harness.Proc]) -> int:
    """The beats the sender processes have sent so far."""
    return sum(next((int(line.split()[1]) for line in reversed(proc.tail(200).splitlines())
                     if line.startswith("beats ")), 0) for proc in senders)  # fmt: skip


async def ask(bus: Bus, registry_id: str, action: str, timeout: float = 3.0, **params: Any) -> Any:
    """The registry's answer to ``action``; None if it does not answer in time."""
    with contextlib.suppress(AgentBusError):
        return (await bus.request(registry_id, action, params, timeout=timeout)).result
    return None


async def count_known(bus: Bus, registry_id: str, ids: set[str]) -> int | None:
    """How many simulated agents the registry lists; None if it does not answer in time."""
    known = 0
    for i in range(SERVICES):  # one service at a time keeps each reply far under 1 MiB
        rows = await ask(bus, registry_id, "list_agents", 10, service=f"bench-svc-{i}")
        if rows is None:
            return None
        known += sum(row["agent_id"] in ids for row in rows)
    return known


async def probe(bus: Bus, registry_id: str, duration: float, timeout: float) -> tuple[list, list]:
    """Each second: a request's round trip behind the beats, and the beats' age (its stats)."""
    lags: list[float] = []
    beat_lags: list[float] = []
    end = time.monotonic() + duration
    while time.monotonic() < end:
        start = time.monotonic()
        answered = await ask(bus, registry_id, "list_agents", timeout, service="bench-none")
        lags.append(timeout if answered is None else time.monotonic() - start)
        stats = await ask(bus, registry_id, "stats") or {}
        if stats.get("beat_lag_max_s") is not None:
            beat_lags.append(stats["beat_lag_max_s"])
        await asyncio.sleep(max(min(start + PROBE_EVERY, end) - time.monotonic(), 0))
    return lags, beat_lags


async def heard_by_all(bus: Bus, registry_ids: list[str]) -> int:
    """Beats the registries took off the wire themselves (not by another's digest), in all."""
    return sum([(await ask(bus, rid, "stats") or {}).get("heartbeats", 0) for rid in registry_ids])


async def bench(args: Config, run: str, registry_ids: list[str],
                fleet: harness.Fleet) -> dict:  # fmt: skip
    registry_id = registry_ids[0]  # the one asked and listened to: any of them answers alike
    interval, ramp = args.interval, args.ramp
    agents = make_agents(args.agents, interval, run)
    ids = {agent.id for agent in agents}
    online: dict[str, float] = {}
    offline: dict[str, tuple[float, float]] = {}  # agent id: (emitted, received)

    async def on_news(event: EventEnvelope) -> None:
        data, mine = event.payload.event_data, event.sender_id == registry_id
        agent_id, now = str(data.get("agent_id")), time.time()
        if mine and event.payload.event_name == "agent_online":
            online.setdefault(agent_id, now)
        elif mine and data.get("reason") == "timeout":
            offline.setdefault(agent_id, (event.timestamp.timestamp(), now))

    settings = Settings(url=args.url, exchange=args.exchange)
    async with (
        await aio_pika.connect(args.url) as connection,
        Bus(settings, agent_id=f"bench-client-{run}") as bus,
    ):
        for news in ("agent_online", "agent_offline"):
            await bus.subscribe(f"broadcast.event.{news}", on_news)

        async def ready() -> bool:  # the registry answers, and knows itself: it hears beats
            rows = await ask(bus, registry_id, "list_agents", 1, service="registry") or []
            return any(row["agent_id"] == registry_id for row in rows)

        await fleet.wait(ready, "the registry", 30)
        registry_pids = fleet.pids("registry")
        silenced = victims(args.agents, args.kill)
        victim_agents = [agents[i] for i in silenced]
        # With senders, child processes beat for all but the victims; this one for those.
        own_agents = victim_agents if args.senders else agents
        generator = Generator(own_agents, interval, 0.0 if args.senders else ramp)
        await generator.start(args.url, args.exchange)
        argv = [sys.executable, __file__, json.dumps(vars(args) | {"run": run})]
        senders = [fleet.spawn("sender", f"sender {k}", [*argv, str(k), str(args.senders)])
                   for k in range(args.senders)]  # fmt: skip
        figures: dict[str, Any] = {"agents": args.agents, "interval_s": interval,
                                   "senders": args.senders, "ramp_s": ramp,
                                   "beats_offered_per_s": args.agents / interval}  # fmt: skip
        try:
            with contextlib.suppress(TimeoutError):
                wait = ramp + 10 * interval + 10
                await fleet.wait(lambda: ids <= online.keys(), "all agents", wait)
            await asyncio.sleep(interval)  # let the agent_online burst settle

            heard0 = await heard_by_all(bus, registry_ids)
            broker = harness.broker_pid(args.url)
            pids = {"registry": registry_pids, "senders": [p.pid for p in senders],
                    "broker": [broker] if broker else []}  # fmt: skip
            cpu0, wall0, own0 = harness.cpu_snapshot(pids), time.monotonic(), time.process_time()
            sent0 = generator.sent + beats(senders)
            lags, beat_lags = await probe(bus, registry_id, args.duration, MISSED * interval)
            cpu = harness.cpu_split(cpu0, harness.cpu_snapshot(pids))
            wall, own_cpu = time.monotonic() - wall0, time.process_time() - own0
            sent = generator.sent + beats(senders) - sent0
            stats1 = await ask(bus, registry_id, "stats") or {}
            heard = await heard_by_all(bus, registry_ids) - heard0
            queue, looks = f"{args.exchange}.instance.{registry_id}", []
            for _ in range(3):  # the fewest of 3 looks 0.1 s apart: a backlog, not a blip
                looks.append((await harness.queue_counts(connection, queue))[0])
                await asyncio.sleep(0.1)
            figures |= {
                "window_s": wall, "beats_achieved_per_s": sent / wall,
                "beats_processed_per_s": heard / wall,
                "registry_cpu_cores": cpu["registry"] / wall,
                "cpu_per_heartbeat_us": cpu["registry"] / max(heard, 1) * 1e6,
                "registry_backlog": min(looks),
                "queue_lag_p50_s": statistics.median(lags), "queue_lag_max_s": max(lags),
                "beat_lag_max_s": max(beat_lags, default=None),
                "generator_cpu_cores": (own_cpu + cpu["senders"]) / wall,
                "broker_cpu_cores": cpu["broker"] / wall if pids["broker"] else None,
                "registry_rss": harness.rss(registry_pids[0]), "host_cores": os.cpu_count(),
                "host_busy_cores": sum(cpu.values()) / wall,
                "known_agents": await count_known(bus, registry_id, ids),
                "beats_lost": stats1.get("beats_lost"), "overloaded": stats1.get("overloaded"),
            }  # fmt: skip

            generator.silenced.update(range(len(own_agents)) if args.senders else silenced)
            victim_ids = {agent.id for agent in victim_agents}
            # Offline before the silence is a false alarm; only what follows it is detection.
            early = set(offline)
            for agent_id in victim_ids:
                offline.pop(agent_id, None)
            with contextlib.suppress(TimeoutError):
                wait = 2 * MISSED * interval + 5
                await fleet.wait(lambda: victim_ids <= offline.keys(), "offline", wait)
            await asyncio.sleep(interval)  # a last chance for false alarms to show
        finally:
            harness.stop(senders)
            await generator.aclose()
    gone = [(*offline[a.id], a.last_sent) for a in victim_agents if a.id in offline]
    latencies = sorted(emitted - last for emitted, _, last in gone)
    bound, false = MISSED * interval, sorted(early | (offline.keys() - victim_ids))
    detected = len(latencies) == len(victim_ids) and not false
    in_bound = bool(latencies) and bound <= latencies[0] and latencies[-1] <= bound + SWEEP_SLACK
    figures |= {
        "killed": len(victim_ids), "detected": len(latencies), "false_offline": false,
        "detect_p50_s": statistics.median(latencies) if latencies else None,
        "detect_max_s": latencies[-1] if latencies else None,
        "detect_target_s": bound + SWEEP_SLACK, "detect_target_pass": detected and in_bound,
    }  # fmt: skip
    figures["keeps_up_pass"] = (  # every beat offered is sent, and the registry is not behind
        figures["beats_achieved_per_s"] >= KEEP_UP * figures["beats_offered_per_s"]
        and figures["registry_backlog"] == 0
        and figures["queue_lag_max_s"] < interval
        and (figures["beat_lag_max_s"] or 0.0) < interval
        and figures["beats_processed_per_s"] >= KEEP_UP * figures["beats_achieved_per_s"]
        and figures["known_agents"] == args.agents
        and figures["detect_target_pass"]
    )
    return figures


def run_registry(url: str, cfg: Config, say: harness.Say) -> list[dict[str, Any]]:
    """suite.py's section: each of ``cfg.cases`` on registry processes (K > 1 sharing the
    beats: ``--share``) on a throwaway exchange, deleted after."""
    cases = []
    for agents, interval, senders, ramp, *more in cfg.cases:  # a sender: ~4,000 beats/s
        run, count = uuid.uuid4().hex[:8], more[0] if more else 1
        args = Config(url=url, agents=agents, interval=interval, ramp=ramp, duration=cfg.duration,
                      kill=min(20, agents), senders=senders, registries=count,
                      exchange=f"bench-registry-{run}")  # fmt: skip
        ids = [f"registry-{run}"] + [f"registry-{run}-{k}" for k in range(2, count + 1)]
        with harness.Fleet(url) as fleet:
            fleet.topology(args.exchange, ("registry",), (*ids, f"bench-client-{run}"))
            fleet.queues.append(f"{args.exchange}.feed.registry.heartbeats")
            share = ["--share"] if count > 1 else []
            for registry_id in ids:
                fleet.agentbus(args.exchange, "registry", "--heartbeat", str(interval),
                               "--missed", str(MISSED), *share, "--id", registry_id)  # fmt: skip
            cases.append(f := asyncio.run(bench(args, run, ids, fleet)) | {"registries": count})
        say(f"registry {agents} every {interval:g} s: {f['beats_processed_per_s']:.0f} beats/s, "
            f"{f['registry_cpu_cores']:.2f} core, keeps up {f['keeps_up_pass']}")  # fmt: skip
    return cases


if __name__ == "__main__":  # a sender process: bench_registry.py CONFIG INDEX COUNT
    harness.quiet_logging()
    asyncio.run(sender(Config(**json.loads(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])))

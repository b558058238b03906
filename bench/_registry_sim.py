"""Simulated agents for bench_registry.py: heartbeats as ``Agent.beat()`` sends them."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import orjson
from aio_pika.abc import AbstractExchange
from pamqp.commands import Basic

from agentbus.agents import HEARTBEAT, AgentCard, AgentStatus, Heartbeat, SkillCard
from agentbus.envelopes import (
    BROADCAST,
    EventEnvelope,
    EventPayload,
    encode,
    new_message_id,
    utcnow,
)

MISSED = 3  # the registry's rule: offline after 3 silent intervals (receive time)
SERVICES = 10
CAPACITY = 8
HEARTBEAT_KEY = f"broadcast.event.{HEARTBEAT}"
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
SKILLS = [SkillCard(name=f"op{j}", parameters=SCHEMA, result={"type": "string"}) for j in range(3)]


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
        # The bytes encode(EventEnvelope(...)) gives and the properties agentbus's
        # Publisher sets for Agent.beat(), built without models or an aio_pika.Message:
        # the generator shares the host with the registry and should cost it little CPU.
        message_id, now = new_message_id(), utcnow()
        envelope = {**TEMPLATE, "message_id": message_id, "timestamp": now}
        envelope |= {"sender_id": agent.id, "payload": {**PAYLOAD, "event_data": data}}
        properties = Basic.Properties(
            app_id="agentbus",
            content_type="application/json",
            delivery_mode=1,
            expiration=str(int(self.interval * MISSED * 1000)),
            headers={},
            message_id=message_id,
            message_type="event",
            priority=0,
            timestamp=now,
        )
        agent.last_sent = time.time()
        channel = await self.exchange.channel.get_underlay_channel()
        await channel.basic_publish(
            orjson.dumps(envelope, option=orjson.OPT_UTC_Z),
            exchange=self.exchange.name,
            routing_key=HEARTBEAT_KEY,
            properties=properties,
        )
        agent.beats += 1
        self.sent += 1


def _template() -> tuple[dict[str, Any], dict[str, Any]]:
    """An encoded heartbeat envelope's fields, in order, and its payload's."""
    payload = EventPayload(event_name=HEARTBEAT, event_data={})
    envelope = EventEnvelope(sender_id="x", receiver_id=BROADCAST, payload=payload)
    fields = orjson.loads(encode(envelope))
    return fields, fields["payload"]


TEMPLATE, PAYLOAD = _template()


class Senders:
    """Beats for ``agents`` from ``count`` child processes, so one core's worth of Python
    is not the limit: each child runs a Generator for its share and reports its counts."""

    def __init__(
        self, url: str, exchange: str, agents: list[SimAgent], interval: float, count: int
    ):
        context = multiprocessing.get_context("spawn")
        self._sent = [context.Value("q", 0) for _ in range(count)]
        self._lag = [context.Value("d", 0.0) for _ in range(count)]
        self._procs = [
            context.Process(
                target=run_sender,
                args=(url, exchange, agents[i::count], interval, self._sent[i], self._lag[i]),
                daemon=True,
            )
            for i in range(count)
        ]

    def start(self) -> None:
        for proc in self._procs:
            proc.start()

    def stop(self) -> None:
        for proc in self._procs:
            proc.terminate()
        for proc in self._procs:
            proc.join(timeout=10)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs if proc.pid is not None]

    @property
    def sent(self) -> int:
        return sum(int(value.value) for value in self._sent)

    @property
    def max_lag(self) -> float:
        return max((float(value.value) for value in self._lag), default=0.0)

    @max_lag.setter
    def max_lag(self, value: float) -> None:
        for shared in self._lag:
            shared.value = value


def run_sender(
    url: str, exchange: str, agents: list[SimAgent], interval: float, sent: Any, lag: Any
) -> None:
    """A child process's life: beat for ``agents`` until terminated."""
    asyncio.run(_send(url, exchange, agents, interval, sent, lag))


async def _send(
    url: str, exchange: str, agents: list[SimAgent], interval: float, sent: Any, lag: Any
) -> None:
    connection = await aio_pika.connect(url)
    channel = await connection.channel(publisher_confirms=False)
    generator = Generator(await channel.get_exchange(exchange), agents, interval)
    task = asyncio.create_task(generator.run())
    while not task.done():
        await asyncio.sleep(0.2)
        sent.value = generator.sent
        lag.value = max(lag.value, generator.max_lag)
        generator.max_lag = 0.0
    await task  # raises what stopped it

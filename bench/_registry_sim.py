"""Simulated agents for bench_registry.py: heartbeats as ``Agent.beat()`` sends them."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import orjson
from aio_pika.abc import AbstractExchange

from agentbus.agents import HEARTBEAT, AgentCard, AgentStatus, Heartbeat, SkillCard
from agentbus.envelopes import BROADCAST, EventEnvelope, EventPayload, encode, utcnow

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
        # The bytes encode(EventEnvelope(...)) gives, built without the models: the
        # generator shares the host with the registry and should cost it little CPU.
        message_id, now = str(uuid.uuid4()), utcnow()
        envelope = {**TEMPLATE, "message_id": message_id, "timestamp": now}
        envelope |= {"sender_id": agent.id, "payload": {**PAYLOAD, "event_data": data}}
        message = aio_pika.Message(  # as agentbus's Publisher builds it for Agent.beat()
            orjson.dumps(envelope, option=orjson.OPT_UTC_Z),
            content_type="application/json",
            message_id=message_id,
            type="event",
            timestamp=now,
            app_id="agentbus",
            delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
            expiration=self.interval * MISSED,
        )
        agent.last_sent = time.time()
        await self.exchange.publish(message, HEARTBEAT_KEY, mandatory=False)
        agent.beats += 1
        self.sent += 1


def _template() -> tuple[dict[str, Any], dict[str, Any]]:
    """An encoded heartbeat envelope's fields, in order, and its payload's."""
    payload = EventPayload(event_name=HEARTBEAT, event_data={})
    envelope = EventEnvelope(sender_id="x", receiver_id=BROADCAST, payload=payload)
    fields = orjson.loads(encode(envelope))
    return fields, fields["payload"]


TEMPLATE, PAYLOAD = _template()

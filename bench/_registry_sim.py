"""Simulated agents for bench_registry.py: heartbeats as ``Agent.beat()`` sends them."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import orjson
from aio_pika.abc import AbstractExchange
from pamqp.commands import Basic

from _harness import Fleet, Proc, stop
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
SERVICES = 25  # 50,000 agents: 2,000 a service, a list_agents reply of ~500 KB (cap 1 MiB)
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


def make_agents(
    n: int, interval: float, run: str, indices: Iterable[int] | None = None
) -> list[SimAgent]:
    """The simulated agents ``0..n-1`` of a run, or only those at ``indices``."""
    started = utcnow()
    agents = []
    for i in range(n) if indices is None else indices:
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
    """Beats for every agent once per interval, spread evenly over it.

    With ``ramp`` seconds, the agents join in order over that time (agent ``i`` of ``n``
    from ``i / n * ramp`` on) rather than all in the first interval.
    """

    exchange: AbstractExchange
    agents: list[SimAgent]
    interval: float
    ramp: float = 0.0
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
            joined = n if now - start >= self.ramp else int(n * (now - start) / self.ramp)
            while start + k * step <= now:
                self.max_lag = max(self.max_lag, loop.time() - (start + k * step))
                if k % n not in self.silenced and k % n < joined:
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


def victims(n: int, kill: int) -> list[int]:
    """The indices of the ``kill`` agents silenced at the end, spread over all ``n``."""
    return list(range(0, n, max(n // kill, 1))[:kill])


class Senders:
    """Beats for all but the victims from ``count`` child processes of the fleet, so one
    core's worth of Python is not the limit: each runs a Generator for its share and
    reports its counts on stdout (``python bench/_registry_sim.py``, below)."""

    def __init__(
        self, fleet: Fleet, exchange: str, interval: float, run: str, ramp: float = 0.0
    ) -> None:
        self._fleet = fleet
        self._argv = [exchange, str(interval), str(ramp), run]
        self._sent: dict[int, int] = {}
        self._lag = 0.0
        self._procs: list[Proc] = []

    def start(self, agents: int, kill: int, count: int) -> None:
        assert self._fleet.url is not None
        for index in range(count):
            argv = [sys.executable, __file__, self._fleet.url, *self._argv]
            argv += [str(agents), str(kill), str(index), str(count)]
            proc = self._fleet.spawn("sender", f"heartbeat sender {index}", argv, pipes=True)
            self._procs.append(proc)
            threading.Thread(target=self._read, args=(index, proc), daemon=True).start()

    def _read(self, index: int, proc: Proc) -> None:
        assert proc.popen.stdout is not None
        for line in proc.popen.stdout:
            sent, lag = line.split()
            self._sent[index] = int(sent)
            self._lag = max(self._lag, float(lag))

    def stop(self) -> None:
        stop(self._procs)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]

    @property
    def sent(self) -> int:
        return sum(self._sent.values())

    @property
    def max_lag(self) -> float:
        return self._lag

    @max_lag.setter
    def max_lag(self, value: float) -> None:
        self._lag = value


async def send(
    url: str, exchange: str, agents: list[SimAgent], interval: float, ramp: float
) -> None:
    """A sender process's life: beat for ``agents`` until terminated, counts on stdout."""
    connection = await aio_pika.connect(url)
    channel = await connection.channel(publisher_confirms=False)
    generator = Generator(await channel.get_exchange(exchange), agents, interval, ramp)
    task = asyncio.create_task(generator.run())
    while not task.done():
        await asyncio.sleep(0.2)
        print(generator.sent, generator.max_lag, flush=True)
        generator.max_lag = 0.0
    await task  # raises what stopped it


if __name__ == "__main__":
    url, exchange, interval, ramp, run, n, kill, index, count = sys.argv[1:10]
    silent = set(victims(int(n), int(kill)))
    others = [i for i in range(int(n)) if i not in silent]
    share = make_agents(int(n), float(interval), run, others[int(index) :: int(count)])
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(send(url, exchange, share, float(interval), float(ramp)))

"""The liveness table: agents known from heartbeats, judged on receive time."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel

from agentbus.agents import AgentCard, AgentStatus, Heartbeat
from agentbus.envelopes import utcnow

__all__ = ["AgentInfo", "LivenessTable", "Record", "Transition"]

OFFLINE = "offline"


class Transition(enum.Enum):
    """A change of an agent's liveness."""

    ONLINE = "online"
    OFFLINE = "offline"


class AgentInfo(BaseModel):
    """What the registry tells about one agent."""

    agent_id: str
    service: str
    status: str
    in_flight: int
    capacity: int
    skills: list[str]
    interval: float
    last_seen: datetime
    age: float
    card_digest: str


@dataclass(slots=True)
class Record:
    """The registry's view of one agent."""

    agent_id: str
    service: str
    status: str
    in_flight: int
    capacity: int
    interval: float
    card_digest: str
    card: AgentCard | None
    last_seen: float
    last_seen_at: datetime
    online: bool = True

    @property
    def skills(self) -> list[str]:
        return self.card.skill_names if self.card is not None else []

    @property
    def load(self) -> float:
        return self.in_flight / self.capacity

    def info(self, now: float) -> AgentInfo:
        return AgentInfo(
            agent_id=self.agent_id,
            service=self.service,
            status=self.status if self.online else OFFLINE,
            in_flight=self.in_flight,
            capacity=self.capacity,
            skills=self.skills,
            interval=self.interval,
            last_seen=self.last_seen_at,
            age=round(now - self.last_seen, 3),
            card_digest=self.card_digest,
        )


class LivenessTable:
    """Agents by id; offline once ``missed`` of their own intervals pass without a beat."""

    def __init__(
        self,
        *,
        missed: int = 3,
        forget_after: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.missed = missed
        self._forget_after = forget_after
        self._clock = clock
        self._records: dict[str, Record] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._records

    def records(self) -> list[Record]:
        return list(self._records.values())

    def get(self, agent_id: str) -> Record | None:
        return self._records.get(agent_id)

    def observe(self, beat: Heartbeat) -> tuple[Record, Transition | None]:
        """Record a heartbeat; say whether the agent just came online."""
        now = self._clock()
        record = self._records.get(beat.agent_id)
        card = beat.card
        if record is None:
            record = Record(
                agent_id=beat.agent_id,
                service=beat.service,
                status=beat.status.value,
                in_flight=beat.in_flight,
                capacity=beat.capacity,
                interval=beat.interval,
                card_digest=beat.card_digest,
                card=card,
                last_seen=now,
                last_seen_at=utcnow(),
            )
            self._records[beat.agent_id] = record
            return record, Transition.ONLINE
        transition = None if record.online else Transition.ONLINE
        record.service = beat.service
        record.status = beat.status.value
        record.in_flight = beat.in_flight
        record.capacity = beat.capacity
        record.interval = beat.interval
        record.last_seen = now
        record.last_seen_at = utcnow()
        record.online = True
        if card is not None:
            record.card = card
        elif beat.card_digest != record.card_digest:
            record.card = None  # changed; to be fetched again
        record.card_digest = beat.card_digest
        return record, transition

    def set_card(self, agent_id: str, card: AgentCard) -> None:
        record = self._records.get(agent_id)
        if record is not None:
            record.card = card
            record.card_digest = card.digest()

    def depart(self, agent_id: str) -> Record | None:
        """Mark an agent that said goodbye offline; return it if it was online."""
        record = self._records.get(agent_id)
        if record is None or not record.online:
            return None
        record.online = False
        return record

    def sweep(self, *, alive: str | None = None) -> list[Record]:
        """Mark agents whose beats stopped offline; return those that just went.

        ``alive`` is an agent known to be alive whatever its beats say: the registry
        itself, whose own beats wait in the same queue as everyone's.
        """
        now = self._clock()
        gone: list[Record] = []
        forget: list[str] = []
        for record in self._records.values():
            if record.agent_id == alive:
                record.last_seen = now
                continue
            silent = now - record.last_seen
            if record.online and silent > self.missed * record.interval:
                record.online = False
                gone.append(record)
            elif not record.online and silent > self._forget_after:
                forget.append(record.agent_id)
        for agent_id in forget:
            del self._records[agent_id]
        return gone

    def next_sweep_in(self) -> float:
        """How long until the earliest agent could go offline (at least 50 ms, at most 1 s)."""
        now = self._clock()
        soonest = 1.0
        for record in self._records.values():
            if record.online:
                due = record.last_seen + self.missed * record.interval - now
                soonest = min(soonest, due)
        return max(soonest, 0.05)

    def query(
        self,
        *,
        service: str | None = None,
        status: str | None = None,
        skill: str | None = None,
        include_offline: bool = False,
    ) -> list[AgentInfo]:
        now = self._clock()
        found = []
        for record in self._select(service=service, skill=skill, include_offline=include_offline):
            info = record.info(now)
            if status is None or info.status == status:
                found.append(info)
        return sorted(found, key=lambda info: (info.service, info.agent_id))

    def capable(self, skill: str) -> list[AgentInfo]:
        """Live agents offering ``skill``: ready before busy, least loaded first."""
        now = self._clock()
        live = [
            record
            for record in self._select(skill=skill)
            if record.status != AgentStatus.DRAINING.value
        ]
        live.sort(key=lambda r: (r.status != AgentStatus.READY.value, r.load, r.agent_id))
        return [record.info(now) for record in live]

    def _select(
        self,
        *,
        service: str | None = None,
        skill: str | None = None,
        include_offline: bool = False,
    ) -> Iterable[Record]:
        for record in self._records.values():
            if not (record.online or include_offline):
                continue
            if service is not None and record.service != service:
                continue
            if skill is not None and skill not in record.skills:
                continue
            yield record

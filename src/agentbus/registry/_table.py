"""The liveness table: agents known from heartbeats, judged on receive time."""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeGuard

from pydantic import BaseModel

from agentbus.agents import AgentCard, AgentStatus, Heartbeat
from agentbus.envelopes import utcnow

__all__ = ["AgentInfo", "LivenessTable", "Record", "Transition"]

OFFLINE = "offline"
_STATUSES: Final = frozenset(status.value for status in AgentStatus)


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
    site: str | None = None


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
    last_seen: float  # the table's monotonic clock
    online: bool = True
    site: str | None = None  # part of the card, so a beat with its digest has its site
    seq: int | None = None  # the number of the last beat heard (agents that number them)
    gone_after: int | None = None  # the last beat's number its goodbye named

    @property
    def skills(self) -> list[str]:
        return self.card.skill_names if self.card is not None else []

    @property
    def load(self) -> float:
        return self.in_flight / self.capacity

    def info(self, now: float, wall_now: datetime) -> AgentInfo:
        return AgentInfo(
            agent_id=self.agent_id,
            service=self.service,
            status=self.status if self.online else OFFLINE,
            in_flight=self.in_flight,
            capacity=self.capacity,
            skills=self.skills,
            interval=self.interval,
            last_seen=wall_now - timedelta(seconds=now - self.last_seen),
            age=round(now - self.last_seen, 3),
            card_digest=self.card_digest,
            site=self.site,
        )


class LivenessTable:
    """Agents by id; offline once ``missed`` of their own intervals pass without a beat.

    Live agents are kept per heartbeat interval in the order they last beat, so the
    ones that could be late are always at the front: a sweep looks at those alone,
    not at every agent, and a beat moves its agent to the back.

    Silence means death only while beats are not lost on the way: a gap in an agent's
    beat numbers (``seq``) says some were (a feed that drops its oldest, beats that
    expired waiting), and then any agent's silence may be the same loss. So no agent
    goes offline by silence until ``missed`` intervals have passed without a gap seen.
    """

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
        self._live: dict[float, OrderedDict[str, Record]] = {}  # by interval, oldest beat first
        self._offline: OrderedDict[str, Record] = OrderedDict()  # in the order they went
        self.lost = 0
        """Beats known lost on the way: the gaps in agents' beat numbers."""
        self._lost_at = -float("inf")  # when a gap was last seen

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._records

    def records(self) -> list[Record]:
        return list(self._records.values())

    def get(self, agent_id: str) -> Record | None:
        return self._records.get(agent_id)

    def seen_at(self, record: Record) -> datetime:
        """The wall-clock time of the agent's last beat."""
        return utcnow() - timedelta(seconds=self._clock() - record.last_seen)

    def refresh(self, data: Mapping[str, Any]) -> tuple[Record, Transition | None] | None:
        """Record the common beat, a known agent's with its card unchanged, from raw data.

        Returns None when the beat is anything else (a new agent, a card, a changed
        digest, service, interval or capacity, a value out of the ordinary): such a
        beat is validated in full and given to ``observe``.
        """
        record = self._records.get(data.get("agent_id"))  # type: ignore[arg-type]
        if (
            record is None
            or "card" in data
            or data.get("card_digest") != record.card_digest
            or data.get("service") != record.service
            or data.get("interval") != record.interval
            or data.get("capacity") != record.capacity
        ):
            return None
        status, in_flight, seq = data.get("status"), data.get("in_flight"), data.get("seq")
        if status not in _STATUSES or not _count(in_flight) or not (seq is None or _count(seq)):
            return None
        if not self._numbered(record, seq):
            return record, None
        record.status = status
        record.in_flight = in_flight
        return record, self._touch(record)

    def _numbered(self, record: Record, seq: int | None) -> bool:
        # Whether the beat is news (not one its agent's goodbye came before); numbered if so.
        if _before_goodbye(record, seq):
            return False
        if seq is not None:
            self._number(record, seq)
        return True

    def _number(self, record: Record, seq: int) -> None:
        last = record.seq
        if last is not None and 0 < seq <= last:
            return  # an older beat, come late (by another registry's digest): no news
        record.seq = seq  # 0: the agent started again
        if last is not None and seq > last + 1:
            self.lost += seq - last - 1
            self._lost_at = self._clock()

    def shortest_interval(self) -> float | None:
        """The shortest heartbeat interval of the live agents, if any is live."""
        return min(self._live, default=None)

    def lossy(self, slack: float = 0.0) -> bool:
        """Whether beats were lost lately: within ``missed`` of the longest interval."""
        longest = max(self._live, default=0.0)
        return self._clock() - self._lost_at < self.missed * longest + slack

    def observe(self, beat: Heartbeat) -> tuple[Record, Transition | None]:
        """Record a heartbeat; say whether the agent just came online."""
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
                last_seen=self._clock(),
                site=beat.site,
                seq=beat.seq,
            )
            self._records[beat.agent_id] = record
            self._lane(record.interval)[record.agent_id] = record
            return record, Transition.ONLINE
        if _before_goodbye(record, beat.seq):
            return record, None
        if record.online and beat.interval != record.interval:
            self._unlist(record)  # from the lane of its old interval to the new one's
            record.interval, record.last_seen = beat.interval, self._clock()
            self._lane(record.interval)[record.agent_id] = record
            transition = None
        else:
            transition = self._touch(record, interval=beat.interval)
        record.service = beat.service
        record.status = beat.status.value
        record.in_flight = beat.in_flight
        record.capacity = beat.capacity
        record.site = beat.site
        if beat.seq is not None:
            self._number(record, beat.seq)
        if card is not None:
            record.card = card
        elif beat.card_digest != record.card_digest:
            record.card = None  # changed; to be fetched again
        record.card_digest = beat.card_digest
        return record, transition

    def _touch(self, record: Record, *, interval: float | None = None) -> Transition | None:
        record.last_seen = self._clock()
        if interval is not None:
            record.interval = interval
        if record.online:
            self._live[record.interval].move_to_end(record.agent_id)
            return None
        record.online = True
        self._offline.pop(record.agent_id, None)
        self._lane(record.interval)[record.agent_id] = record
        return Transition.ONLINE

    def _lane(self, interval: float) -> OrderedDict[str, Record]:
        lane = self._live.get(interval)
        if lane is None:
            lane = self._live[interval] = OrderedDict()
        return lane

    def _unlist(self, record: Record) -> None:
        lane = self._live[record.interval]
        del lane[record.agent_id]
        if not lane:
            del self._live[record.interval]

    def _went_offline(self, record: Record) -> None:
        record.online = False
        self._offline[record.agent_id] = record

    def set_card(self, agent_id: str, card: AgentCard) -> None:
        record = self._records.get(agent_id)
        if record is not None:
            record.card = card
            record.card_digest = card.digest()

    def depart(self, agent_id: str, seq: int | None = None) -> Record | None:
        """Mark an agent that said goodbye offline; return it if it was online.

        ``seq``: the number of its last beat, as its goodbye names it: a beat up to it
        that comes after the goodbye is an old one, and does not list the agent again.
        """
        record = self._records.get(agent_id)
        if record is not None and seq is not None:
            record.gone_after = seq
        if record is None or not record.online:
            return None
        self._unlist(record)
        self._went_offline(record)
        return record

    def sweep(self, *, alive: str | None = None, slack: float = 0.0) -> list[Record]:
        """Mark agents whose beats stopped offline; return those that just went.

        ``alive`` is an agent known to be alive whatever its beats say: the registry
        itself, whose own beats may wait behind everyone's. ``slack``: seconds more to
        wait, for beats that are late in coming (the feed's own lag). Agents of an
        interval whose last ``missed`` intervals saw beats lost are not judged.
        """
        now = self._clock()
        gone: list[Record] = []
        for interval, lane in list(self._live.items()):
            limit = now - self.missed * interval - slack
            if self._lost_at > limit:
                continue  # a silence now may be a loss: judge none of them yet
            while lane:
                record = next(iter(lane.values()))
                if record.last_seen >= limit:
                    break
                if record.agent_id == alive:
                    record.last_seen = now
                    lane.move_to_end(record.agent_id)
                    continue
                del lane[record.agent_id]
                self._went_offline(record)
                gone.append(record)
            if not lane:
                del self._live[interval]
        while self._offline:
            record = next(iter(self._offline.values()))
            if now - record.last_seen <= self._forget_after:
                break
            del self._offline[record.agent_id]
            del self._records[record.agent_id]
        return gone

    def next_sweep_in(self, slack: float = 0.0) -> float:
        """How long until the earliest agent could go offline (at least 50 ms, at most 1 s)."""
        now = self._clock()
        soonest = 1.0
        for interval, lane in self._live.items():
            oldest = max(next(iter(lane.values())).last_seen, self._lost_at)
            soonest = min(soonest, oldest + self.missed * interval + slack - now)
        return max(soonest, 0.05)

    def query(
        self,
        *,
        service: str | None = None,
        status: str | None = None,
        skill: str | None = None,
        include_offline: bool = False,
    ) -> list[AgentInfo]:
        now, wall_now = self._clock(), utcnow()
        found = []
        for record in self._select(service=service, skill=skill, include_offline=include_offline):
            info = record.info(now, wall_now)
            if status is None or info.status == status:
                found.append(info)
        return sorted(found, key=lambda info: (info.service, info.agent_id))

    def capable(self, skill: str) -> list[AgentInfo]:
        """Live agents offering ``skill``: ready before busy, least loaded first."""
        now, wall_now = self._clock(), utcnow()
        live = [
            record
            for record in self._select(skill=skill)
            if record.status != AgentStatus.DRAINING.value
        ]
        live.sort(key=lambda r: (r.status != AgentStatus.READY.value, r.load, r.agent_id))
        return [record.info(now, wall_now) for record in live]

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


def _before_goodbye(record: Record, seq: int | None) -> bool:
    # A beat its goodbye came before (two queues): old news. A number past the goodbye's,
    # or 0 (the agent started again), is a new life.
    if record.gone_after is None or record.online:
        return False
    if seq is None or seq == 0 or seq > record.gone_after:
        record.gone_after = None
        return False
    return True


def _count(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 0

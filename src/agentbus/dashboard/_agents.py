"""The team as the dashboard shows it: every agent by service, followed from heartbeats.

The board keeps a liveness table of its own, fed like the registry's (a heartbeat feed
and the agents' goodbyes), so a change shows as soon as the beat that says it arrives,
not at the next poll of a registry. Registries' ``agent_offline`` reports count too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Final

from pydantic import ValidationError

from agentbus._exceptions import AgentBusError
from agentbus.agents import AGENT_OFFLINE, ANNOUNCE, HEARTBEAT, AgentCard, Heartbeat
from agentbus.bus import Feed, Transport
from agentbus.dashboard._traffic import TrafficBoard
from agentbus.envelopes import BROADCAST, EventEnvelope, RequestEnvelope, RequestPayload, utcnow
from agentbus.registry import LivenessTable

__all__ = ["AgentBoard"]

_CARD_RETRY: Final = 5.0  # s between two asks for the card of one agent
_CARD_TIMEOUT: Final = 5.0
_BEATS_EVERY: Final = 1.0  # s: beats that change nothing but "last beat" are told this often

_Seen = tuple[str, int, int, bool, str, bool]  # what a row shows that a beat may change


class AgentBoard:
    """Agents grouped by service, live; services whose every instance is gone stay listed."""

    def __init__(
        self,
        bus: Transport,
        *,
        on_change: Callable[[], None],
        missed: int = 3,
        forget_after: float = 600.0,
        traffic: TrafficBoard | None = None,
    ) -> None:
        self._bus = bus
        self._traffic = traffic
        self._on_change = on_change
        self.table = LivenessTable(missed=missed, forget_after=forget_after)
        self._services: set[str] = set()
        self._feed: Feed | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._card_asked: dict[str, float] = {}
        self._beaten = False
        self._beats_told = 0.0
        self._background: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Follow heartbeats and goodbyes; ask every agent to beat now."""
        self._feed = await self._bus.consume_feed(
            f"{BROADCAST}.event.{HEARTBEAT}", self._on_beat, name="dashboard-heartbeats"
        )
        await self._bus.subscribe(f"{BROADCAST}.event.{AGENT_OFFLINE}", self._on_offline)
        self._sweeper = asyncio.create_task(self._sweep_forever())
        announce = RequestEnvelope(
            sender_id=self._bus.agent_id,
            receiver_id=BROADCAST,
            payload=RequestPayload(action=ANNOUNCE),
        )
        await self._bus.publish(announce, persistent=False, mandatory=False)

    async def aclose(self) -> None:
        if self._feed is not None:
            await self._feed.aclose()
        tasks = [t for t in (self._sweeper, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def snapshot(self) -> dict[str, Any]:
        """Services in name order, each with its agents (offline ones too, until forgotten)."""
        now, wall_now = time.monotonic(), utcnow()
        services: dict[str, list[dict[str, Any]]] = {name: [] for name in self._services}
        for record in self.table.records():
            info = record.info(now, wall_now)
            row = info.model_dump(mode="json", exclude={"card_digest", "age"})
            row["version"] = record.card.version if record.card is not None else None
            services.setdefault(record.service, []).append(row)
        groups = []
        for name in sorted(services):
            rows = sorted(services[name], key=lambda row: row["agent_id"])
            live = [row for row in rows if row["status"] != "offline"]
            groups.append(
                {
                    "service": name,
                    "live": len(live),
                    "in_flight": sum(row["in_flight"] for row in live),
                    "capacity": sum(row["capacity"] for row in live),
                    "gone": not live,
                    "agents": rows,
                }
            )
        return {"now": wall_now.isoformat(), "services": groups}

    def _on_beat(self, envelope: dict[str, Any]) -> None:
        payload = envelope.get("payload")
        data = payload.get("event_data") if isinstance(payload, dict) else None
        if not isinstance(data, dict):
            return
        before = self._seen(data.get("agent_id"))
        refreshed = self.table.refresh(data)
        if refreshed is None:
            try:
                beat = Heartbeat.model_validate(data)
            except ValidationError:
                return  # the registry logs malformed beats; the board shows what it can
            record, _ = self.table.observe(beat)
        else:
            record = refreshed[0]
        self._services.add(record.service)
        if self._traffic is not None and "traffic" in data:
            self._traffic.take(record.agent_id, record.service, data["traffic"])
        if record.card is None:
            self._ask_card(record.agent_id)
        if self._seen(record.agent_id) != before:
            self._on_change()
        else:
            self._beaten = True  # only "last beat" moved: told with the next sweep

    def _seen(self, agent_id: object) -> _Seen | None:
        record = self.table.get(agent_id) if isinstance(agent_id, str) else None
        if record is None:
            return None
        return (
            record.status,
            record.in_flight,
            record.capacity,
            record.online,
            record.card_digest,
            record.card is not None,
        )

    async def _on_offline(self, event: EventEnvelope) -> None:
        agent_id = event.payload.event_data.get("agent_id")
        if isinstance(agent_id, str) and self.table.depart(agent_id) is not None:
            self._on_change()

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.table.next_sweep_in())
            before = len(self.table)
            moment = time.monotonic()
            due = self._beaten and moment - self._beats_told >= _BEATS_EVERY
            if self.table.sweep() or len(self.table) != before or due:
                self._beaten, self._beats_told = False, moment
                self._on_change()

    def _ask_card(self, agent_id: str) -> None:
        moment = time.monotonic()
        if moment - self._card_asked.get(agent_id, -_CARD_RETRY) < _CARD_RETRY:
            return
        self._card_asked[agent_id] = moment
        task = asyncio.create_task(self._fetch_card(agent_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _fetch_card(self, agent_id: str) -> None:
        try:
            reply = await self._bus.request(agent_id, "describe", timeout=_CARD_TIMEOUT)
            card = AgentCard.model_validate(reply.result)
        except (AgentBusError, ValidationError):
            return  # asked again at a later beat
        self.table.set_card(agent_id, card)
        self._on_change()

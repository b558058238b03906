"""The registry agent: liveness from heartbeats, discovery requests, online/offline events."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from pydantic import ValidationError

from agentbus._exceptions import AgentBusError
from agentbus.agents import (
    AGENT_OFFLINE,
    AGENT_ONLINE,
    ANNOUNCE,
    HEARTBEAT,
    Agent,
    AgentCard,
    Heartbeat,
    skill,
)
from agentbus.envelopes import (
    BROADCAST,
    ErrorCode,
    EventEnvelope,
    RequestEnvelope,
    RequestPayload,
)
from agentbus.registry._table import AgentInfo, LivenessTable, Record, Transition

__all__ = ["Registry"]


class Registry(Agent):
    """Knows who is alive and what each agent can do, from their heartbeats.

    Several registries may run at once: each hears every heartbeat and answers alike.
    """

    name = "registry"
    description = "Tracks live agents from heartbeats and answers discovery requests"
    version = "1.0.0"
    concurrency = 16

    def __init__(
        self, *, missed_intervals: int = 3, forget_after: float = 300.0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.table = LivenessTable(missed=missed_intervals, forget_after=forget_after)
        self._sweeper: asyncio.Task[None] | None = None
        self._card_fetches: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()

    async def on_start(self) -> None:
        await self.bus.subscribe(f"broadcast.event.{HEARTBEAT}", self._on_heartbeat)
        await self.bus.subscribe(f"broadcast.event.{AGENT_OFFLINE}", self._on_goodbye)
        self._sweeper = asyncio.create_task(self._sweep_forever())
        # A fresh registry knows nobody: ask every agent to beat now.
        announce = RequestEnvelope(
            sender_id=self.id,
            receiver_id=BROADCAST,
            payload=RequestPayload(action=ANNOUNCE),
        )
        await self.bus.publish(announce, persistent=False, mandatory=False)

    async def on_stop(self) -> None:
        tasks = [self._sweeper, *self._card_fetches.values()]
        for task in tasks:
            if task is not None:
                task.cancel()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    @skill
    async def list_agents(
        self,
        service: str | None = None,
        status: str | None = None,
        skill: str | None = None,
        include_offline: bool = False,
    ) -> list[AgentInfo]:
        """List known agents, filtered by service, status and skill."""
        return self.table.query(
            service=service, status=status, skill=skill, include_offline=include_offline
        )

    @skill
    async def find_skill(self, skill: str) -> list[AgentInfo]:
        """List live agents offering a skill: ready before busy, least loaded first."""
        return self.table.capable(skill)

    @skill
    async def get_card(self, agent_id: str) -> AgentCard:
        """Return the card of a known agent."""
        record = self.table.get(agent_id)
        if record is None:
            raise AgentBusError(f"no agent {agent_id!r} is known", code=ErrorCode.AGENT_UNAVAILABLE)
        if record.card is None:
            await self._fetch_card(record.agent_id)
        if record.card is None:
            raise AgentBusError(
                f"the card of {agent_id!r} is not known yet", code=ErrorCode.AGENT_UNAVAILABLE
            )
        return record.card

    async def _on_heartbeat(self, event: EventEnvelope) -> None:
        try:
            beat = Heartbeat.model_validate(event.payload.event_data)
        except ValidationError as exc:
            self._log.warning(
                "malformed heartbeat ignored", sender_id=event.sender_id, error=str(exc)
            )
            return
        record, transition = self.table.observe(beat)
        if record.card is None and record.agent_id not in self._card_fetches:
            task = asyncio.create_task(self._fetch_card(record.agent_id))
            self._card_fetches[record.agent_id] = task
            task.add_done_callback(lambda _: self._card_fetches.pop(record.agent_id, None))
        if transition is Transition.ONLINE:
            self._wake.set()
            await self._announce_transition(AGENT_ONLINE, record, reason="heartbeat")

    async def _on_goodbye(self, event: EventEnvelope) -> None:
        agent_id = event.payload.event_data.get("agent_id")
        # Registries report departures too; only the agent's own word counts here.
        if event.sender_id != agent_id or not isinstance(agent_id, str):
            return
        record = self.table.depart(agent_id)
        if record is not None:
            await self._announce_transition(AGENT_OFFLINE, record, reason="shutdown")

    async def _sweep_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.table.next_sweep_in()):
                    await self._wake.wait()
            self._wake.clear()
            for record in self.table.sweep(alive=self.id):
                await self._announce_transition(AGENT_OFFLINE, record, reason="timeout")
            self._export_metrics()

    def _export_metrics(self) -> None:
        # At most once per sweep (about a second), whatever the heartbeat rate.
        if self.metrics is None:
            return
        live = [record for record in self.table.records() if record.online]
        self.metrics.set_agents(
            ((record.service, record.status) for record in live),
            ((record.agent_id, record.service, record.in_flight) for record in live),
        )

    async def _announce_transition(self, event_name: str, record: Record, *, reason: str) -> None:
        self._log.info(event_name, subject=record.agent_id, service=record.service, reason=reason)
        if self.metrics is not None:
            self.metrics.agent_transitions.labels(event_name, reason).inc()
            self._export_metrics()
        data = {
            "agent_id": record.agent_id,
            "service": record.service,
            "reason": reason,
            "last_seen": record.last_seen_at.isoformat(),
            "reported_by": self.id,
        }
        try:
            await self.bus.emit(event_name, data, mandatory=False)
        except AgentBusError as exc:
            self._log.warning("transition event not sent", error=str(exc))

    async def _fetch_card(self, agent_id: str) -> None:
        try:
            reply = await self.bus.request(agent_id, "describe", timeout=5)
            self.table.set_card(agent_id, AgentCard.model_validate(reply.result))
        except (AgentBusError, ValidationError) as exc:
            self._log.info("card not fetched", subject=agent_id, error=str(exc))

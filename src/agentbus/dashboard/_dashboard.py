"""The dashboard's bus side: the boards it keeps, and what changed on them."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

from agentbus.bus import DeadLetters, Transport
from agentbus.dashboard._agents import AgentBoard
from agentbus.dashboard._changes import Changes
from agentbus.dashboard._dead_letters import DeadLetterBoard
from agentbus.dashboard._plans import PlanBoard
from agentbus.dashboard._questions import QuestionBoard
from agentbus.dashboard._schedules import ScheduleBoard
from agentbus.dashboard._traffic import TrafficBoard

__all__ = ["Dashboard"]


class Dashboard:
    """Follows a team on an open bus: agents, open questions, plans, schedules, traffic, dead
    letters; each a live board."""

    def __init__(
        self,
        bus: Transport,
        *,
        dead_letters: DeadLetters | None = None,
        missed_intervals: int = 3,
    ) -> None:
        self.bus = bus
        self.changes = Changes()
        self.traffic = TrafficBoard(on_change=lambda: self.changes.touch("traffic"))
        self.agents = AgentBoard(
            bus,
            on_change=lambda: self.changes.touch("agents"),
            missed=missed_intervals,
            traffic=self.traffic,
        )
        self.questions = QuestionBoard(bus, on_change=lambda: self.changes.touch("questions"))
        self.plans = PlanBoard(
            bus,
            on_change=lambda: self.changes.touch("plans"),
            on_report=self.questions.take_report,
        )
        self.schedules = ScheduleBoard(bus, on_change=lambda: self.changes.touch("schedules"))
        self.dead_letters = DeadLetterBoard(
            dead_letters, on_change=lambda: self.changes.touch("dead_letters")
        )

    def __repr__(self) -> str:
        return f"<Dashboard agent_id={self.bus.agent_id!r} exchange={self.bus.settings.exchange!r}>"

    async def start(self) -> Self:
        """Start following the team (the bus must be open)."""
        await self.questions.start()
        await self.plans.start()
        await self.schedules.start()
        await self.agents.start()
        await self.dead_letters.start()
        return self

    async def aclose(self) -> None:
        """Stop following; the bus stays open (its owner closes it)."""
        await self.dead_letters.aclose()
        await self.agents.aclose()
        await self.schedules.aclose()
        await self.plans.aclose()
        await self.questions.aclose()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def snapshot(self, topic: str) -> dict[str, Any]:
        """Return what the page shows of ``topic``."""
        if topic == "agents":
            return self.agents.snapshot()
        if topic == "questions":
            return self.questions.snapshot()
        if topic == "plans":
            return self.plans.snapshot()
        if topic == "schedules":
            return self.schedules.snapshot()
        if topic == "traffic":
            return self.traffic.snapshot()
        if topic == "dead_letters":
            return self.dead_letters.snapshot()
        return {}

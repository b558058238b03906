"""Following plans: the ``plan_progress`` events the leader sends to a bus of ours, by plan."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from agentbus.bus import Transport
from agentbus.envelopes import EventEnvelope
from agentbus.leader import PLAN_PROGRESS, Progress, ProgressReport

__all__ = ["PlanWatch", "PlanWatcher"]

PlanWatcher = Callable[[Progress], None]


class PlanWatch:
    """Hands each transition of a plan sent from one of our buses to the plan's watcher."""

    def __init__(self) -> None:
        self._watchers: dict[tuple[str, str], PlanWatcher] = {}
        """By (the agent id of the bus the plan was sent from, plan id): ids are callers'."""

    def __repr__(self) -> str:
        return f"<PlanWatch plans={len(self._watchers)}>"

    async def attach(self, bus: Transport) -> None:
        """Receive the events sent to ``bus``'s instance (the leader's ``plan_progress``)."""
        await bus.subscribe(f"agent.{bus.agent_id}.event", self._on_event)

    @contextlib.contextmanager
    def watching(self, bus: Transport, plan_id: str, watcher: PlanWatcher) -> Iterator[None]:
        """Hand the transitions of ``plan_id``, sent from ``bus``, to ``watcher`` within
        the block."""
        key = (bus.agent_id, plan_id)
        self._watchers[key] = watcher
        try:
            yield
        finally:
            self._watchers.pop(key, None)

    async def _on_event(self, event: EventEnvelope) -> None:
        if event.payload.event_name != PLAN_PROGRESS:
            return
        report = ProgressReport.model_validate(event.payload.event_data)
        watcher = self._watchers.get((event.receiver_id, report.plan_id))
        if watcher is not None:
            for progress in report.transitions:
                watcher(progress)

"""HTTP callers on the bus: one bus per identity, so agents see (and audit) who asked."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus.bus import Bus, verifies_sender
from agentbus.envelopes import ErrorCode, EventEnvelope
from agentbus.gateway._keys import ApiKeys
from agentbus.leader import PLAN_PROGRESS, Progress, ProgressReport

__all__ = ["Callers", "PlanWatcher"]

PlanWatcher = Callable[[Progress], None]


class Callers:
    """Opens a bus per identity on first use (``<identity>-<random>``), each watching plans."""

    def __init__(self, settings: Settings, keys: ApiKeys) -> None:
        self._settings = settings
        self._keys = keys
        self._buses: dict[str, Bus] = {}
        self._lock = asyncio.Lock()
        self._plans: dict[tuple[str, str], PlanWatcher] = {}
        """Watchers by (the bus the plan was sent from, plan id): ids are the callers'."""

    def __repr__(self) -> str:
        return f"<Callers {sorted(self._buses)}>"

    async def bus(self, identity: str) -> Bus:
        """Return the open bus of ``identity``, opening it the first time.

        Raises:
            AgentBusError: ``unauthorized`` when ``verify_sender`` is on and the identity
                has no broker URL of its own; a transport error when it cannot connect.
        """
        bus = self._buses.get(identity)
        if bus is not None:
            return bus
        async with self._lock:
            bus = self._buses.get(identity)
            if bus is None:
                url = self._keys.named(identity).url
                settings = self._settings
                if url is not None:
                    settings = settings.model_copy(update={"url": url})
                elif verifies_sender(settings):
                    # Its requests would carry the gateway's broker user, not its own.
                    raise AgentBusError(
                        f"the identity {identity!r} has no broker user of its own, and "
                        "verify_sender is on: give it a url in the keys file",
                        code=ErrorCode.UNAUTHORIZED,
                    )
                bus = Bus(settings, agent_id=f"{identity}-{uuid.uuid4().hex[:8]}", app_id="gateway")
                await bus.open()
                try:
                    await bus.subscribe(f"agent.{bus.agent_id}.event", self._on_event)
                except BaseException:
                    await bus.aclose()
                    raise
                self._buses[identity] = bus
        return bus

    def watch_plan(self, bus: Bus, plan_id: str, watcher: PlanWatcher) -> None:
        """Hand the progress of ``plan_id``, sent from ``bus``, to ``watcher``."""
        self._plans[bus.agent_id, plan_id] = watcher

    def unwatch_plan(self, bus: Bus, plan_id: str) -> None:
        """Stop handing ``plan_id``'s progress on."""
        self._plans.pop((bus.agent_id, plan_id), None)

    async def _on_event(self, event: EventEnvelope) -> None:
        if event.payload.event_name != PLAN_PROGRESS:
            return
        report = ProgressReport.model_validate(event.payload.event_data)
        watcher = self._plans.get((event.receiver_id, report.plan_id))
        if watcher is not None:
            for progress in report.transitions:
                watcher(progress)

    async def aclose(self) -> None:
        """Close every identity's bus."""
        buses = list(self._buses.values())
        self._buses.clear()
        await asyncio.gather(*(bus.aclose() for bus in buses), return_exceptions=True)

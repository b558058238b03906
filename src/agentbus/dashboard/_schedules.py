"""The schedules, their next ticks and last runs: a leader's list, then the leaders' news.

On start (and whenever a schedule is added or removed: ``schedule_changed``) the board asks
a leader for ``schedule_list``; each tick run (``schedule_fired``, from the ticking leader)
adds a run to its schedule and moves its next tick on.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from agentbus._exceptions import AccessRefused, AgentBusError
from agentbus._logging import get_logger
from agentbus.bus import Feed, Transport
from agentbus.envelopes import BROADCAST
from agentbus.leader import SCHEDULE_CHANGED, SCHEDULE_FIRED, ScheduleListing, ScheduleState

__all__ = ["ScheduleBoard"]

_RUNS: Final = 10  # runs shown per schedule, newest first
_ASK_TIMEOUT: Final = 5.0
_ASK_AGAIN: Final = 10.0  # s between two asks while no leader has answered

_log = get_logger("agentbus.dashboard")


class ScheduleBoard:
    """Schedules as the leaders list them, and each tick as the ticking leader tells it."""

    def __init__(
        self, bus: Transport, *, on_change: Callable[[], None], leader: str = "leader"
    ) -> None:
        self._bus = bus
        self._on_change = on_change
        self._leader = leader
        self._schedules: dict[str, dict[str, Any]] = {}
        self._runs: dict[str, collections.deque[dict[str, Any]]] = {}
        self._ticker: str | None = None
        self._feeds: list[Feed] = []
        self._asking: asyncio.Task[None] | None = None
        self.malformed = 0

    async def start(self) -> None:
        """Follow the leaders' schedule news, and ask a leader for the list."""
        for event, name in (
            (SCHEDULE_FIRED, "dashboard-ticks"),
            (SCHEDULE_CHANGED, "dashboard-schedules"),
        ):
            pattern = f"{BROADCAST}.event.{event}"
            self._feeds.append(await self._bus.consume_feed(pattern, self._on_news, name=name))
        self._ask()

    async def aclose(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._asking
        for feed in self._feeds:
            await feed.aclose()

    def snapshot(self) -> dict[str, Any]:
        """Each schedule, by name, with its latest runs (newest first)."""
        views = []
        for name, schedule in sorted(self._schedules.items()):
            views.append(schedule | {"runs": list(reversed(self._runs.get(name, ())))})
        return {"schedules": views, "ticker": self._ticker}

    async def refresh(self) -> None:
        """Ask a leader for every schedule now.

        Raises:
            AgentBusError: no leader answered.
        """
        reply = await self._bus.request(self._leader, "schedule_list", {}, timeout=_ASK_TIMEOUT)
        listing = ScheduleListing.model_validate(reply.result)
        self._schedules = {state.name: _view(state) for state in listing.schedules}
        for state in listing.schedules:
            runs = self._runs.setdefault(state.name, collections.deque(maxlen=_RUNS))
            known = {run["run_id"] for run in runs}
            runs.extend(
                run.model_dump(mode="json") for run in state.runs if run.run_id not in known
            )
        self._on_change()

    def _ask(self) -> None:
        # Now, not at the end of a wait between two asks no leader answered.
        if self._asking is not None:
            self._asking.cancel()
        self._asking = asyncio.create_task(self._ask_until_answered())

    async def _ask_until_answered(self) -> None:
        while True:
            try:
                await self.refresh()
                return
            except AccessRefused as exc:  # this dashboard's user may not call the leaders
                _log.warning("schedules not listed", error=str(exc))
                return
            except AgentBusError as exc:
                _log.info("no schedule list yet", error=str(exc))
            await asyncio.sleep(_ASK_AGAIN)

    def _on_news(self, envelope: dict[str, Any]) -> None:
        payload = envelope.get("payload")
        if not isinstance(payload, dict) or not isinstance(payload.get("event_data"), dict):
            self.malformed += 1
            return
        data = payload["event_data"]
        if payload.get("event_name") == SCHEDULE_CHANGED:
            self._ask()
        elif payload.get("event_name") == SCHEDULE_FIRED:
            self._fired(data, str(envelope.get("sender_id")))

    def _fired(self, data: dict[str, Any], leader: str) -> None:
        name = data.get("name")
        if not isinstance(name, str):
            self.malformed += 1
            return
        self._ticker = leader
        run = {key: data.get(key) for key in ("tick", "run_id", "lag", "error", "leader")}
        self._runs.setdefault(name, collections.deque(maxlen=_RUNS)).append(run)
        schedule = self._schedules.get(name)
        if schedule is None:
            self._ask()  # heard of before it was listed
        else:
            schedule["last_tick"] = data.get("tick")
            schedule["next_tick"] = data.get("next")
        self._on_change()


def _view(state: ScheduleState) -> dict[str, Any]:
    schedule, request = state.schedule, state.schedule.request
    if schedule.every is not None:
        when = f"every {schedule.every:g} s"
    elif schedule.cron is not None:
        when = f"cron {schedule.cron} ({schedule.tz})"
    else:
        when = f"once at {_iso(schedule.at)}"
    if schedule.plan is not None:
        target = f"plan {schedule.plan.id}"
    else:
        assert request is not None
        target = f"{'task' if request.task else 'request'} {request.service}.{request.action}"
    return {
        "name": state.name,
        "when": when,
        "target": target,
        "missed": schedule.missed,
        "next_tick": _iso(state.next_tick),
        "last_tick": _iso(state.last_tick),
    }


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()

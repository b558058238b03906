"""Schedules on the in-memory bus: ticks run once across leaders, take-overs, the policies."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from agentbus import Agent, ConnectionLost, Leader, PlanClient, Settings, current_request, skill
from agentbus.dashboard import Dashboard
from agentbus.leader import Schedule
from agentbus.testing import MemoryBroker, MemoryBus
from support.waiting import wait_until

SETTINGS = Settings(shutdown_grace=0.2)


class Recorder(Agent):
    name = "recorder"
    runs: list[str] = []

    @skill
    async def record(self, n: int = 0) -> int:
        Recorder.runs.append(current_request().message_id)
        return n


@pytest.fixture(autouse=True)
def _reset() -> None:
    Recorder.runs = []


def _bus(broker: MemoryBroker, agent_id: str) -> MemoryBus:
    return MemoryBus(broker, SETTINGS, agent_id=agent_id)


def _leader(broker: MemoryBroker, agent_id: str) -> Leader:
    return Leader(bus=_bus(broker, agent_id), heartbeat_interval=0.2)


def _every(name: str, seconds: float = 0.1, **more: Any) -> dict[str, Any]:
    request = {"service": "recorder", "action": "record"}
    return {"name": name, "every": seconds, "request": request, "grace": 0.2} | more


def _records(broker: MemoryBroker, kind: str) -> list[dict[str, Any]]:
    journal = broker.journals.get("agentbus.journal.schedules", [])
    return [
        record
        for _, body in journal
        for record in orjson.loads(body).get("records", ())
        if record.get("kind") == kind
    ]


def _sent_ticks(broker: MemoryBroker, name: str) -> list[int]:
    return [r["tick"] for r in _records(broker, "sent") if r["name"] == name]


async def test_a_schedule_every_tenth_of_a_second_runs_each_tick_once_in_order() -> None:
    """Ticks 100 ms apart, each run once (its message id made from the tick), in order."""
    broker = MemoryBroker()
    async with (
        _leader(broker, "leader-1"),
        Recorder(bus=_bus(broker, "recorder-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        plans = PlanClient(client)
        added = await plans.add_schedule(_every("fast"))
        assert added.next_tick is not None
        await wait_until(lambda: len(Recorder.runs) >= 8, timeout=10)
        listing = await plans.schedules()
    ticks = _sent_ticks(broker, "fast")
    assert ticks == sorted(set(ticks))
    assert all(b - a == 100 for a, b in itertools.pairwise(ticks))
    assert all(run.startswith("schedule/fast-") for run in Recorder.runs)
    assert len(set(Recorder.runs)) == len(Recorder.runs)
    [state] = listing.schedules
    assert listing.ticking
    assert state.runs
    assert state.last_tick is not None


async def test_two_leaders_run_each_tick_once() -> None:
    """Two leaders: one holds the lease and ticks; no tick is sent twice, none skipped."""
    broker = MemoryBroker()
    async with (
        _leader(broker, "leader-1") as first,
        _leader(broker, "leader-2") as second,
        Recorder(bus=_bus(broker, "recorder-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        await PlanClient(client).add_schedule(_every("both"))
        await wait_until(lambda: len(Recorder.runs) >= 10, timeout=10)
        assert [first._ticker_().is_ticking, second._ticker_().is_ticking].count(True) == 1
    ticks = _sent_ticks(broker, "both")
    assert Counter(ticks).most_common(1)[0][1] == 1
    assert all(b - a == 100 for a, b in itertools.pairwise(ticks))


@pytest.mark.parametrize(("missed", "late"), [("all", range(3, 30)), ("skip", [0]), ("once", [1])])
async def test_the_leader_that_takes_over_applies_the_missed_policy(
    missed: str, late: range | list[int]
) -> None:
    """The ticking leader stops; 0.6 s later another starts. Of the ticks missed
    meanwhile (later than the 0.2 s grace when it gets to them) it runs each with
    ``all``, none with ``skip``, the latest with ``once``; no tick runs twice."""
    broker = MemoryBroker()
    async with (
        Recorder(bus=_bus(broker, "recorder-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        async with _leader(broker, "leader-1"):
            await PlanClient(client).add_schedule(_every("policy", missed=missed))
            await wait_until(lambda: len(_sent_ticks(broker, "policy")) >= 3, timeout=10)
        stopped = round(time.time() * 1000)
        await asyncio.sleep(0.6)  # the outage itself: time with no leader
        async with _leader(broker, "leader-2"):
            await wait_until(lambda: max(_sent_ticks(broker, "policy")) > stopped + 800)
    ticks = _sent_ticks(broker, "policy")
    assert len(ticks) == len(set(ticks))
    caught_up = [r for r in _records(broker, "fire") if r["caught_up"]]
    assert len(caught_up) in late
    steps = {b - a for a, b in itertools.pairwise(sorted(ticks))}
    assert (steps == {100}) is (missed == "all")


async def test_a_one_shot_runs_once_and_is_removed() -> None:
    """``in`` 0.2 s: one run, then the schedule is gone from the list."""
    broker = MemoryBroker()
    async with (
        _leader(broker, "leader-1"),
        _leader(broker, "leader-2"),
        Recorder(bus=_bus(broker, "recorder-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        plans = PlanClient(client)
        request = {"service": "recorder", "action": "record", "parameters": {"n": 7}}
        await plans.add_schedule({"name": "once", "in": 0.2, "request": request})
        await wait_until(lambda: len(Recorder.runs) == 1, timeout=10)
        await wait_until(lambda: bool(_records(broker, "removed")), timeout=10)
        assert (await plans.schedules()).schedules == []
    assert len(_sent_ticks(broker, "once")) == 1


async def test_a_scheduled_plan_runs_under_an_id_made_of_the_schedule_and_tick() -> None:
    """Each tick of a plan schedule is a plan whose id is ``<schedule>-<tick>``: its
    status is looked up by that id; removing the schedule stops the ticks."""
    broker = MemoryBroker()
    plan = {"subtasks": [{"id": "a", "skill": "record", "service": "recorder"}]}
    async with (
        _leader(broker, "leader-1"),
        Recorder(bus=_bus(broker, "recorder-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        plans = PlanClient(client)
        await plans.add_schedule({"name": "nightly", "every": 0.2, "plan": plan})
        await wait_until(lambda: len(Recorder.runs) >= 2, timeout=10)
        removed = await plans.remove_schedule("nightly")
        [state] = list((await plans.schedules()).schedules) or [None]
        run = _records(broker, "sent")[0]["run"]
        status = await plans.status(run)
    assert removed
    assert state is None
    assert run.startswith("nightly-")
    assert status.plan_id == run


def test_a_schedule_is_validated() -> None:
    """Exactly one of every/cron/at/in and of plan/request; a known time zone; valid cron."""
    request = {"service": "s", "action": "a"}
    Schedule.model_validate(
        {"name": "c", "cron": "*/5 * * * *", "tz": "Europe/Paris"} | {"request": request}
    )
    for bad in (
        {"name": "x", "request": request},
        {"name": "x", "every": 1, "cron": "* * * * *", "request": request},
        {"name": "x", "every": 1},
        {"name": "x", "cron": "61 * * * *", "request": request},
        {"name": "x", "every": 1, "tz": "Mars/Olympus", "request": request},
    ):
        with pytest.raises(ValidationError):
            Schedule.model_validate(bad)


def test_cron_ticks_follow_the_time_zone() -> None:
    """``0 9 * * *`` in Europe/Paris is 08:00 UTC in winter, 07:00 UTC in summer."""
    schedule = Schedule.model_validate(
        {
            "name": "c",
            "cron": "0 9 * * *",
            "tz": "Europe/Paris",
            "request": {"service": "s", "action": "a"},
        }
    )
    winter = datetime(2026, 1, 10, tzinfo=UTC)
    summer = datetime(2026, 7, 10, tzinfo=UTC)
    for day, hour in ((winter, 8), (summer, 7)):
        tick = schedule.next_tick(round(day.timestamp() * 1000), 0)
        assert tick is not None
        assert datetime.fromtimestamp(tick / 1000, UTC) == day + timedelta(hours=hour)


async def test_the_dashboard_lists_schedules_and_their_runs_as_they_come() -> None:
    """The board asks a leader for the list on a change, and takes each run from
    ``schedule_fired``: the schedule, its next tick, its runs (newest first); removed: gone."""
    broker = MemoryBroker()
    async with (
        _leader(broker, "leader-1"),
        Recorder(bus=_bus(broker, "recorder-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
        _bus(broker, "dashboard-1") as board_bus,
        Dashboard(board_bus) as dashboard,
    ):
        plans = PlanClient(client)

        def listed() -> list[dict[str, Any]]:
            return list(dashboard.snapshot("schedules")["schedules"])

        await plans.add_schedule(_every("shown", 0.2))
        await wait_until(lambda: bool(listed()) and len(listed()[0]["runs"]) >= 2, timeout=10)
        [shown] = listed()
        assert shown["when"] == "every 0.2 s"
        assert shown["target"] == "request recorder.record"
        assert shown["next_tick"] is not None
        assert shown["runs"][0]["tick"] > shown["runs"][1]["tick"]
        assert dashboard.snapshot("schedules")["ticker"] == "leader-1"
        await plans.remove_schedule("shown")
        await wait_until(lambda: not listed(), timeout=10)


async def test_a_lease_has_one_holder_and_passes_on_when_its_bus_closes() -> None:
    """Two buses ask; the first holds it, the second waits; the first's bus closes (as
    its connection would): the second holds it, and ``confirm`` fails on the first."""
    broker = MemoryBroker()
    async with _bus(broker, "a-1") as first, _bus(broker, "b-1") as second:
        held = await first.lease("turns")
        waiting = await second.lease("turns")
        await asyncio.wait_for(held.acquired(), 5)
        assert not waiting.is_held
        await held.confirm()
        await first.aclose()
        await asyncio.wait_for(waiting.acquired(), 5)
        with pytest.raises(ConnectionLost):
            await held.confirm()
        await waiting.confirm()


def test_the_asyncapi_document_has_the_schedule_skills_and_events() -> None:
    """A team with a leader: its schedule skills are operations, and both events."""
    from agentbus.cli._asyncapi_document import asyncapi_document

    card = Leader(bus=_bus(MemoryBroker(), "leader-1")).card
    operations = asyncapi_document([card])["operations"]
    names = {"leader.schedule_add", "leader.schedule_list", "leader.schedule_remove"}
    assert names | {"schedule_fired", "schedule_changed"} <= operations.keys()

"""The dashboard's boards on the in-memory bus: agents, plans and cancel, traffic, changes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import httpx
import orjson
import pytest

from agentbus import Agent, Artifact, RemoteError, Settings, put_artifact, skill
from agentbus.agents import report_progress
from agentbus.agents._traffic import LATENCY_BUCKETS, Traffic
from agentbus.bus import DeadLetter, DeadLetters
from agentbus.dashboard import Changes, Dashboard, DeadLetterBoard, TrafficBoard
from agentbus.dashboard._settings import DashboardSettings
from agentbus.dashboard._traffic import quantile
from agentbus.dashboard.app import create_app
from agentbus.leader import Leader, PlanClient
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus
from support.waiting import wait_until


class Squarer(Agent):
    name = "squarer"
    version = "2.1.0"

    @skill
    async def square(self, n: int) -> int:
        return n * n

    @skill
    async def hang(self) -> str:
        await asyncio.Event().wait()
        return "never"

    @skill
    async def halfway(self) -> str:
        await report_progress(0.5, "half done")
        await asyncio.Event().wait()
        return "never"

    @skill
    async def count(self, n: int) -> list[int]:
        return list(range(n))

    @skill
    async def report(self, lines: int) -> Artifact:
        return await put_artifact(b"line\n" * lines, name="report <1>.txt", media_type="text/html")

    @skill
    async def plan_two(self) -> dict[str, Any]:
        squares = [{"id": name, "skill": "square", "parameters": {"n": 2}} for name in "xy"]
        return {"subtasks": squares}


Start = Callable[[type[Agent], str], Awaitable[Agent]]


@pytest.fixture
async def team() -> AsyncIterator[tuple[Dashboard, Start]]:
    """A registry, a leader and a dashboard on one in-memory broker; agents on demand."""
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.5)
    started: list[Agent] = []

    async def start(cls: type[Agent], agent_id: str) -> Agent:
        bus = await MemoryBus(broker, settings, agent_id=agent_id).open()
        agent = cls(agent_id=agent_id, bus=bus, settings=settings, heartbeat_interval=0.1)
        await agent.start()
        started.append(agent)
        return agent

    await start(Registry, "registry-1")
    await start(Leader, "leader-1")
    bus = await MemoryBus(broker, settings, agent_id="dashboard-1").open()
    async with Dashboard(bus, missed_intervals=3) as dashboard:
        yield dashboard, start
        for agent in reversed(started):
            if agent.bus.is_open:
                await agent.stop()
                await agent.bus.aclose()
    await bus.aclose()


def rows(dashboard: Dashboard) -> dict[str, dict[str, Any]]:
    snapshot = dashboard.snapshot("agents")
    return {row["agent_id"]: row for group in snapshot["services"] for row in group["agents"]}


def service(dashboard: Dashboard, name: str) -> dict[str, Any] | None:
    groups = dashboard.snapshot("agents")["services"]
    return next((group for group in groups if group["service"] == name), None)


async def test_agents_are_listed_by_service_and_a_departed_service_shows_gone(
    team: tuple[Dashboard, Start],
) -> None:
    """A new agent shows with its skills and version; when it leaves, its service is gone."""
    dashboard, start = team
    agent = await start(Squarer, "squarer-1")
    await wait_until(lambda: "squarer-1" in rows(dashboard), timeout=5)
    row = rows(dashboard)["squarer-1"]
    assert (row["status"], row["capacity"], row["version"]) == ("ready", 8, "2.1.0")
    assert row["skills"] == ["square", "hang", "halfway", "count", "report", "plan_two"]
    group = service(dashboard, "squarer")
    assert group is not None
    assert (group["live"], group["gone"]) == (1, False)

    await agent.stop()
    await wait_until(lambda: rows(dashboard)["squarer-1"]["status"] == "offline", timeout=5)
    group = service(dashboard, "squarer")
    assert group is not None
    assert group["gone"] is True
    assert group["live"] == 0


async def test_plans_are_followed_and_cancelled_from_the_board(
    team: tuple[Dashboard, Start],
) -> None:
    """Subtasks show as the leader reports them; cancel stops a running plan."""
    dashboard, start = team
    await start(Squarer, "squarer-1")
    client = dashboard.bus
    await wait_until(lambda: "squarer-1" in rows(dashboard), timeout=5)
    plan = {"id": "p1", "subtasks": [{"id": "a", "skill": "square", "parameters": {"n": 3}}]}
    aggregate = await PlanClient(client).run(plan, timeout=10)
    assert aggregate.status.value == "completed"
    await wait_until(lambda: dashboard.plans.snapshot()["plans"][0]["state"] == "finished", 5)
    view = dashboard.plans.snapshot()["plans"][0]
    assert view["aggregate"]["status"] == "completed"
    assert [(s["id"], s["status"], s["agent_id"]) for s in view["subtasks"]] == [
        ("a", "succeeded", "squarer-1")
    ]

    hanging = {"id": "p2", "subtasks": [{"id": "h", "skill": "hang", "timeout": 30}]}
    running = asyncio.create_task(PlanClient(client).run(hanging, timeout=10))

    def subtask_running() -> bool:
        plans = {p["plan_id"]: p for p in dashboard.plans.snapshot()["plans"]}
        return "p2" in plans and plans["p2"]["counts"].get("running") == 1

    await wait_until(subtask_running, timeout=5)
    answer = await dashboard.plans.cancel("p2")
    assert answer["cancel_sent"] is True
    with pytest.raises(RemoteError):
        await running
    await wait_until(lambda: dashboard.plans.snapshot()["plans"][0]["state"] == "finished", 5)
    cancelled = next(p for p in dashboard.plans.snapshot()["plans"] if p["plan_id"] == "p2")
    assert [s["status"] for s in cancelled["subtasks"]] == ["cancelled"]
    assert cancelled["subtasks"][0]["error"]["message"] == "the plan was cancelled by request"


async def test_a_plans_files_are_listed_and_downloaded_checked_as_attachments(
    team: tuple[Dashboard, Start],
) -> None:
    """A step that returns an artifact: its card lists the file; the download is its bytes,
    as an attachment in a sandbox whatever its media type; an unknown id is a 404 and an
    object gone from the store a 404 with the reason, before any byte."""
    dashboard, start = team
    await start(Squarer, "squarer-1")
    await wait_until(lambda: "squarer-1" in rows(dashboard), timeout=5)
    step = {"id": "r", "skill": "report", "parameters": {"lines": 50_000}}
    aggregate = await PlanClient(dashboard.bus).run({"id": "files", "subtasks": [step]}, timeout=10)
    made = Artifact.model_validate(aggregate.subtask("r").result)
    await wait_until(lambda: dashboard.plans.snapshot()["plans"][0]["artifacts"], timeout=5)
    [listed] = dashboard.plans.snapshot()["plans"][0]["artifacts"]
    assert listed["step"] == "r"
    assert (listed["id"], listed["name"], listed["size"]) == (made.id, made.name, 250_000)
    assert "location" not in listed

    app = create_app(lambda: dashboard, DashboardSettings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        got = await http.get(f"/api/plans/files/artifacts/{made.id}")
        assert got.status_code == 200
        assert got.content == b"line\n" * 50_000
        assert got.headers["content-type"] == "application/octet-stream"
        assert got.headers["content-disposition"] == (
            "attachment; filename*=UTF-8''report%20%3C1%3E.txt"
        )
        assert got.headers["content-security-policy"] == "sandbox"
        assert got.headers["x-artifact-sha256"] == made.sha256
        unknown = await http.get(f"/api/plans/files/artifacts/{'0' * 32}")
        assert unknown.status_code == 404
        assert await dashboard.bus.artifacts.delete(made)
        gone = await http.get(f"/api/plans/files/artifacts/{made.id}")
        assert gone.status_code == 404
        assert "error" in gone.json()


async def test_a_shaped_plan_shows_items_under_their_step_and_fragments_under_theirs(
    team: tuple[Dashboard, Start],
) -> None:
    """A step mapped over 30 numbers: its row sums its items up and 20 of them follow it; a
    fragment's steps follow the step that planned them; a branch whose condition fails shows
    skipped; the plan counts (and completes on) its own steps, not its items."""
    dashboard, start = team
    await start(Squarer, "squarer-1")
    await wait_until(lambda: "squarer-1" in rows(dashboard), timeout=5)
    plan = {
        "id": "shaped",
        "subtasks": [
            {"id": "nums", "skill": "count", "parameters": {"n": 30}},
            {"id": "sq", "skill": "square", "depends_on": ["nums"],
             "map": {"over": "nums", "as": "n"}},
            {"id": "f", "skill": "plan_two", "fragment": True},
            {"id": "never", "skill": "square", "parameters": {"n": 1}, "depends_on": ["nums"],
             "when": {"in": [99, {"var": "nums"}]}},
        ],
    }  # fmt: skip
    aggregate = await PlanClient(dashboard.bus).run(plan, timeout=10)
    assert aggregate.status.value == "completed"
    await wait_until(lambda: dashboard.plans.snapshot()["plans"][0]["state"] == "finished", 5)
    view = dashboard.plans.snapshot()["plans"][0]

    assert view["aggregate"]["status"] == "completed"
    assert view["counts"] == {"succeeded": 3, "skipped": 1, "pending": 0}
    ids = [row["id"] for row in view["subtasks"]]
    assert ids == ["nums", "sq", *(f"sq[{i}]" for i in range(20)), "f", "f/x", "f/y", "never"]
    by_id = {row["id"]: row for row in view["subtasks"]}
    assert by_id["sq"]["items"] == {"total": 30, "counts": {"succeeded": 30}, "shown": 20}
    assert view["aggregate"]["attempts"] == 1 + 30 + 1 + 2  # nums, the items, f, f/x and f/y
    assert (by_id["sq[7]"]["parent"], by_id["sq[7]"]["kind"]) == ("sq", "item")
    assert (by_id["f/y"]["parent"], by_id["f/y"]["kind"]) == ("f", "fragment")
    assert (by_id["never"]["kind"], by_id["never"]["status"]) == ("step", "skipped")


async def test_a_skills_progress_keeps_its_subtask_running_with_the_fraction(
    team: tuple[Dashboard, Start],
) -> None:
    """A skill's own progress news: the subtask stays running, with fraction and message."""
    dashboard, start = team
    await start(Squarer, "squarer-1")
    await wait_until(lambda: "squarer-1" in rows(dashboard), timeout=5)
    plan = {"id": "p3", "subtasks": [{"id": "h", "skill": "halfway", "timeout": 30}]}
    running = asyncio.create_task(PlanClient(dashboard.bus).run(plan, timeout=10))

    def halfway() -> bool:
        plans = dashboard.plans.snapshot()["plans"]
        return bool(plans) and plans[0]["subtasks"][0]["fraction"] == 0.5

    await wait_until(halfway, timeout=5)
    (subtask,) = dashboard.plans.snapshot()["plans"][0]["subtasks"]
    assert (subtask["status"], subtask["message"]) == ("running", "half done")
    await dashboard.plans.cancel("p3")
    with pytest.raises(RemoteError):
        await running


async def test_cancel_of_an_unknown_or_finished_plan_is_refused(
    team: tuple[Dashboard, Start],
) -> None:
    """Cancel names what is wrong: no such plan."""
    dashboard, _ = team
    with pytest.raises(Exception, match="no plan 'nope' is known"):
        await dashboard.plans.cancel("nope")


def test_quantiles_interpolate_inside_the_bucket() -> None:
    """p50 of 10 fast and 10 slow requests falls at the top of the fast bucket."""
    buckets = [0] * (len(LATENCY_BUCKETS) + 1)
    buckets[LATENCY_BUCKETS.index(0.01)] = 10  # (5 ms, 10 ms]
    buckets[LATENCY_BUCKETS.index(1.0)] = 10  # (500 ms, 1 s]
    assert quantile(0.5, buckets) == pytest.approx(0.01)
    assert quantile(0.99, buckets) == pytest.approx(0.5 + 0.5 * 9.8 / 10)
    assert quantile(0.5, [0] * len(buckets)) is None


def test_traffic_is_read_from_cumulative_counts_between_beats() -> None:
    """Rates and errors come from differences; a restarted agent's reset counts are taken whole."""
    now = [0.0]
    board = TrafficBoard(on_change=lambda: None, clock=lambda: now[0])
    traffic = Traffic()
    board.take("w-1", "worker", traffic.report())
    for _ in range(30):
        traffic.observe_handler("square", "success", 0.004)
    traffic.observe_handler("square", "timeout", 2.0)
    now[0] = 10.0
    board.take("w-1", "worker", traffic.report())
    (row,) = board.snapshot()["services"]
    assert (row["requests"], row["errors"], row["rate"]) == (31, {"timeout": 1}, 3.1)
    assert row["p50"] is not None
    assert row["p50"] <= 0.005

    fresh = Traffic()  # the same id, restarted: counts start again
    fresh.observe_handler("square", "success", 0.004)
    now[0] = 20.0
    board.take("w-1", "worker", fresh.report())
    board.take("w-1", "worker", {"served": "many"})  # malformed: ignored
    (row,) = board.snapshot()["services"]
    assert row["requests"] == 32


async def test_changes_wake_waiters_with_the_topics_that_moved() -> None:
    """A waiter learns which topics changed since it last looked; none after a timeout."""
    changes = Changes()
    seen = changes.versions()
    waiting = asyncio.create_task(changes.wait(seen, timeout=5))
    await asyncio.sleep(0)
    changes.touch("plans")
    assert await waiting == ["plans"]
    assert await changes.wait(changes.versions(), timeout=0.01) == []


async def test_a_durable_plan_cancelled_from_the_board_ends_and_is_not_handed_over() -> None:
    """Cancel of a durable plan stops it like any other: cancelled, and 'ended' journaled."""
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.2)

    def bus(agent_id: str) -> MemoryBus:
        return MemoryBus(broker, settings, agent_id=agent_id)

    async with (
        # Beats a second apart: a loop stalled 0.3 s on a loaded host (three test workers)
        # would have the registry take 0.1 s agents for gone.
        Registry(bus=bus("registry-1"), heartbeat_interval=1) as registry,
        Leader(bus=bus("leader-1"), durable=True, heartbeat_interval=1),
        Squarer(bus=bus("squarer-1"), heartbeat_interval=1),
        bus("dashboard-1") as board_bus,
        Dashboard(board_bus) as dashboard,
    ):
        # The leader asks the registry who offers 'hang': a plan sent before the squarer's
        # first beat is heard fails at once, never running.
        await wait_until(lambda: bool(registry.table.capable("hang")), timeout=5)
        plan = {"id": "lasting", "subtasks": [{"id": "h", "skill": "hang", "timeout": 30}]}
        running = asyncio.create_task(PlanClient(board_bus).run(plan, timeout=10))

        def started() -> bool:
            plans = dashboard.plans.snapshot()["plans"]
            return bool(plans) and plans[0]["counts"].get("running") == 1

        await wait_until(started, timeout=5)
        await dashboard.plans.cancel("lasting")
        with pytest.raises(RemoteError, match="cancelled"):
            await running
        await wait_until(lambda: dashboard.plans.snapshot()["plans"][0]["done"] == 1, 5)
    (view,) = dashboard.plans.snapshot()["plans"]
    assert [s["status"] for s in view["subtasks"]] == ["cancelled"]
    journal = broker.journals["agentbus.journal.plans"]
    records = [record for _, body in journal for record in orjson.loads(body)["records"]]
    assert [r["status"] for r in records if r["kind"] == "ended"] == ["failed"]


class FlakyDeadLetters:
    """A dead-letter queue whose first looks fail with an error no one mapped."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.letters: list[DeadLetter] = []

    async def count(self) -> int:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("channel is closing")
        return len(self.letters)

    async def browse(self, limit: int = 200) -> list[DeadLetter]:
        return self.letters[:limit]


async def test_the_dead_letter_board_keeps_watching_after_an_unexpected_error() -> None:
    """An error the transport did not map shows on the board; the next look recovers."""
    queue = FlakyDeadLetters(failures=2)
    moved: list[int] = []
    board = DeadLetterBoard(
        cast(DeadLetters, queue), on_change=lambda: moved.append(1), watch_every=0.01
    )
    await board.start()
    try:
        await wait_until(lambda: board.snapshot()["error"] is not None)
        assert "RuntimeError: channel is closing" in board.snapshot()["error"]
        queue.letters.append(
            DeadLetter(
                id="poison",
                reason="expired",
                queue="svc",
                exchange="team",
                routing_key="agent.svc.request",
                sender_id="client",
                dead_lettered_at=None,
                deaths=1,
                size=2,
                body="{}",
                truncated=False,
            )
        )
        await wait_until(lambda: board.snapshot()["shown"] == 1)
    finally:
        await board.aclose()
    assert board.snapshot()["error"] is None
    assert [letter["id"] for letter in board.snapshot()["letters"]] == ["poison"]


async def test_each_agent_row_carries_its_site() -> None:
    """Across sites (docs/sites.md) a row says where its agent runs (the page adds a column)."""
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.5, site="eu", peer_sites="us")
    bus = await MemoryBus(broker, settings, agent_id="dashboard-1").open()
    agent_bus = await MemoryBus(broker, settings, agent_id="squarer-eu").open()
    agent = Squarer(agent_id="squarer-eu", bus=agent_bus, settings=settings, heartbeat_interval=0.1)
    async with Dashboard(bus, missed_intervals=3) as dashboard:
        await agent.start()
        try:
            await wait_until(lambda: "squarer-eu" in rows(dashboard), timeout=5)
            assert rows(dashboard)["squarer-eu"]["site"] == "eu"
        finally:
            await agent.stop()
            await agent_bus.aclose()
    await bus.aclose()

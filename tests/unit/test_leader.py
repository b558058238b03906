"""The leader on the in-memory bus: DAG scheduling, inputs, retries, failover, cancel, progress."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from pydantic import ValidationError

from agentbus import Agent, NoCapableAgent, RemoteError, Settings, UsageError, skill
from agentbus.agents import AGENT_OFFLINE, current_request
from agentbus.envelopes import utcnow
from agentbus.leader import (
    Leader,
    Plan,
    PlanClient,
    PlanRunner,
    PlanStatus,
    Progress,
    RunState,
    SkillDirectory,
    SubtaskStatus,
)
from agentbus.registry import AgentInfo, Registry
from agentbus.testing import MemoryBroker, MemoryBus


class Writer(Agent):
    name = "writer"

    @skill
    async def outline(self, topic: str) -> dict[str, Any]:
        return {"title": topic.title(), "sections": [f"{topic} {n}" for n in range(3)]}

    @skill
    async def draft(self, sections: list[str]) -> str:
        return " ".join(f"{section}." for section in sections)

    @skill
    async def summary(self, text: str) -> dict[str, Any]:
        return {"words": len(text.split()), "first": text.split(".")[0]}


class Worker(Agent):
    name = "worker"
    calls: Counter[str] = Counter()
    cancelled: list[str] = []
    gate: asyncio.Event | None = None

    @skill
    async def square(self, n: int) -> int:
        Worker.calls[self.id] += 1
        return n * n

    @skill
    async def total(self, values: list[int]) -> int:
        return sum(values)

    @skill
    async def fail(self, why: str = "broken") -> None:
        raise ValueError(why)

    @skill
    async def hang(self) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            Worker.cancelled.append(current_request().message_id)
            raise
        return "never"

    @skill
    async def flaky(self, key: str) -> str:
        Worker.calls[key] += 1
        if Worker.calls[key] < 3:
            raise RuntimeError(f"attempt {Worker.calls[key]} failed")
        return self.id

    @skill
    async def wait_gate(self) -> str:
        assert Worker.gate is not None
        await Worker.gate.wait()
        return self.id


Team = Callable[..., Awaitable[Agent]]


class Recorder(list[Progress]):
    """Collects progress events; lets a test wait for a transition."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, asyncio.Event] = {}

    def __call__(self, progress: Progress) -> None:
        self.append(progress)
        self._event(progress.transition).set()

    def _event(self, transition: str) -> asyncio.Event:
        return self._seen.setdefault(transition, asyncio.Event())

    async def wait_for(self, transition: str) -> None:
        await asyncio.wait_for(self._event(transition).wait(), timeout=10)


@pytest.fixture
async def team() -> AsyncIterator[tuple[MemoryBroker, Team]]:
    """Start agents on one in-memory broker; stop them all afterwards."""
    Worker.calls = Counter()
    Worker.cancelled = []
    Worker.gate = None
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.5)
    started: list[Agent] = []

    async def start(cls: type[Agent], agent_id: str | None = None, **kwargs: Any) -> Agent:
        agent_id = agent_id or f"{cls.name}-{len(started)}"
        bus = await MemoryBus(broker, settings, agent_id=agent_id).open()
        agent = cls(agent_id=bus.agent_id, bus=bus, settings=settings, **kwargs)
        await agent.start()
        started.append(agent)
        return agent

    await start(Registry, "registry-1")
    yield broker, start
    for agent in reversed(started):
        await agent.stop()
        await agent.bus.aclose()


async def run(
    broker: MemoryBroker,
    plan: dict[str, Any],
    progress: Recorder | None = None,
    timeout: float = 20,
) -> Any:
    async with MemoryBus(broker, Settings(), agent_id="submitter") as bus:
        client = PlanClient(bus)
        return await client.run(plan, timeout=timeout, on_progress=progress)


async def test_chain_passes_each_result_to_the_next_step(team: tuple[MemoryBroker, Team]) -> None:
    """outline -> draft (a dotted path of outline) -> summary (draft's whole result)."""
    broker, start = team
    await start(Writer)
    await start(Leader, "leader-1")
    plan = {
        "id": "chain",
        "subtasks": [
            {"id": "outline", "skill": "outline", "parameters": {"topic": "bees"}},
            {
                "id": "draft",
                "skill": "draft",
                "depends_on": ["outline"],
                "inputs": {"sections": "outline.sections"},
            },
            {
                "id": "summary",
                "skill": "summary",
                "depends_on": ["draft"],
                "inputs": {"text": "draft"},
            },
        ],
    }

    aggregate = await run(broker, plan)

    assert aggregate.status is PlanStatus.COMPLETED
    assert aggregate.subtask("draft").result == "bees 0. bees 1. bees 2."
    assert aggregate.subtask("summary").result == {"words": 6, "first": "bees 0"}
    outline = aggregate.subtask("outline")
    assert outline.attempts == 1
    assert outline.agents[0].startswith("writer-")
    assert aggregate.totals.succeeded == 3
    assert outline.ended_at is not None
    assert outline.started_at is not None
    assert aggregate.subtask("draft").started_at >= outline.ended_at


async def test_fan_out_and_fan_in_over_three_workers(team: tuple[MemoryBroker, Team]) -> None:
    """50 parallel subtasks spread over 3 instances, summed by a final step."""
    broker, start = team
    for n in range(3):
        await start(Worker, f"worker-{n}", concurrency=4)
    await start(Leader, "leader-1")
    squares = [
        {"id": f"sq{n}", "skill": "square", "parameters": {"n": n}, "critical": False}
        for n in range(50)
    ]
    plan = {
        "id": "fan",
        "max_parallel": 50,
        "subtasks": [
            *squares,
            {
                "id": "sum",
                "skill": "total",
                "depends_on": [f"sq{n}" for n in range(50)],
                "inputs": {"values": [f"sq{n}" for n in range(50)]},
            },
        ],
    }

    aggregate = await run(broker, plan)

    assert aggregate.status is PlanStatus.COMPLETED
    assert [aggregate.subtask(f"sq{n}").result for n in range(50)] == [n * n for n in range(50)]
    assert aggregate.subtask("sum").result == sum(n * n for n in range(50))
    assert set(Worker.calls) == {"worker-0", "worker-1", "worker-2"}
    assert sum(Worker.calls.values()) == 50


async def test_non_critical_failure_gives_partial_and_skips_only_dependents(
    team: tuple[MemoryBroker, Team],
) -> None:
    """A non-critical failure skips its dependents; everything else completes: partial."""
    broker, start = team
    await start(Worker)
    await start(Leader, "leader-1")
    plan = {
        "subtasks": [
            {"id": "ok", "skill": "square", "parameters": {"n": 3}},
            {"id": "bad", "skill": "fail", "critical": False},
            {"id": "after-bad", "skill": "square", "parameters": {"n": 1}, "depends_on": ["bad"]},
            {"id": "after-ok", "skill": "square", "parameters": {"n": 2}, "depends_on": ["ok"]},
        ]
    }

    aggregate = await run(broker, plan)

    assert aggregate.status is PlanStatus.PARTIAL
    assert aggregate.subtask("ok").status is SubtaskStatus.SUCCEEDED
    assert aggregate.subtask("after-ok").result == 4
    assert aggregate.subtask("bad").status is SubtaskStatus.FAILED
    assert aggregate.subtask("bad").error["code"] == "processing_failed"
    assert aggregate.subtask("after-bad").status is SubtaskStatus.SKIPPED


async def test_critical_failure_fails_the_plan_and_cancels_running_work(
    team: tuple[MemoryBroker, Team],
) -> None:
    """A failed critical subtask: plan failed, dependents skipped, running ones cancelled."""
    broker, start = team
    await start(Worker, concurrency=4)
    await start(Leader, "leader-1")
    progress = Recorder()
    plan = {
        "subtasks": [
            {"id": "slow", "skill": "hang", "timeout": 30},
            {"id": "bad", "skill": "fail", "depends_on": ["gate"]},
            {"id": "gate", "skill": "square", "parameters": {"n": 1}},
            {"id": "after", "skill": "square", "parameters": {"n": 1}, "depends_on": ["bad"]},
        ]
    }

    aggregate = await run(broker, plan, progress)

    assert aggregate.status is PlanStatus.FAILED
    assert aggregate.subtask("bad").status is SubtaskStatus.FAILED
    assert aggregate.subtask("after").status is SubtaskStatus.SKIPPED
    assert aggregate.subtask("slow").status is SubtaskStatus.CANCELLED
    assert "bad" in aggregate.error
    await broker.idle()
    assert len(Worker.cancelled) == 1, "the worker holding 'slow' was told to stop"
    transitions = {(p.subtask_id, p.transition) for p in progress}
    assert ("slow", "cancelled") in transitions
    assert ("after", "skipped") in transitions


async def test_cyclic_plan_is_refused_before_anything_is_sent(
    team: tuple[MemoryBroker, Team],
) -> None:
    """A cycle is named in the error, locally and by the leader; no worker is asked."""
    broker, start = team
    await start(Worker)
    await start(Leader, "leader-1")
    cyclic = {
        "subtasks": [
            {"id": "a", "skill": "square", "parameters": {"n": 1}, "depends_on": ["c"]},
            {"id": "b", "skill": "square", "parameters": {"n": 1}, "depends_on": ["a"]},
            {"id": "c", "skill": "square", "parameters": {"n": 1}, "depends_on": ["b"]},
        ]
    }

    with pytest.raises(ValidationError, match=r"cycle: a -> c -> b -> a"):
        Plan.model_validate(cyclic)
    async with MemoryBus(broker, agent_id="raw-submitter") as bus:
        with pytest.raises(RemoteError) as caught:
            await bus.request("leader", "run_plan", {"plan": cyclic}, timeout=5)

    assert caught.value.code == "invalid_parameters"
    assert "cycle" in caught.value.message
    assert sum(Worker.calls.values()) == 0


@pytest.mark.parametrize(
    ("subtasks", "message"),
    [
        pytest.param(
            [{"id": "a", "skill": "s"}, {"id": "a", "skill": "s"}], "duplicate", id="duplicate"
        ),
        pytest.param([{"id": "a", "skill": "s", "depends_on": ["zz"]}], "unknown", id="unknown"),
        pytest.param(
            [{"id": "a", "skill": "s"}, {"id": "b", "skill": "s", "inputs": {"x": "a.y"}}],
            "does not depend",
            id="input-not-a-dependency",
        ),
        pytest.param([{"id": "a", "skill": "s", "depends_on": ["a"]}], "itself", id="self"),
    ],
)
def test_invalid_plans_are_refused_with_a_clear_error(
    subtasks: list[dict[str, Any]], message: str
) -> None:
    """Duplicate ids, unknown dependencies and bad inputs references are refused."""
    with pytest.raises(ValidationError, match=message):
        Plan.model_validate({"subtasks": subtasks})


async def test_no_capable_agent_fails_the_subtask_at_once(
    team: tuple[MemoryBroker, Team],
) -> None:
    """A skill nobody offers fails with no_capable_agent, without retries or waiting."""
    broker, start = team
    await start(Leader, "leader-1")
    plan = {"subtasks": [{"id": "x", "skill": "teleport", "retries": 5, "timeout": 60}]}

    aggregate = await asyncio.wait_for(run(broker, plan), timeout=10)

    outcome = aggregate.subtask("x")
    assert outcome.status is SubtaskStatus.FAILED
    assert outcome.error["code"] == "no_capable_agent"
    assert outcome.attempts == 1


async def test_retries_with_backoff_until_success(team: tuple[MemoryBroker, Team]) -> None:
    """A subtask failing twice succeeds on its third attempt; attempts are counted."""
    broker, start = team
    await start(Worker, "worker-a")
    await start(Worker, "worker-b")
    await start(Leader, "leader-1")
    plan = {"subtasks": [{"id": "f", "skill": "flaky", "parameters": {"key": "k"}, "retries": 3}]}
    progress = Recorder()

    aggregate = await run(broker, plan, progress)

    outcome = aggregate.subtask("f")
    assert outcome.status is SubtaskStatus.SUCCEEDED
    assert outcome.attempts == 3
    assert [p.transition for p in progress].count("retrying") == 2
    assert set(outcome.agents) == {"worker-a", "worker-b"}, "retries prefer another instance"


async def test_agent_offline_moves_its_subtask_on_at_once(team: tuple[MemoryBroker, Team]) -> None:
    """When the instance holding a subtask is reported offline, another takes it at once."""
    broker, start = team
    frozen = await start(Worker, "worker-frozen")
    Worker.gate = asyncio.Event()
    await start(Leader, "leader-1")
    plan = {"subtasks": [{"id": "w", "skill": "wait_gate", "timeout": 60, "retries": 1}]}
    progress = Recorder()
    running = asyncio.create_task(run(broker, plan, progress))
    await progress.wait_for("running")
    healthy = await start(Worker, "worker-healthy")

    await frozen.bus.emit(AGENT_OFFLINE, {"agent_id": "worker-frozen", "service": "worker"})
    await progress.wait_for("retrying")
    Worker.gate.set()
    aggregate = await asyncio.wait_for(running, timeout=10)

    outcome = aggregate.subtask("w")
    assert outcome.status is SubtaskStatus.SUCCEEDED
    assert outcome.result == healthy.id
    assert outcome.attempts == 2
    assert outcome.agents == ["worker-frozen", "worker-healthy"]


async def test_plan_deadline_bounds_every_subtask(team: tuple[MemoryBroker, Team]) -> None:
    """A plan deadline shorter than a subtask's timeout ends the plan at the deadline."""
    broker, start = team
    await start(Worker)
    await start(Leader, "leader-1")
    plan = {"deadline": 0.5, "subtasks": [{"id": "h", "skill": "hang", "timeout": 60}]}

    aggregate = await asyncio.wait_for(run(broker, plan), timeout=10)

    assert aggregate.status is PlanStatus.FAILED
    outcome = aggregate.subtask("h")
    assert outcome.status in (SubtaskStatus.FAILED, SubtaskStatus.CANCELLED)
    assert aggregate.totals.wall_time < 5


async def test_progress_reports_every_transition_in_order(team: tuple[MemoryBroker, Team]) -> None:
    """Each subtask reports started then succeeded; the done counter reaches the total."""
    broker, start = team
    await start(Worker)
    await start(Leader, "leader-1")
    plan = {
        "subtasks": [
            {"id": "a", "skill": "square", "parameters": {"n": 2}},
            {"id": "b", "skill": "square", "parameters": {"n": 3}, "depends_on": ["a"]},
        ]
    }
    progress = Recorder()

    await run(broker, plan, progress)

    for subtask in ("a", "b"):
        mine = [p.transition for p in progress if p.subtask_id == subtask]
        assert mine == ["started", "succeeded"]
    assert progress[-1].done == progress[-1].total == 2


async def test_a_diamond_with_a_ruled_out_branch_ends_partial(
    team: tuple[MemoryBroker, Team],
) -> None:
    """A fan-in ruled out by one failed branch stays skipped when its other branch succeeds."""
    broker, start = team
    await start(Worker)
    await start(Leader, "leader-1")
    plan = {
        "subtasks": [
            {"id": "bad", "skill": "fail", "critical": False},
            {"id": "ok", "skill": "square", "parameters": {"n": 2}},
            {"id": "mid", "skill": "square", "parameters": {"n": 1}, "depends_on": ["bad"]},
            {"id": "join", "skill": "total", "depends_on": ["mid", "ok"],
             "inputs": {"values": ["mid", "ok"]}},
        ]
    }  # fmt: skip

    aggregate = await run(broker, plan)

    assert aggregate.status is PlanStatus.PARTIAL
    assert aggregate.subtask("ok").result == 4
    for skipped in ("mid", "join"):
        outcome = aggregate.subtask(skipped)
        assert outcome.status is SubtaskStatus.SKIPPED
        assert outcome.error == {"code": "skipped", "message": "dependency 'bad' did not succeed"}
        assert outcome.attempts == 0


async def test_errors_keep_their_wire_shape(team: tuple[MemoryBroker, Team]) -> None:
    """An agent's error carries code, message and details; the leader's own, code and message."""
    broker, start = team
    await start(Worker)
    await start(Leader, "leader-1")
    plan = {
        "subtasks": [
            {"id": "bad", "skill": "fail", "parameters": {"why": "no"}, "critical": False},
            {"id": "after", "skill": "square", "parameters": {"n": 1}, "depends_on": ["bad"]},
        ]
    }
    progress = Recorder()

    aggregate = await run(broker, plan, progress)

    bad = aggregate.subtask("bad").error
    assert bad is not None
    assert set(bad) == {"code", "message", "details"}
    assert bad["code"] == "processing_failed"
    assert aggregate.subtask("after").error == {
        "code": "skipped",
        "message": "dependency 'bad' did not succeed",
    }
    wire = {p.subtask_id: p.error for p in progress if p.error is not None}
    assert wire == {"bad": bad, "after": aggregate.subtask("after").error}


async def test_a_runner_runs_its_plan_once(team: tuple[MemoryBroker, Team]) -> None:
    """The runner's state goes pending, running, finished; a second run is a UsageError."""
    broker, start = team
    await start(Worker)
    plan = Plan.model_validate(
        {"subtasks": [{"id": "a", "skill": "square", "parameters": {"n": 3}}]}
    )
    async with MemoryBus(broker, Settings(), agent_id="leader-direct") as bus:
        runner = PlanRunner(bus, plan, directory=SkillDirectory(bus))
        assert runner.state is RunState.PENDING
        assert "state=pending" in repr(runner)

        aggregate = await runner.run()

        assert aggregate.status is PlanStatus.COMPLETED
        assert runner.state is RunState.FINISHED
        assert runner.stop_reason is None
        with pytest.raises(UsageError, match="has run already"):
            await runner.run()
        assert runner.state is RunState.FINISHED


async def test_a_stopped_run_says_why_apart_from_its_state(
    team: tuple[MemoryBroker, Team],
) -> None:
    """A critical failure stops the run: state STOPPED, the reason in stop_reason and error."""
    broker, start = team
    await start(Worker)
    plan = Plan.model_validate(
        {
            "subtasks": [
                {"id": "bad", "skill": "fail"},
                {"id": "after", "skill": "square", "parameters": {"n": 1}, "depends_on": ["bad"]},
            ]
        }
    )
    async with MemoryBus(broker, Settings(), agent_id="leader-direct") as bus:
        runner = PlanRunner(bus, plan, directory=SkillDirectory(bus))
        aggregate = await runner.run()

    assert runner.state is RunState.STOPPED
    assert runner.stop_reason == "critical subtask 'bad' failed"
    assert aggregate.error == runner.stop_reason
    assert aggregate.subtask("after").error == {"code": "skipped", "message": runner.stop_reason}


class Babbler(Agent):
    """Answers find_skill with something that is not a list of agents."""

    name = "babbler"

    @skill
    async def find_skill(self, skill: str) -> list[dict[str, Any]]:
        return [{"agent_id": skill}]


async def test_the_directory_reads_registry_replies_as_agent_info(
    team: tuple[MemoryBroker, Team],
) -> None:
    """find_skill's answer becomes AgentInfo at the edge; an answer that is not one is refused."""
    broker, start = team
    await start(Worker, "worker-a")
    await start(Babbler)
    async with MemoryBus(broker, Settings(), agent_id="asker") as bus:
        agents = await SkillDirectory(bus).capable("square")
        with pytest.raises(NoCapableAgent, match="not a list of agents"):
            await SkillDirectory(bus, registry="babbler").capable("square")

    assert [type(agent) for agent in agents] == [AgentInfo]
    assert agents[0].agent_id == "worker-a"
    assert agents[0].service == "worker"


async def test_a_cancelled_run_stops_its_work_and_says_so(team: tuple[MemoryBroker, Team]) -> None:
    """Cancelling run() cancels the running subtasks, tells their holder, and records why."""
    broker, start = team
    await start(Worker)
    plan = Plan.model_validate({"subtasks": [{"id": "h", "skill": "hang", "timeout": 60}]})
    held = asyncio.Event()

    async def sink(batch: list[Progress]) -> None:
        if any(p.transition == "running" for p in batch):
            held.set()

    async with MemoryBus(broker, Settings(), agent_id="leader-direct") as bus:
        runner = PlanRunner(bus, plan, directory=SkillDirectory(bus), progress=sink)
        running = asyncio.create_task(runner.run())
        await asyncio.wait_for(held.wait(), timeout=10)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        await broker.idle()

    assert runner.state is RunState.STOPPED
    assert runner.stop_reason == "the leader is stopping"
    assert len(Worker.cancelled) == 1, "the worker holding 'h' was told to stop"


class SlowRegistry(Agent):
    """Answers find_skill once let through, with one worker."""

    name = "slow-registry"
    asked: asyncio.Event
    gate: asyncio.Event

    calls = 0

    @skill
    async def find_skill(self, skill: str) -> list[AgentInfo]:
        SlowRegistry.calls += 1
        SlowRegistry.asked.set()
        await SlowRegistry.gate.wait()
        return [
            AgentInfo(
                agent_id="worker-a", service="worker", status="ready", in_flight=0, capacity=1,
                skills=[skill], interval=1.0, last_seen=utcnow(), age=0.0, card_digest="x",
            )
        ]  # fmt: skip


async def test_a_shared_lookup_survives_its_first_asker_being_cancelled(
    team: tuple[MemoryBroker, Team],
) -> None:
    """Two asks share one lookup; cancelling the first (its plan stopped) still serves the other."""
    broker, start = team
    SlowRegistry.asked, SlowRegistry.gate = asyncio.Event(), asyncio.Event()
    SlowRegistry.calls = 0
    await start(SlowRegistry)
    async with MemoryBus(broker, Settings(), agent_id="asker") as bus:
        directory = SkillDirectory(bus, registry="slow-registry")
        first = asyncio.create_task(directory.capable("square"))
        second = asyncio.create_task(directory.capable("square"))
        await asyncio.wait_for(SlowRegistry.asked.wait(), timeout=10)
        first.cancel()
        SlowRegistry.gate.set()

        agents = await asyncio.wait_for(second, timeout=10)
        cached = await directory.capable("square")

    assert first.cancelled()
    assert SlowRegistry.calls == 1, "one lookup for both asks and the cached one"
    assert [agent.agent_id for agent in agents] == ["worker-a"]
    assert cached == agents, "the lookup's answer was cached"

"""Plans that shape themselves: a step mapped over an earlier result, a step under a condition."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pydantic import ValidationError

from agentbus import Agent, Leader, PlanClient, Settings, current_request, skill
from agentbus.leader import Plan, PlanStatus, Progress, SubtaskStatus
from agentbus.leader._conditions import check_condition, evaluate, truthy
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus


class Files(Agent):
    name = "files"
    runs: Counter[str] = Counter()

    @skill
    async def listing(self, count: int) -> list[dict[str, Any]]:
        return [{"path": f"f{n}.py", "lines": n * 10} for n in range(count)]

    @skill
    async def dirs(self) -> list[list[str]]:
        return [["a/1", "a/2"], [], ["c/1"]]

    @skill
    async def measure(self, path: str) -> dict[str, Any]:
        Files.runs[current_request().metadata.model_extra["subtask_id"]] += 1
        if path == "f3.py":
            raise ValueError("f3 is unreadable")
        return {"path": path, "size": len(path)}

    @skill
    async def total(self, sizes: list[Any]) -> int:
        return sum(size for size in sizes if size is not None)

    @skill
    async def verdict(self, lines: int) -> dict[str, Any]:
        return {"big": lines > 10}

    @skill
    async def note(self, text: str = "") -> str:
        return f"noted {text}".strip()


@asynccontextmanager
async def team(**settings: Any) -> AsyncIterator[PlanClient]:
    broker = MemoryBroker()
    config = Settings(**settings)
    Files.runs = Counter()
    async with (
        Registry(bus=MemoryBus(broker, agent_id="registry-1"), heartbeat_interval=0.2),
        Leader(
            bus=MemoryBus(broker, config, agent_id="leader-1"),
            settings=config,
            heartbeat_interval=0.2,
        ),
        Files(bus=MemoryBus(broker, agent_id="files-1"), heartbeat_interval=0.2),
        MemoryBus(broker) as client,
    ):
        yield PlanClient(client)


def _plan(count: int, items: str = "optional", **mapped: Any) -> dict[str, Any]:
    return {
        "id": f"map-{count}",
        "subtasks": [
            {"id": "list", "skill": "listing", "parameters": {"count": count}},
            {
                "id": "measure",
                "skill": "measure",
                "depends_on": ["list"],
                "map": {"over": "list.*.path", "as": "path", "items": items, **mapped},
            },
            {
                "id": "sum",
                "skill": "total",
                "depends_on": ["measure"],
                "inputs": {"sizes": "measure.*.size"},
            },
        ],
    }


async def test_a_step_runs_once_per_item_and_its_results_come_in_order() -> None:
    """Mapped over a path into a list: results in order, an optional failure a null."""
    progress: list[Progress] = []
    async with team() as plans:
        aggregate = await plans.run(_plan(6), timeout=20, on_progress=progress.append)
    measure = aggregate.subtask("measure")
    assert aggregate.status is PlanStatus.COMPLETED
    assert [r and r["path"] for r in measure.result] == [
        "f0.py",
        "f1.py",
        "f2.py",
        None,
        "f4.py",
        "f5.py",
    ]
    assert measure.items is not None
    assert (measure.items["total"], measure.items["succeeded"], measure.items["failed"]) == (
        6,
        5,
        1,
    )
    assert measure.items["failures"][0]["index"] == 3
    assert aggregate.subtask("sum").result == 5 * 5
    assert set(Files.runs) == {f"measure[{n}]" for n in range(6)}
    assert all(count == 1 for count in Files.runs.values())
    items = {p.subtask_id for p in progress if p.subtask_id.startswith("measure[")}
    assert len(items) == 6


async def test_a_critical_item_that_fails_fails_the_step() -> None:
    """items: critical: the step fails, naming the item; its dependents are skipped."""
    async with team() as plans:
        aggregate = await plans.run(_plan(6, items="critical", concurrency=1), timeout=20)
    measure = aggregate.subtask("measure")
    assert aggregate.status is PlanStatus.FAILED
    assert measure.status is SubtaskStatus.FAILED
    assert measure.error is not None
    assert "item 3 of 'measure'" in measure.error["message"]
    assert aggregate.subtask("sum").status is SubtaskStatus.SKIPPED


async def test_an_empty_list_is_a_step_that_succeeds_with_no_items() -> None:
    """Zero items: the step succeeds with [], its dependents run on it."""
    async with team() as plans:
        aggregate = await plans.run(_plan(0), timeout=20)
    assert aggregate.status is PlanStatus.COMPLETED
    assert aggregate.subtask("measure").result == []
    assert aggregate.subtask("sum").result == 0


async def test_more_items_than_the_limit_fail_the_step_before_any_runs() -> None:
    """limit 3 with 6 items: a clear error, nothing sent."""
    async with team() as plans:
        aggregate = await plans.run(_plan(6, limit=3), timeout=20)
    error = aggregate.subtask("measure").error
    assert error is not None
    assert "6 items to map over, over the map's limit of 3" in error["message"]
    assert not Files.runs


async def test_maps_nest_by_flattening_a_list_of_lists() -> None:
    """flatten: the lists of a result made one list; an empty inner list adds nothing."""
    plan = {
        "id": "nested",
        "subtasks": [
            {"id": "dirs", "skill": "dirs"},
            {
                "id": "each",
                "skill": "measure",
                "depends_on": ["dirs"],
                "map": {"over": "dirs", "as": "path", "flatten": True},
            },
        ],
    }
    async with team() as plans:
        aggregate = await plans.run(plan, timeout=20)
    assert [r["path"] for r in aggregate.subtask("each").result] == ["a/1", "a/2", "c/1"]


async def test_a_step_runs_only_when_its_condition_holds() -> None:
    """A false condition skips the step (null result, the plan complete); a true one runs."""
    plan = {
        "id": "branches",
        "subtasks": [
            {"id": "check", "skill": "verdict", "parameters": {"lines": 5}},
            {
                "id": "big",
                "skill": "note",
                "depends_on": ["check"],
                "when": {"==": [{"var": "check.big"}, True]},
                "parameters": {"text": "big"},
            },
            {
                "id": "small",
                "skill": "note",
                "depends_on": ["check"],
                "when": {"!": {"var": "check.big"}},
                "parameters": {"text": "small"},
            },
            {
                "id": "merge",
                "skill": "note",
                "depends_on": ["big", "small"],
                "inputs": {"text": "small"},
            },
        ],
    }
    async with team() as plans:
        aggregate = await plans.run(plan, timeout=20)
    assert aggregate.status is PlanStatus.COMPLETED
    big = aggregate.subtask("big")
    assert big.status is SubtaskStatus.SKIPPED
    assert big.error is not None
    assert big.error["code"] == "condition_not_met"
    assert aggregate.subtask("small").result == "noted small"
    assert aggregate.subtask("merge").result == "noted noted small"


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ({"==": [{"var": "a.n"}, 1]}, True),
        ({"==": [{"var": "a.n"}, "1"]}, False),  # strict: no coercion
        ({"<": [1, {"var": "a.n"}, 3]}, False),
        ({"<=": [1, {"var": "a.n"}, 3]}, True),
        ({"and": [True, {"var": "missing.x"}]}, None),
        ({"or": [False, {"var": ["missing.x", "fallback"]}]}, "fallback"),
        ({"in": ["b", {"var": "a.tags"}]}, True),
        ({"if": [{"var": "a.empty"}, "yes", "no"]}, "no"),
        ({"!!": {"var": "a.tags"}}, True),
    ],
)
def test_conditions_evaluate_as_json_logic_strictly(expression: Any, value: Any) -> None:
    """The operators, over results; missing values are null."""
    results = {"a": {"n": 1, "tags": ["a", "b"], "empty": []}}

    def lookup(name: str) -> Any:
        source, *path = name.split(".")
        found: Any = results[source]
        for part in path:
            found = found[part]
        return found

    check_condition(expression)
    assert evaluate(expression, lookup) == value
    assert truthy(value) is bool(value)


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ({"exec": ["rm -rf /"]}, "unknown operator 'exec'"),
        ({"==": [1]}, "'==' takes 2 to 2 arguments"),
        ({"==": [1, 1], "!=": [1, 2]}, "one operator"),
        ({"==": [{"var": "elsewhere.x"}, 1]}, "reads 'elsewhere.x', which it does not depend on"),
    ],
)
def test_a_bad_condition_or_map_is_refused_with_the_plan(condition: Any, message: str) -> None:
    """Validated before anything is sent: unknown operators, bad arity, foreign references."""
    plan = {
        "subtasks": [
            {"id": "a", "skill": "s"},
            {"id": "b", "skill": "s", "depends_on": ["a"], "when": condition},
        ]
    }
    with pytest.raises(ValidationError, match=message):
        Plan.model_validate(plan)


def test_a_map_over_a_step_it_does_not_depend_on_is_refused() -> None:
    """map.over names a dependency, and map.as a parameter not set otherwise."""
    with pytest.raises(ValidationError, match="maps over 'a', which it does not depend on"):
        Plan.model_validate(
            {
                "subtasks": [
                    {"id": "a", "skill": "s"},
                    {"id": "b", "skill": "s", "map": {"over": "a", "as": "x"}},
                ]
            }
        )
    with pytest.raises(ValidationError, match="maps into 'x', which it sets already"):
        Plan.model_validate(
            {
                "subtasks": [
                    {"id": "a", "skill": "s"},
                    {
                        "id": "b",
                        "skill": "s",
                        "depends_on": ["a"],
                        "parameters": {"x": 1},
                        "map": {"over": "a", "as": "x"},
                    },
                ]
            }
        )


class Slow(Agent):
    """Items 0-3 answer at once; item 4 holds until the test lets it go."""

    name = "slow"
    runs: Counter[str] = Counter()
    gate = asyncio.Event()
    holding = asyncio.Event()

    @skill
    async def square(self, n: int) -> int:
        Slow.runs[current_request().message_id] += 1
        if n == 4:
            Slow.holding.set()
            await Slow.gate.wait()
        return n * n


async def test_a_map_taken_over_mid_way_runs_no_finished_item_again() -> None:
    """Leader 1 goes while item 4 runs; leader 2 goes on from the journal: items 0-3 not
    asked again, item 4's answer taken, each item once, the results whole and in order."""
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.2)
    Slow.runs, Slow.gate, Slow.holding = Counter(), asyncio.Event(), asyncio.Event()
    plan = {
        "id": "squares",
        "subtasks": [
            {"id": "n", "skill": "numbers", "service": "numbers"},
            {
                "id": "sq",
                "skill": "square",
                "depends_on": ["n"],
                "map": {"over": "n", "as": "n", "concurrency": 8},
            },
        ],
    }
    first = Leader(
        bus=MemoryBus(broker, settings, agent_id="leader-1"), durable=True, heartbeat_interval=0.2
    )
    async with (
        Registry(bus=MemoryBus(broker, agent_id="registry-1"), heartbeat_interval=0.2),
        Numbers(bus=MemoryBus(broker, agent_id="numbers-1"), heartbeat_interval=0.2),
        Slow(bus=MemoryBus(broker, agent_id="slow-1"), heartbeat_interval=0.2),
        MemoryBus(broker, settings) as client,
    ):
        await first.start()
        asking = asyncio.create_task(
            client.request("leader", "run_plan", {"plan": plan}, timeout=30)
        )
        await asyncio.wait_for(Slow.holding.wait(), 10)
        await first.bus.drain(grace=0)  # its run_plan goes back to the leaders' queue
        await first.bus.aclose()
        async with Leader(
            bus=MemoryBus(broker, settings, agent_id="leader-2"),
            durable=True,
            heartbeat_interval=0.2,
        ):
            Slow.gate.set()
            reply = await asyncio.wait_for(asking, 30)
    aggregate = reply.result
    assert reply.sender_id == "leader-2"
    assert aggregate["status"] == PlanStatus.COMPLETED.value
    squares = next(s for s in aggregate["subtasks"] if s["id"] == "sq")
    assert squares["result"] == [0, 1, 4, 9, 16, 25]
    assert sorted(Slow.runs.values()) == [1] * 6  # each item once, under its own id


class Numbers(Agent):
    name = "numbers"

    @skill
    async def numbers(self) -> list[int]:
        return list(range(6))


async def test_a_planner_s_fragment_runs_inside_the_plan() -> None:
    """A step marked fragment: the planner's steps run in the plan, under its id; its
    result is theirs by step id; the next step reads it."""
    from agentbus.agents.builtin import PlannerAgent, TextAgent

    broker = MemoryBroker()
    text = "Bees make honey. Bees dance to tell where flowers are. Honey keeps for years."
    plan = {
        "id": "planned",
        "subtasks": [
            {
                "id": "work",
                "skill": "plan",
                "service": "planner",
                "fragment": True,
                "parameters": {
                    "task": "count the words, find keywords then summarise",
                    "text": text,
                },
            },
            {
                "id": "after",
                "skill": "note",
                "depends_on": ["work"],
                "inputs": {"text": "work.step2-summarize.summary"},
            },
        ],
    }
    progress: list[Progress] = []
    async with (
        Registry(bus=MemoryBus(broker, agent_id="registry-1"), heartbeat_interval=0.2),
        Leader(bus=MemoryBus(broker, agent_id="leader-1"), heartbeat_interval=0.2),
        PlannerAgent(bus=MemoryBus(broker, agent_id="planner-1"), heartbeat_interval=0.2),
        TextAgent(bus=MemoryBus(broker, agent_id="text-1"), heartbeat_interval=0.2),
        Files(bus=MemoryBus(broker, agent_id="files-1"), heartbeat_interval=0.2),
        MemoryBus(broker) as client,
    ):
        aggregate = await PlanClient(client).run(plan, timeout=20, on_progress=progress.append)
    work = aggregate.subtask("work")
    assert aggregate.status is PlanStatus.COMPLETED, aggregate
    assert sorted(work.result) == ["step0-stats", "step1-keywords", "step2-summarize"]
    assert work.result["step0-stats"]["words"] == len(text.split())
    assert work.items is not None
    assert work.items["succeeded"] == 3
    assert aggregate.subtask("after").result.startswith("noted Bees")
    assert {p.subtask_id for p in progress} >= {"work/step0-stats", "work/step2-summarize"}


async def test_a_fragment_that_is_no_plan_fails_its_step_clearly() -> None:
    """A planner answering something that is not a fragment: the step fails, final."""
    plan = {
        "id": "bad-fragment",
        "subtasks": [{"id": "p", "skill": "verdict", "fragment": True, "parameters": {"lines": 1}}],
    }
    async with team() as plans:
        aggregate = await plans.run(plan, timeout=20)
    error = aggregate.subtask("p").error
    assert error is not None
    assert "the planner's fragment is not valid" in error["message"]


class Planning(Agent):
    """Plans a fragment of three squares (counting how often it is asked to)."""

    name = "planning"
    asked = 0

    @skill
    async def split(self) -> dict[str, Any]:
        Planning.asked += 1
        return {
            "subtasks": [
                {"id": f"s{n}", "skill": "square", "service": "slow", "parameters": {"n": n + 3}}
                for n in range(3)
            ]
        }


async def test_a_fragment_taken_over_mid_way_is_not_planned_again() -> None:
    """Leader 1 goes while the fragment's step s1 (n=4) runs; leader 2 reads the fragment
    from the journal: the planner asked once, each fragment step run once."""
    broker = MemoryBroker()
    settings = Settings(shutdown_grace=0.2)
    Slow.runs, Slow.gate, Slow.holding = Counter(), asyncio.Event(), asyncio.Event()
    Planning.asked = 0
    plan = {
        "id": "frag",
        "subtasks": [{"id": "p", "skill": "split", "service": "planning", "fragment": True}],
    }
    first = Leader(
        bus=MemoryBus(broker, settings, agent_id="leader-1"), durable=True, heartbeat_interval=0.2
    )
    async with (
        Registry(bus=MemoryBus(broker, agent_id="registry-1"), heartbeat_interval=0.2),
        Planning(bus=MemoryBus(broker, agent_id="planning-1"), heartbeat_interval=0.2),
        Slow(bus=MemoryBus(broker, agent_id="slow-1"), heartbeat_interval=0.2),
        MemoryBus(broker, settings) as client,
    ):
        await first.start()
        asking = asyncio.create_task(
            client.request("leader", "run_plan", {"plan": plan}, timeout=30)
        )
        await asyncio.wait_for(Slow.holding.wait(), 10)
        await first.bus.drain(grace=0)
        await first.bus.aclose()
        async with Leader(
            bus=MemoryBus(broker, settings, agent_id="leader-2"),
            durable=True,
            heartbeat_interval=0.2,
        ):
            Slow.gate.set()
            reply = await asyncio.wait_for(asking, 30)
    assert reply.result["status"] == PlanStatus.COMPLETED.value
    [step] = reply.result["subtasks"]
    assert step["result"] == {"s0": 9, "s1": 16, "s2": 25}
    assert Planning.asked == 1
    assert sorted(Slow.runs.values()) == [1] * 3

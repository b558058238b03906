"""The plan's dependency graph on its own: no bus, no tasks, no clock."""

from __future__ import annotations

from typing import Any

from agentbus.leader import Plan, PlanGraph, Skip, Stop, SubtaskStatus

OK = SubtaskStatus.SUCCEEDED
FAILED = SubtaskStatus.FAILED


def graph(*subtasks: dict[str, Any], max_parallel: int = 16) -> PlanGraph:
    """Build the graph of a plan of subtasks of one skill."""
    plan = Plan.model_validate(
        {"max_parallel": max_parallel, "subtasks": [{"skill": "s", **s} for s in subtasks]}
    )
    return PlanGraph(plan)


def test_roots_start_in_plan_order_as_slots_allow() -> None:
    """Subtasks without dependencies start first, in plan order, max_parallel at a time."""
    g = graph({"id": "a"}, {"id": "b"}, {"id": "c"}, max_parallel=2)

    assert g.start() == ["a", "b"]
    assert g.start() == []
    assert g.settle([("b", OK)]) == []
    assert g.start() == ["c"]
    assert g.running == ["a", "c"]


def test_a_fan_in_starts_only_when_every_dependency_succeeded() -> None:
    """A subtask waits for all of its dependencies (named twice or not), then starts."""
    g = graph({"id": "a"}, {"id": "b"}, {"id": "sum", "depends_on": ["a", "b", "a"]})
    assert g.start() == ["a", "b"]

    g.settle([("a", OK)])
    assert g.start() == []
    g.settle([("b", OK)])

    assert g.start() == ["sum"]
    assert not g.is_finished
    g.settle([("sum", OK)])
    assert g.is_finished
    assert not g.is_stopped
    assert g.unstarted() == []


def test_a_non_critical_failure_rules_out_its_dependents_and_theirs() -> None:
    """The dependents of a failed optional subtask are skipped, down the chain; others run."""
    g = graph(
        {"id": "bad", "critical": False},
        {"id": "ok"},
        {"id": "child", "depends_on": ["bad"]},
        {"id": "grandchild", "depends_on": ["child", "ok"]},
        {"id": "sibling", "depends_on": ["ok"]},
    )
    g.start()

    effects = g.settle([("bad", FAILED)])

    assert effects == [Skip("child", "bad"), Skip("grandchild", "bad")]
    g.settle([("ok", OK)])
    assert g.start() == ["sibling"], "grandchild was ruled out: ok's success does not start it"
    g.settle([("sibling", OK)])
    assert g.is_finished
    assert not g.is_stopped
    assert g.unstarted() == []


def test_a_critical_failure_stops_the_plan_and_cancels_what_runs() -> None:
    """A failed critical subtask stops the plan: running work is cancelled, nothing starts."""
    g = graph(
        {"id": "slow"}, {"id": "bad"}, {"id": "other"}, {"id": "after", "depends_on": ["bad"]}
    )
    assert g.start() == ["slow", "bad", "other"]

    effects = g.settle([("bad", SubtaskStatus.CANCELLED)])

    assert effects == [Stop("critical subtask 'bad' cancelled", ("slow", "other"))]
    assert g.is_stopped
    assert g.is_finished, "the cancelled ones are the runner's to settle, not the graph's"
    assert g.start() == []
    assert g.unstarted() == ["after"]


def test_work_that_ended_with_the_critical_failure_is_still_settled() -> None:
    """Ended together: the stop cancels only what still runs; the others are settled as usual."""
    g = graph(
        {"id": "bad"},
        {"id": "optional", "critical": False},
        {"id": "done"},
        {"id": "running"},
        {"id": "after-optional", "depends_on": ["optional"]},
        {"id": "after-done", "depends_on": ["done"]},
    )
    g.start()

    effects = g.settle([("bad", FAILED), ("optional", FAILED), ("done", OK)])

    assert effects == [
        Stop("critical subtask 'bad' failed", ("running",)),
        Skip("after-optional", "optional"),
    ]
    assert g.start() == [], "a stopped plan starts nothing, even what became ready"
    assert g.unstarted() == ["after-done"]


def test_one_stop_per_plan() -> None:
    """A second critical failure after the stop changes nothing."""
    g = graph({"id": "a"}, {"id": "b"})
    g.start()

    first = g.settle([("a", FAILED), ("b", FAILED)])

    assert first == [Stop("critical subtask 'a' failed", ())]


def test_a_stop_from_outside_cancels_in_start_order() -> None:
    """The deadline stops the plan: what runs is cancelled in start order; the rest never starts."""
    g = graph(
        {"id": "c"}, {"id": "a"}, {"id": "b"}, {"id": "d", "depends_on": ["a"]}, max_parallel=2
    )
    assert g.start() == ["c", "a"]

    stop = g.stop("the plan's deadline passed")

    assert stop == Stop("the plan's deadline passed", ("c", "a"))
    assert g.is_finished
    assert g.running == []
    assert g.unstarted() == ["b", "d"]


def test_the_repr_shows_where_the_graph_is() -> None:
    """The repr names the graph's state and its counts."""
    g = graph({"id": "a"}, {"id": "b", "depends_on": ["a"]})
    assert repr(g) == "<PlanGraph open waiting=1 ready=1 running=0>"
    g.start()
    g.settle([("a", OK)])
    g.start()
    g.settle([("b", OK)])
    assert repr(g) == "<PlanGraph finished waiting=0 ready=0 running=0>"

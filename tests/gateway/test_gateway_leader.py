"""The leader as an A2A agent: a plan in a data part runs, its progress streams, the aggregate
is the artifact."""

from __future__ import annotations

import pytest
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError
from a2a_client import data_of, sdk_client, send, state_name, user_message
from gateway_agents import Calc, Clerk, Counter, Shouter
from gateway_team import HEARTBEAT, KEY, Team

from agentbus import Agent, skill
from agentbus.gateway import Gateway
from agentbus.leader import Leader
from support.waiting import wait_until

PLAN = {
    "subtasks": [
        {"id": "loud", "skill": "shout", "parameters": {"text": "agents on the bus"}},
        {"id": "words", "skill": "count", "depends_on": ["loud"], "inputs": {"text": "loud"}},
    ]
}


async def test_a_plan_streams_its_progress_and_ends_with_the_aggregate(team: Team) -> None:
    """Each subtask's transitions arrive as working updates; the artifact is the aggregate."""
    for agent in (
        Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
        Shouter(agent_id="shouter-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
        Counter(agent_id="counter-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
    ):
        await team.add(agent)
    gateway = await team.serve()
    await wait_until(lambda: {"leader", "shouter", "counter"} <= set(gateway.directory.cards), 15)
    async with sdk_client(f"{team.url}/agents/leader", KEY, streaming=True) as client:
        events = await send(client, user_message({"plan": PLAN}, skill="run_plan"))
    progress = [
        data_of(event.status_update.status.message.parts[0])["plan_progress"]
        for event in events
        if event.HasField("status_update")
        and event.status_update.status.message.parts
        and "plan_progress" in data_of(event.status_update.status.message.parts[0])
    ]
    transitions = [(p["subtask_id"], p["transition"]) for p in progress]
    assert ("loud", "succeeded") in transitions
    assert ("words", "succeeded") in transitions
    assert transitions.index(("loud", "succeeded")) < transitions.index(("words", "succeeded"))
    assert {p["plan_id"] for p in progress} == {f"a2a-{events[0].task.id}"}
    aggregate = data_of(events[-2].artifact_update.artifact.parts[0])
    assert aggregate["status"] == "completed"
    results = {s["id"]: s["result"] for s in aggregate["subtasks"]}
    assert results == {"loud": "AGENTS ON THE BUS", "words": {"words": 4}}
    assert state_name(events[-1].status_update.status.state) == "TASK_STATE_COMPLETED"


class Splitter(Agent):
    name = "splitter"

    @skill
    async def split(self, text: str) -> list[str]:
        """The words of ``text``."""
        return text.split()


async def test_a_shaped_plan_shows_its_items_and_skipped_branch_over_a2a(team: Team) -> None:
    """A step mapped over a list and a branch whose condition fails: the A2A client sees each
    item's progress under ``<step>[i]``, the branch skipped, and the gathered results."""
    for agent in (
        Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
        Shouter(agent_id="shouter-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
        Splitter(agent_id="splitter-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
    ):
        await team.add(agent)
    gateway = await team.serve()
    await wait_until(lambda: {"leader", "shouter", "splitter"} <= set(gateway.directory.cards), 15)
    plan = {
        "subtasks": [
            {"id": "words", "skill": "split", "parameters": {"text": "ant bee"}},
            {"id": "loud", "skill": "shout", "depends_on": ["words"],
             "map": {"over": "words", "as": "text"}},
            {"id": "never", "skill": "shout", "parameters": {"text": "no"},
             "depends_on": ["words"], "when": {"in": ["cat", {"var": "words"}]}},
        ]
    }  # fmt: skip
    async with sdk_client(f"{team.url}/agents/leader", KEY, streaming=True) as client:
        events = await send(client, user_message({"plan": plan}, skill="run_plan"))
    transitions = {
        (p["subtask_id"], p["transition"])
        for event in events
        if event.HasField("status_update") and event.status_update.status.message.parts
        for p in [data_of(event.status_update.status.message.parts[0]).get("plan_progress")]
        if p is not None
    }
    aggregate = data_of(events[-2].artifact_update.artifact.parts[0])
    assert {("loud[0]", "succeeded"), ("loud[1]", "succeeded")} <= transitions
    assert ("never", "skipped") in transitions
    outcomes = {s["id"]: s for s in aggregate["subtasks"]}
    assert outcomes["loud"]["result"] == ["ANT", "BEE"]
    assert outcomes["never"]["status"] == "skipped"
    assert outcomes["never"]["error"]["code"] == "condition_not_met"
    assert aggregate["status"] == "completed"


async def test_an_invalid_plan_is_a_protocol_error_before_the_leader(team: Team) -> None:
    """A plan that fails run_plan's schema is refused by the gateway; the leader runs nothing."""
    leader = Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    await team.add(leader)
    gateway = await team.serve()
    await wait_until(lambda: "leader" in gateway.directory.cards, 15)
    async with sdk_client(f"{team.url}/agents/leader", KEY) as client:
        with pytest.raises(
            InvalidParamsError, match="plan/subtasks: 'none' is not of type 'array'"
        ):
            await send(client, user_message({"plan": {"subtasks": "none"}}, skill="run_plan"))
    assert len(gateway.open_tasks) == 0


async def test_cancelling_a_plans_task_cancels_its_running_subtasks(team: Team) -> None:
    """CancelTask on a plan: the leader stops the plan and the worker's skill is cancelled."""
    calc = Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    leader = Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    for agent in (leader, calc):
        await team.add(agent)
    gateway = await team.serve()
    await wait_until(lambda: {"leader", "calc"} <= set(gateway.directory.cards), 15)
    plan = {"subtasks": [{"id": "nap", "skill": "slow", "parameters": {"seconds": 60}}]}
    async with sdk_client(f"{team.url}/agents/leader", KEY) as client:
        (response,) = await send(
            client, user_message({"plan": plan}, skill="run_plan"), return_immediately=True
        )
        await wait_until(lambda: calc.in_flight == 1, 15)
        cancelled = await client.cancel_task(a2a.CancelTaskRequest(id=response.task.id))
    assert state_name(cancelled.status.state) == "TASK_STATE_CANCELED"
    await wait_until(lambda: calc.ended == ["cancelled"], 15)
    await wait_until(lambda: leader.in_flight == 0 and len(gateway.open_tasks) == 0, 15)


def answer(task_id: str, text: str) -> a2a.Message:
    """A follow-up message on the task ``task_id`` with ``text``."""
    message = user_message(text=text)
    message.task_id = task_id
    return message


async def leader_and(team: Team, agent: Agent) -> Gateway:
    """A leader, ``agent`` and a gateway serving both."""
    leader = Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    for started in (leader, agent):
        await team.add(started)
    gateway = await team.serve()
    await wait_until(lambda: {"leader", agent.name} <= set(gateway.directory.cards), 15)
    return gateway


def waiting_on(status: a2a.TaskStatus) -> tuple[str, str, dict[str, object]]:
    """(state, the question's text, the question) of a task waiting on a plan's question."""
    parts = list(status.message.parts)
    data = [data_of(part) for part in parts if part.HasField("data")]
    (question,) = [item["question"] for item in data if "question" in item]
    (text,) = [part.text for part in parts if part.HasField("text")]
    return state_name(status.state), text, question


async def test_a_plans_approval_waits_for_input_and_a_follow_up_answers_it(team: Team) -> None:
    """The leader's question is the task's: input-required while the plan waits; the
    follow-up's answer lets the plan go on, and the blocking follow-up returns its end."""
    shouter = Shouter(agent_id="shouter-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    gateway = await leader_and(team, shouter)
    plan = {
        "subtasks": [
            {"id": "loud", "skill": "shout", "parameters": {"text": "bees"}},
            {
                "id": "ok",
                "skill": "approval",
                "parameters": {"question": "Print it?"},
                "inputs": {"draft": "loud"},
                "depends_on": ["loud"],
            },
        ]
    }
    async with sdk_client(f"{team.url}/agents/leader", KEY) as client:
        (response,) = await send(client, user_message({"plan": plan}, skill="run_plan"))
        task = response.task
        state, text, question = waiting_on(task.status)
        assert (state, text) == ("TASK_STATE_INPUT_REQUIRED", "Print it?")
        assert (question["plan_id"], question["subtask_id"]) == (f"a2a-{task.id}", "ok")
        assert question["data"] == {"draft": "BEES"}
        (response,) = await send(client, answer(task.id, "true"))
    done = response.task
    assert (done.id, state_name(done.status.state)) == (task.id, "TASK_STATE_COMPLETED")
    aggregate = data_of(done.artifacts[-1].parts[0])
    assert aggregate["status"] == "completed"
    (approved,) = [step for step in aggregate["subtasks"] if step["id"] == "ok"]
    assert approved["result"]["approved"] is True
    assert len(gateway.open_tasks) == 0


async def test_a_plan_steps_questions_stream_and_are_answered_on_the_task(team: Team) -> None:
    """A step's agent asks twice: each question streams as input-required; each streamed
    follow-up answers it and streams the plan on, to the next question, then the end."""
    await leader_and(
        team, Clerk(agent_id="clerk-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    plan = {"subtasks": [{"id": "trip", "skill": "book", "parameters": {"who": "ann"}}]}
    async with sdk_client(f"{team.url}/agents/leader", KEY, streaming=True) as client:
        events = await send(client, user_message({"plan": plan}, skill="run_plan"))
        task_id = events[0].task.id
        assert waiting_on(events[-1].status_update.status)[1] == "Where to, ann?"
        events = await send(client, answer(task_id, "Oslo"))
        assert waiting_on(events[-1].status_update.status)[1] == "How many nights in Oslo?"
        events = await send(client, answer(task_id, "2"))
    assert state_name(events[-1].status_update.status.state) == "TASK_STATE_COMPLETED"
    (aggregate,) = [
        data_of(e.artifact_update.artifact.parts[0])
        for e in events
        if e.HasField("artifact_update") and e.artifact_update.artifact.name == "run_plan"
    ]
    assert aggregate["subtasks"][0]["result"].startswith("booked 2 nights in Oslo for ann")

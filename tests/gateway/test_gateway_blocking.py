"""A blocking ``SendMessage``: its task told as it ends, or from its first update on.

A caller who waits for the end sees only the end: the gateway records such a task once,
whole, when it ends (one event, not four), unless the agent reports progress first; then
the task is recorded as working from that report on, and its updates as they come.
"""

from __future__ import annotations

import asyncio
from typing import Any

from a2a.types import a2a_pb2 as a2a
from a2a_client import data_of, sdk_client, send, state_name, user_message
from gateway_agents import Calc
from gateway_team import HEARTBEAT, KEY, Team

from agentbus import Agent, report_progress, skill
from support.waiting import wait_until

DEADLINE = 15.0


class Reporter(Agent):
    """Reports progress, then waits for the test."""

    name = "reporter"
    description = "Reports, then waits"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()

    @skill
    async def report(self, label: str) -> str:
        """Say "begun", wait for the gate, return ``label``."""
        await report_progress(0.5, "begun")
        await self.gate.wait()
        return label


async def test_a_blocking_call_reads_back_as_it_was_answered(team: Team) -> None:
    """The answer is the task as stored: completed, its history the message, its artifact."""
    await team.add(Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT))
    gateway = await team.serve()
    await wait_until(lambda: "calc" in gateway.directory.cards, DEADLINE)
    async with sdk_client(f"{team.url}/agents/calc", KEY) as client:
        message = user_message({"n": 21}, skill="double")
        (answer,) = await send(client, message)
        read = await client.get_task(a2a.GetTaskRequest(id=answer.task.id))
    assert state_name(answer.task.status.state) == "TASK_STATE_COMPLETED"
    assert answer.task.status.HasField("timestamp")
    assert [m.message_id for m in answer.task.history] == [message.message_id]
    assert data_of(answer.task.artifacts[0].parts[0]) == 42
    assert read == answer.task


async def test_a_blocking_call_that_reports_progress_is_listed_working_meanwhile(
    team: Team,
) -> None:
    """From the agent's first report, the task is stored as working (ListTasks shows it);
    its end comes as usual, the report in its history."""
    reporter = await team.add(
        Reporter(agent_id="reporter-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    assert isinstance(reporter, Reporter)
    gateway = await team.serve()
    await wait_until(lambda: "reporter" in gateway.directory.cards, DEADLINE)
    async with sdk_client(f"{team.url}/agents/reporter", KEY) as client:
        call = asyncio.ensure_future(send(client, user_message({"label": "done"})))
        listed: list[a2a.Task] = []

        async def working() -> None:
            while not listed:
                page = await client.list_tasks(a2a.ListTasksRequest())
                listed.extend(page.tasks)

        await asyncio.wait_for(working(), DEADLINE)
        assert state_name(listed[0].status.state) == "TASK_STATE_WORKING"
        reporter.gate.set()
        (answer,) = await asyncio.wait_for(call, DEADLINE)
    assert answer.task.id == listed[0].id
    assert state_name(answer.task.status.state) == "TASK_STATE_COMPLETED"
    assert answer.task.artifacts[-1].parts[0].text == "done"
    reports = [m for m in answer.task.history if m.role == a2a.Role.ROLE_AGENT]
    assert data_of(reports[0].parts[0])["in_progress"]["message"] == "begun"

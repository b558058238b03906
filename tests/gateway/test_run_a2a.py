"""``run-a2a``: an external A2A agent (an a2a-sdk server) on the bus, called by bus clients."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from a2a_client import data_of, sdk_client, send, user_message
from gateway_agents import Shouter, Writer
from gateway_team import HEARTBEAT, KEY, Team
from remote_a2a_server import Wordsmith, wordsmith_app

from agentbus import AgentBusError, InputRequired, RemoteError
from agentbus.envelopes import BROADCAST, RequestEnvelope, RequestPayload, ResponseEnvelope
from agentbus.gateway import RemoteA2AAgent
from agentbus.leader import Leader, PlanClient
from support.ports import free_port
from support.servers import start_uvicorn, stop_uvicorn
from support.waiting import wait_until

SERVICE = "Word-smith"  # from the card's name, "Word smith"


@dataclass
class Remote:
    """The external server and its executor."""

    url: str
    executor: Wordsmith
    server: Any
    serving: asyncio.Task[None]


@pytest.fixture
async def remote() -> AsyncIterator[Remote]:
    """A Wordsmith A2A server on a free port."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    executor = Wordsmith()
    server, serving = await start_uvicorn(wordsmith_app(url, executor), port)
    yield Remote(url, executor, server, serving)
    if not serving.done():
        await stop_uvicorn(server, serving, force=True)


async def on_the_bus(team: Team, remote: Remote) -> RemoteA2AAgent:
    """Start the bus agent fronting ``remote``; wait until the registry lists it."""
    agent = await RemoteA2AAgent.from_url(
        remote.url, agent_id="words-1", settings=team.settings, heartbeat_interval=HEARTBEAT
    )
    await team.add(agent)
    return agent


async def listed_skills(team: Team) -> dict[str, list[str]]:
    """The registry's services and their skills."""
    reply = await team.client.request("registry", "list_agents", timeout=5)
    return {row["service"]: sorted(row["skills"]) for row in reply.result}


async def test_the_a2a_agents_skills_are_offered_and_answered_on_the_bus(
    team: Team, remote: Remote
) -> None:
    """The card's skills are on the registry; text and data requests come back as results."""
    agent = await on_the_bus(team, remote)
    assert agent.name == SERVICE
    skills = await listed_skills(team)
    assert skills[SERVICE] == ["outline", "refuse", "reverse", "stats", "trip", "wait"]
    reply = await team.client.request(SERVICE, "reverse", {"text": "one two three"}, timeout=10)
    assert reply.result == "three two one"
    reply = await team.client.request(SERVICE, "stats", {"text": "hello bus world"}, timeout=10)
    assert reply.result == {"words": 3, "letters": 13}
    assert remote.executor.asked == ["reverse", "stats"]


async def test_a_failed_a2a_task_is_an_error_envelope_with_its_code(
    team: Team, remote: Remote
) -> None:
    """The A2A task's failure code and message come back as the bus error."""
    await on_the_bus(team, remote)
    with pytest.raises(RemoteError) as caught:
        await team.client.request(SERVICE, "refuse", {"text": "please"}, timeout=10)
    assert caught.value.envelope.payload.code == "invalid_parameters"
    assert caught.value.envelope.payload.message == "refused, as always"


async def test_the_a2a_agents_questions_are_bus_questions_answered_on_its_task(
    team: Team, remote: Remote
) -> None:
    """input-required is a bus question (the schema the A2A agent gives, checked here); each
    answer goes back as one message on the same A2A task, and its result is the reply."""
    await on_the_bus(team, remote)
    with pytest.raises(InputRequired) as first:
        await team.client.request(SERVICE, "trip", {"text": "ann"}, timeout=10)
    city = first.value.question
    assert (city.text, city.answer_schema, city.kind.value) == (
        "Which city?",
        {"type": "string"},
        "input",
    )
    with pytest.raises(InputRequired) as second:
        await team.client.answer(city, "Oslo", timeout=10)
    nights = second.value.question
    assert nights.text == "How many nights in Oslo?"
    assert nights.answer_schema == {"type": "integer", "minimum": 1, "maximum": 30}
    with pytest.raises(InputRequired) as again:  # refused by run-a2a: the A2A agent never sees it
        await team.client.answer(nights, 0, timeout=10)
    assert again.value.question.rejected is not None
    assert "less than the minimum of 1" in str(again.value.question.rejected["errors"])
    reply = await team.client.answer(again.value.question, 3, timeout=10)
    assert reply.result == "ann: 3 nights in Oslo"
    (task_id,) = remote.executor.trips
    assert remote.executor.follow_ups == [(task_id, "Oslo"), (task_id, 3)]
    assert remote.executor.asked == ["trip"]


async def test_declining_the_a2a_agents_question_cancels_its_task(
    team: Team, remote: Remote
) -> None:
    """A declined question: the A2A task is cancelled, and the caller told ``cancelled``."""
    await on_the_bus(team, remote)
    with pytest.raises(InputRequired) as first:
        await team.client.request(SERVICE, "trip", {"text": "bo"}, timeout=10)
    with pytest.raises(RemoteError) as caught:
        await team.client.answer(first.value.question, decline=True, timeout=10)
    assert caught.value.envelope.payload.code == "cancelled"
    assert remote.executor.cancelled == list(remote.executor.trips)
    assert remote.executor.follow_ups == []


async def test_working_updates_are_in_progress_replies(team: Team, remote: Remote) -> None:
    """A streamed working update's text reaches the bus requester as a progress report."""
    await on_the_bus(team, remote)
    notices: list[ResponseEnvelope] = []
    request = RequestEnvelope(
        sender_id=team.client.agent_id,
        receiver_id=SERVICE,
        payload=RequestPayload(action="wait", parameters={"seconds": 0.3}),
    )
    reply = await team.client.send_request(request, timeout=10, on_progress=notices.append)
    assert reply.result == "waited"
    progress = [n.payload.result for n in notices if n.payload.result["state"] == "progress"]
    assert [(p["agent_id"], p["message"]) for p in progress] == [("words-1", "waiting 0.3s")]


async def _wait_then_cancel(
    team: Team, remote: Remote, agent: RemoteA2AAgent
) -> asyncio.Task[ResponseEnvelope]:
    """Ask the Wordsmith to wait a minute; once it has the request, broadcast its cancel."""
    request = RequestEnvelope(
        sender_id=team.client.agent_id,
        receiver_id=SERVICE,
        payload=RequestPayload(action="wait", parameters={"seconds": 60}),
    )
    waiting = asyncio.create_task(team.client.send_request(request, timeout=30))
    await wait_until(lambda: remote.executor.asked == ["wait"] and agent.in_flight == 1, 10)
    cancel = RequestEnvelope(
        sender_id=team.client.agent_id,
        receiver_id=BROADCAST,
        payload=RequestPayload(action="cancel", parameters={"message_id": request.message_id}),
    )
    await team.client.publish(cancel, mandatory=False)
    return waiting


async def test_a_bus_cancel_cancels_the_a2a_task(team: Team, remote: Remote) -> None:
    """The bus cancel reaches the external agent as CancelTask; the requester gets cancelled."""
    agent = await on_the_bus(team, remote)
    waiting = await _wait_then_cancel(team, remote, agent)
    with pytest.raises(RemoteError) as caught:
        await waiting
    assert caught.value.envelope.payload.code == "cancelled"
    await wait_until(lambda: len(remote.executor.cancelled) == 1, 10)


async def test_a_cancel_before_the_stream_names_the_task_still_reaches_it(
    team: Team, remote: Remote
) -> None:
    """A cancel that comes before the A2A agent's first event (no task id known yet): the
    bridge waits for the id, then sends CancelTask."""
    agent = await on_the_bus(team, remote)
    remote.executor.hold_first_event = first_event = asyncio.Event()
    waiting = await _wait_then_cancel(team, remote, agent)
    # The bridge has the cancel; only then does the A2A agent say which task it runs.
    await wait_until(lambda: any(w.cancelled_by_request for w in agent._work.values()), 10)
    first_event.set()
    with pytest.raises(RemoteError) as caught:
        await waiting
    assert caught.value.envelope.payload.code == "cancelled"
    await wait_until(lambda: len(remote.executor.cancelled) == 1, 10)


async def test_a_plan_mixes_bus_agents_and_an_http_agent(team: Team, remote: Remote) -> None:
    """shout (on the bus) feeds reverse (over HTTP, through run-a2a's agent)."""
    await on_the_bus(team, remote)
    for agent in (
        Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
        Shouter(agent_id="shouter-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
    ):
        await team.add(agent)
    plan = {
        "subtasks": [
            {"id": "loud", "skill": "shout", "parameters": {"text": "plans cross machines"}},
            {"id": "back", "skill": "reverse", "depends_on": ["loud"], "inputs": {"text": "loud"}},
        ]
    }
    leader = PlanClient(team.client)
    aggregate = await leader.run(plan, timeout=30)
    assert aggregate.status.value == "completed"
    results = {s.id: s.result for s in aggregate.subtasks}
    assert results == {"loud": "PLANS CROSS MACHINES", "back": "MACHINES CROSS PLANS"}


async def test_killing_the_external_server_mid_plan_fails_its_subtask(team: Team) -> None:
    """The A2A server's process dies while it holds a subtask: that subtask fails, at once."""
    port = free_port()
    script = Path(__file__).with_name("remote_a2a_server.py")
    server = await asyncio.create_subprocess_exec(sys.executable, str(script), str(port))
    try:
        url = f"http://127.0.0.1:{port}/"
        agent = await eventually_agent(team, url)
        await team.add(
            Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
        )
        await wait_until(lambda: "wait" in agent.skills, 1)
        plan = {
            "subtasks": [
                {"id": "long", "skill": "wait", "parameters": {"seconds": 60}, "timeout": 45}
            ]
        }
        running = asyncio.create_task(PlanClient(team.client).run(plan, timeout=50))
        await wait_until(lambda: agent.in_flight == 1, 15)
        server.kill()
        killed = time.monotonic()
        aggregate = await running
        after_kill = time.monotonic() - killed
    finally:
        if server.returncode is None:
            server.kill()
        await server.wait()
    assert aggregate.status.value == "failed"
    (outcome,) = aggregate.subtasks
    assert outcome.error is not None
    assert outcome.error["code"] == "agent_unavailable"
    assert "127.0.0.1" in outcome.error["message"]
    assert after_kill < 30  # failed when the server died, not at the subtask's timeout (45 s)


async def eventually_agent(team: Team, url: str) -> RemoteA2AAgent:
    """Build the bus agent for ``url`` once the server there answers; start it."""
    async with asyncio.timeout(20):
        while True:
            try:
                agent = await RemoteA2AAgent.from_url(
                    url, agent_id="words-1", settings=team.settings, heartbeat_interval=HEARTBEAT
                )
            except AgentBusError:
                await asyncio.sleep(0.1)
                continue
            await team.add(agent)
            return agent


async def test_the_pipeline_runs_from_outside_through_the_gateway(
    team: Team, remote: Remote
) -> None:
    """outline (an HTTP A2A agent via run-a2a) -> draft -> summary (bus), as one A2A task.

    A plain A2A client sends the plan to the leader through the gateway; the leader mixes
    the external agent and bus agents; the aggregate comes back as the task's artifact.
    """
    await on_the_bus(team, remote)
    for agent in (
        Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
        Writer(agent_id="writer-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
    ):
        await team.add(agent)
    gateway = await team.serve()
    await wait_until(lambda: {"leader", "writer", SERVICE} <= set(gateway.directory.cards), 15)
    plan = {
        "subtasks": [
            {"id": "outline", "skill": "outline", "parameters": {"text": "agent buses"}},
            {
                "id": "draft",
                "skill": "draft",
                "depends_on": ["outline"],
                "inputs": {"title": "outline.title", "sections": "outline.sections"},
            },
            {
                "id": "summary",
                "skill": "summary",
                "depends_on": ["draft"],
                "inputs": {"text": "draft"},
            },
        ]
    }
    async with sdk_client(f"{team.url}/agents/leader", KEY, streaming=True) as client:
        events = await send(client, user_message({"plan": plan}, skill="run_plan"))
    aggregate = data_of(events[-2].artifact_update.artifact.parts[0])
    assert aggregate["status"] == "completed"
    results = {s["id"]: s["result"] for s in aggregate["subtasks"]}
    assert results["outline"]["sections"][0] == "agent buses: why"
    assert results["draft"].startswith("Agent Buses. On agent buses: why.")
    assert results["summary"] == {"words": 15, "first": "Agent Buses"}
    assert remote.executor.asked == ["outline"]

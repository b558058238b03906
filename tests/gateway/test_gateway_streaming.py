"""Skill progress streamed both ways: bus skills to A2A clients, A2A streams to bus clients.

Through the gateway, ``report_progress`` is a ``working`` status update and each partial
result a chunk appended to the ``partial`` artifact, in the order the skill made them, before
the result's artifact; a plan's ``partial`` transitions are chunks of ``<subtask>.partial``.
Through ``run-a2a``, an A2A agent's streamed artifact chunks are partial results on the bus.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from a2a.types import a2a_pb2 as a2a
from a2a_client import data_of, sdk_client, send, state_name, user_message
from gateway_team import HEARTBEAT, KEY, Team
from google.protobuf.json_format import MessageToDict
from readme_shell import ROOT

from agentbus import Agent, RemoteError, report_progress, skill
from agentbus.envelopes import RequestEnvelope, RequestPayload, ResponseEnvelope
from agentbus.gateway import PARTIAL_KEY, RemoteA2AAgent
from agentbus.leader import Leader
from support.ports import free_port
from support.servers import start_uvicorn, stop_uvicorn
from support.waiting import wait_until

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from examples import essay
from examples.a2a_drafter import drafter_app


class Streamer(Agent):
    name = "streamer"
    description = "Streams the words of a text, saying how far it is"

    @skill
    async def spell(self, text: str) -> AsyncIterator[str]:
        """Each word upper-cased is a partial result; progress before each."""
        words = text.split()
        for n, word in enumerate(words):
            await report_progress(n / len(words), f"word {n + 1}")
            yield word.upper()


def timeline(events: list[a2a.StreamResponse]) -> list[tuple[str, Any]]:
    """The stream as (kind, what) in order: progress, chunks with append flags, artifacts."""
    seen: list[tuple[str, Any]] = []
    for event in events:
        if event.HasField("status_update"):
            status = event.status_update.status
            data = [data_of(p) for p in status.message.parts if p.HasField("data")]
            report = data[0].get("in_progress") if data else None
            if report is not None and report["state"] == "progress":
                seen.append(("progress", (report["fraction"], report["message"])))
            elif not data:
                seen.append(("status", state_name(status.state)))
        elif event.HasField("artifact_update"):
            update = event.artifact_update
            artifact = update.artifact
            values = [p.text if p.HasField("text") else data_of(p) for p in artifact.parts]
            partial = MessageToDict(artifact.metadata).get(PARTIAL_KEY, False)
            seen.append(("artifact", (artifact.name, update.append, partial, values)))
    return seen


async def test_a_streaming_skill_streams_progress_and_chunks_in_order(team: Team) -> None:
    """progress, chunk, progress, chunk, ...; then the result's artifact and completed."""
    await team.add(
        Streamer(agent_id="streamer-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    gateway = await team.serve()
    await wait_until(lambda: "streamer" in gateway.directory.cards, 15)
    async with sdk_client(f"{team.url}/agents/streamer", KEY, streaming=True) as client:
        events = await send(client, user_message(text="agents stream words", skill="spell"))
    assert timeline(events) == [
        ("status", "TASK_STATE_WORKING"),
        ("progress", (0, "word 1")),
        ("artifact", ("partial", False, True, ["AGENTS"])),
        ("progress", (1 / 3, "word 2")),
        ("artifact", ("partial", True, True, ["STREAM"])),
        ("progress", (2 / 3, "word 3")),
        ("artifact", ("partial", True, True, ["WORDS"])),
        ("artifact", ("spell", False, False, [["AGENTS", "STREAM", "WORDS"]])),
        ("status", "TASK_STATE_COMPLETED"),
    ]
    async with sdk_client(f"{team.url}/agents/streamer", KEY) as client:
        task = await client.get_task(a2a.GetTaskRequest(id=events[0].task.id))
    partial, result = task.artifacts  # the chunks appended into one artifact, then the result
    assert [p.text for p in partial.parts] == ["AGENTS", "STREAM", "WORDS"]
    assert [data_of(p) for p in result.parts] == [["AGENTS", "STREAM", "WORDS"]]


async def test_a_plans_partial_transitions_are_chunks_of_the_subtasks_artifact(
    team: Team,
) -> None:
    """A plan through the leader's A2A agent: the subtask's chunks as ``spell.partial``."""
    for agent in (
        Leader(agent_id="leader-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
        Streamer(agent_id="streamer-1", settings=team.settings, heartbeat_interval=HEARTBEAT),
    ):
        await team.add(agent)
    gateway = await team.serve()
    await wait_until(lambda: {"leader", "streamer"} <= set(gateway.directory.cards), 15)
    plan = {"subtasks": [{"id": "loud", "skill": "spell", "parameters": {"text": "one two"}}]}
    async with sdk_client(f"{team.url}/agents/leader", KEY, streaming=True) as client:
        events = await send(client, user_message({"plan": plan}, skill="run_plan"))
    artifacts = [item for kind, item in timeline(events) if kind == "artifact"]
    assert artifacts[:2] == [
        ("loud.partial", False, True, ["ONE"]),
        ("loud.partial", True, True, ["TWO"]),
    ]
    (name, _, partial, (aggregate,)) = artifacts[2]
    assert (name, partial, aggregate["status"]) == ("run_plan", False, "completed")
    assert aggregate["subtasks"][0]["result"] == ["ONE", "TWO"]
    progress = [
        data_of(part)["plan_progress"]
        for event in events
        if event.HasField("status_update")
        for part in event.status_update.status.message.parts
        if part.HasField("data") and "plan_progress" in data_of(part)
    ]
    details = [(p["transition"], p["detail"]) for p in progress if p["detail"] is not None]
    assert [d for d in details if d[0] == "partial"] == [
        ("partial", {"seq": 0, "chunk": "ONE"}),
        ("partial", {"seq": 1, "chunk": "TWO"}),
    ]
    assert [d["message"] for t, d in details if t == "progress"] == ["word 1", "word 2"]


async def test_an_a2a_agents_streamed_chunks_are_partial_results_on_the_bus(
    team: Team,
) -> None:
    """run-a2a before the Drafter server: per section its progress, then its text as a partial."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    server, serving = await start_uvicorn(drafter_app(url), port)
    try:
        await team.add(
            await RemoteA2AAgent.from_url(
                url, agent_id="drafter-1", settings=team.settings, heartbeat_interval=HEARTBEAT
            )
        )
        sections = (await essay.Outliner().outline("bees")).sections
        notices: list[ResponseEnvelope] = []
        request = RequestEnvelope(
            sender_id=team.client.agent_id,
            receiver_id="drafter",
            payload=RequestPayload(action="draft", parameters={"sections": sections}),
        )
        reply = await team.client.send_request(request, timeout=10, on_progress=notices.append)
    finally:
        await stop_uvicorn(server, serving, force=True)
    assert reply.result == await essay.Drafter().draft(sections)
    updates = [n.payload.result for n in notices if n.payload.result["state"] != "started"]
    expected: list[tuple[str, Any]] = []
    for n, heading in enumerate(sections):
        expected.append(("progress", f"drafting {heading!r} ({n + 1}/{len(sections)})"))
        expected.append(("partial", (n, ("\n\n" if n else "") + essay.section(heading))))
    shown = [
        ("progress", u["message"])
        if u["state"] == "progress"
        else ("partial", (u["seq"], u["chunk"]))
        for u in updates
    ]
    assert shown == expected


async def test_a_bus_skill_through_the_gateway_and_back_keeps_its_result_and_chunks(
    team: Team,
) -> None:
    """run-a2a in front of the gateway: partials stay partials, the result is not mixed in."""
    await team.add(
        Streamer(agent_id="streamer-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    gateway = await team.serve()
    await wait_until(lambda: "streamer" in gateway.directory.cards, 15)
    await team.add(
        await RemoteA2AAgent.from_url(
            f"{team.url}/agents/streamer",
            service="streamer-http",
            key=KEY,
            agent_id="streamer-http-1",
            settings=team.settings,
            heartbeat_interval=HEARTBEAT,
        )
    )
    notices: list[ResponseEnvelope] = []
    request = RequestEnvelope(
        sender_id=team.client.agent_id,
        receiver_id="streamer-http",
        payload=RequestPayload(action="spell", parameters={"text": "round trip"}),
    )
    reply = await asyncio.wait_for(
        team.client.send_request(request, timeout=10, on_progress=notices.append), 15
    )
    assert reply.result == ["ROUND", "TRIP"]
    chunks = [n.payload.result["chunk"] for n in notices if n.payload.result["state"] == "partial"]
    assert chunks == ["ROUND", "TRIP"]


async def test_the_drafter_refuses_bad_sections_with_clear_errors(team: Team) -> None:
    """Wrong types are refused on the bus by the card's schema; no sections by the server."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    server, serving = await start_uvicorn(drafter_app(url), port)
    try:
        await team.add(
            await RemoteA2AAgent.from_url(
                url, agent_id="drafter-1", settings=team.settings, heartbeat_interval=HEARTBEAT
            )
        )
        errors = []
        for sections in ("one heading", []):
            with pytest.raises(RemoteError) as caught:
                await team.client.request("drafter", "draft", {"sections": sections}, timeout=10)
            errors.append(caught.value.envelope.payload)
        still = {"sections": ["Still here"]}
        reply = await team.client.request("drafter", "draft", still, timeout=10)
    finally:
        await stop_uvicorn(server, serving, force=True)
    assert [(e.code, e.message) for e in errors] == [
        (
            "invalid_parameters",
            "invalid parameters for 'draft': sections: 'one heading' is not of type 'array'",
        ),
        ("invalid_parameters", "no sections to draft"),
    ]
    assert reply.result == essay.section("Still here")

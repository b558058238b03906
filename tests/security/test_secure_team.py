"""A whole team over TLS on the generated definitions: every flow works, nothing is refused.

registry, leader and text log in with their certificates (EXTERNAL); an operator's client
(``ops``, allowed to call the leader and the registry) lists the agents and runs a plan.
Heartbeats, announce, describe, plan progress events and replies all pass the broker's
permissions and the receivers' sender checks; the audit stream has a record of each
request served.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path

import pytest
from security_support import SecuredTeam
from tls_support import CertificateAuthority

import agentbus
from agentbus.agents import Agent, ask, skill
from agentbus.agents.builtin import TextAgent
from agentbus.bus import read_audit
from agentbus.definitions import definitions, team_grants
from agentbus.leader import Leader, Plan, PlanClient, PlanStatus
from agentbus.registry import Registry
from agentbus.testing.chaos import PrivateBroker
from support.waiting import wait_until

pytestmark = pytest.mark.security

WAIT = 20.0


@pytest.fixture
async def team(tls_node: PrivateBroker, ca: CertificateAuthority, tmp_path: Path) -> SecuredTeam:
    """The generated definitions of registry, leader, text and the client ops, imported."""
    exchange = f"team-{secrets.token_hex(3)}"
    grants = team_grants(
        ["registry", "leader", "text"], clients={"ops": ["leader", "registry"]}, auditors=["ops"]
    )
    document = definitions(grants, exchange=exchange, queue_type="classic")
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(document))
    tls_node.rabbitmqctl("import_definitions", str(path))
    return SecuredTeam(tls_node, ca, exchange, document)


async def _until_listed(client: agentbus.Bus, wanted: set[str]) -> set[str]:
    """Ask the registry until it lists every one of ``wanted``; return what it listed."""
    seen: set[str] = set()
    async with asyncio.timeout(WAIT):
        while not wanted <= seen:
            reply = await client.request("registry", "list_agents", timeout=5)
            seen |= {row["agent_id"] for row in reply.result}
            await asyncio.sleep(0.2)  # the next heartbeat round, not an event to wait on
    return seen


async def test_a_team_on_generated_permissions_over_tls_runs_a_plan(team: SecuredTeam) -> None:
    """Registry, leader, text over TLS: listed, a plan runs, no refusal anywhere, audited."""
    agents: list[Agent] = [
        Registry(agent_id="registry-1", settings=team.settings("registry"), heartbeat_interval=1),
        Leader(
            agent_id="leader-1",
            settings=team.settings("leader"),
            heartbeat_interval=1,
            durable=True,  # its journal stream and the plan's reply queue: its own
        ),
        TextAgent(agent_id="text-1", settings=team.settings("text"), heartbeat_interval=1),
    ]
    for agent in agents:
        await agent.start()
    try:
        async with agentbus.Bus(team.settings("ops"), agent_id="ops-1") as client:
            seen = await _until_listed(client, {"registry-1", "leader-1", "text-1"})
            plan = Plan.model_validate(
                {"subtasks": [{"id": "s", "skill": "keywords", "parameters": {"text": "a b. c"}}]}
            )
            progress: list[object] = []
            planner = PlanClient(client)
            aggregate = await planner.run(plan, timeout=WAIT, on_progress=progress.append)
    finally:
        for agent in reversed(agents):
            await agent.stop()

    assert {"registry-1", "leader-1", "text-1"} <= seen
    assert aggregate.subtask("s").error is None
    assert aggregate.status is PlanStatus.COMPLETED
    assert progress, "plan progress events reached the client"
    for agent in agents:
        assert agent.bus.stats.refused == 0, f"{agent.id} refused something"
    records = [
        entry.record
        async for entry in read_audit(team.settings("ops"), idle=1.0)
        if entry.record["kind"] == "request"
    ]
    served = {(r["recorder"], r["action"]) for r in records}
    subtask = next(r for r in records if r["recorder"] == "text-1")
    assert subtask["plan_id"] == aggregate.plan_id
    assert subtask["user_id"] == "leader"
    assert ("text-1", "keywords") in served
    assert ("leader-1", "run_plan") in served
    assert ("registry-1", "list_agents") in served
    assert all(r["user_id"] == r["sender_id"].rpartition("-")[0] for r in records)


class Clerk(Agent):
    name = "clerk"

    @skill
    async def pick(self, options: list[str]) -> str:
        """Ask the caller to pick one of ``options``."""
        return await ask(f"Which of {', '.join(options)}?")


async def test_a_question_on_generated_permissions_and_its_journal_kept_to_its_service(
    tls_node: PrivateBroker, ca: CertificateAuthority, tmp_path: Path
) -> None:
    """clerk asks ops over TLS (its journal its own); text may not read clerk's journal."""
    exchange = f"team-{secrets.token_hex(3)}"
    grants = team_grants(["clerk", "text"], clients={"ops": ["clerk"]})
    document = definitions(grants, exchange=exchange, queue_type="classic")
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(document))
    tls_node.rabbitmqctl("import_definitions", str(path))
    team = SecuredTeam(tls_node, ca, exchange, document)

    clerk = Clerk(agent_id="clerk-1", settings=team.settings("clerk"), heartbeat_interval=1)
    async with clerk, agentbus.Bus(team.settings("ops"), agent_id="ops-1") as client:
        with pytest.raises(agentbus.InputRequired) as asked:
            await client.request("clerk", "pick", {"options": ["a", "b"]}, timeout=WAIT)
        reply = await client.answer(asked.value.question, "b", timeout=WAIT)
        async with agentbus.Bus(team.settings("text"), agent_id="text-1") as other:
            with pytest.raises(agentbus.AccessRefused):
                await other.conversations("clerk")
    assert reply.result == "b"
    assert clerk.bus.stats.refused == 0


def _online(registry: Registry) -> set[str]:
    return {record.agent_id for record in registry.table.records() if record.online}


async def test_sharing_registries_on_generated_permissions_split_the_beats(
    tls_node: PrivateBroker, ca: CertificateAuthority, tmp_path: Path
) -> None:
    """Two ``--share`` registries under the registry's own user (TLS, EXTERNAL): the shared
    feed and the digests pass the broker's permissions; both list every agent; ops sees an
    agent that stops go offline; nothing refused anywhere."""
    grants = team_grants(["registry", "text"], clients={"ops": ["registry"]})
    team = SecuredTeam.imported(tls_node, ca, tmp_path, grants)
    registries = [
        Registry(
            agent_id=f"registry-{n}",
            settings=team.settings("registry"),
            heartbeat_interval=0.5,
            share=True,
        )
        for n in (1, 2)
    ]
    texts = [
        TextAgent(agent_id=f"text-{n}", settings=team.settings("text"), heartbeat_interval=0.5)
        for n in (1, 2, 3)
    ]
    wanted = {"registry-1", "registry-2", "text-1", "text-2", "text-3"}
    offline: asyncio.Queue[str] = asyncio.Queue()

    async def on_offline(event: agentbus.EventEnvelope) -> None:
        await offline.put(str(event.payload.event_data["agent_id"]))

    async with (
        registries[0],
        registries[1],
        agentbus.Bus(team.settings("ops"), agent_id="ops-1") as client,
    ):
        for agent in texts:
            await agent.start()
        try:
            await client.subscribe("broadcast.event.agent_offline", on_offline)
            for registry in registries:  # each lists all: its own part and the other's digests
                await wait_until(lambda r=registry: wanted <= _online(r), timeout=WAIT)
            seen = await _until_listed(client, wanted)
            await texts[2].stop()
            async with asyncio.timeout(WAIT):
                while await offline.get() != "text-3":
                    pass
        finally:
            for agent in texts[:2]:
                await agent.stop()
        stats = [await registry.stats() for registry in registries]
    assert wanted <= seen
    assert all(s["heartbeats"] > 0 for s in stats), stats  # each took a part off the wire
    assert sum(s.get("shared", 0) for s in stats) > 0, stats  # and the rest by digest
    everyone: list[Agent] = [*registries, *texts]
    for agent in everyone:
        assert agent.bus.stats.refused == 0, f"{agent.id} refused something"

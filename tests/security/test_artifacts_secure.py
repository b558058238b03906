"""Artifacts under a user per service, over TLS: read by the pair of users they are stored
between, refused to anyone else (the generated definitions' grants); in a plan, stored for
the service of the step that takes them, or for the plan's requester."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from security_support import SecuredTeam
from tls_support import CertificateAuthority

import agentbus
from agentbus import Artifact
from agentbus.agents import Agent, skill
from agentbus.definitions import team_grants
from agentbus.leader import Leader, PlanClient, PlanStatus
from agentbus.registry import Registry
from agentbus.testing.chaos import PrivateBroker
from support.file_agents import Auditor, Checker, Maker

pytestmark = pytest.mark.security

WAIT = 20.0


class Lister(Maker):
    name = "maker"

    @skill
    async def listing(self, count: int) -> list[str]:
        """A result over the envelope's cap: it goes by reference, to the caller alone."""
        return [f"line-{n:08d}" for n in range(count)]


async def test_an_artifact_is_read_by_its_caller_and_refused_to_another_service(
    tls_node: PrivateBroker, ca: CertificateAuthority, tmp_path: Path
) -> None:
    """maker stores for ops (stream maker.ops); ops reads it whole and checked, by reference
    too; other, a service of the same team, is refused by the broker (AccessRefused); the
    dashboard's user reads it."""
    grants = team_grants(["maker", "other"], clients={"ops": ["maker"]}, dashboards=["watch"])
    team = SecuredTeam.imported(tls_node, ca, tmp_path, grants)
    exchange = team.exchange

    maker = Lister(agent_id="maker-1", settings=team.settings("maker"), heartbeat_interval=1)
    async with maker, agentbus.Bus(team.settings("ops"), agent_id="ops-1") as client:
        reply = await client.request("maker", "make", {"size": 3_000_000}, timeout=WAIT)
        artifact = Artifact.model_validate(reply.result)
        assert artifact.location.startswith(f"{exchange}.artifacts.maker.ops@")
        data = await artifact.read(via=client.artifacts)
        assert len(data) == 3_000_000
        listed = await client.request("maker", "listing", {"count": 100_000}, timeout=WAIT)
        assert len(listed.result) == 100_000
        async with agentbus.Bus(team.settings("other"), agent_id="other-1") as other:
            with pytest.raises(agentbus.AccessRefused):
                await other.artifacts.read(artifact)
        # A dashboard's user reads the team's files (its page's downloads).
        async with agentbus.Bus(team.settings("watch"), agent_id="watch-1") as watch:
            assert await watch.artifacts.read(artifact) == data
    assert maker.bus.stats.refused == 0


async def test_a_plan_under_a_user_per_service_hands_each_file_to_its_reader(
    tls_node: PrivateBroker, ca: CertificateAuthority, tmp_path: Path
) -> None:
    """maker's file is stored for checker, the service of the step that takes it (found by
    its skill, from the registry), which reads it; a file no step takes is stored for the
    plan's requester (ops), who reads it; each is refused to the other. A file two services
    take is stored for the leader, which copies it for each before it sends their steps."""
    grants = team_grants(
        ["registry", "leader", "maker", "checker", "auditor"],
        clients={"ops": ["leader", "registry"]},
    )
    team = SecuredTeam.imported(tls_node, ca, tmp_path, grants)
    agents: list[Agent] = [
        Registry(agent_id="registry-1", settings=team.settings("registry"), heartbeat_interval=1),
        Leader(agent_id="leader-1", settings=team.settings("leader"), heartbeat_interval=1),
        Maker(agent_id="maker-1", settings=team.settings("maker"), heartbeat_interval=1),
        Checker(agent_id="checker-1", settings=team.settings("checker"), heartbeat_interval=1),
        Auditor(agent_id="auditor-1", settings=team.settings("auditor"), heartbeat_interval=1),
    ]
    for agent in agents:
        await agent.start()
    try:
        async with agentbus.Bus(team.settings("ops"), agent_id="ops-1") as client:
            await _until_listed(client, {"checker-1"})
            make = {"skill": "make", "service": "maker", "parameters": {"size": 2_000_000}}
            plan = {
                "subtasks": [
                    {"id": "made", **make},
                    {
                        "id": "checked",
                        "skill": "digest",
                        "depends_on": ["made"],
                        "inputs": {"document": "made"},
                    },
                    {"id": "kept", **make},
                    {"id": "shared", **make},
                    *[
                        {"id": service, "skill": skill, "service": service}
                        | {"depends_on": ["shared"], "inputs": {"document": "shared"}}
                        for service, skill in (("checker", "digest"), ("auditor", "audit"))
                    ],
                ]
            }
            aggregate = await PlanClient(client).run(plan, timeout=WAIT)
            assert aggregate.status is PlanStatus.COMPLETED, aggregate
            made = Artifact.model_validate(aggregate.subtask("made").result)
            kept = Artifact.model_validate(aggregate.subtask("kept").result)
            assert made.location.startswith(f"{team.exchange}.artifacts.maker.checker@")
            # Two services take "shared": stored for the leader, copied for each of them.
            digests = {aggregate.subtask(s).result for s in ("checker", "auditor")}
            shared = Artifact.model_validate(aggregate.subtask("shared").result)
            assert digests == {shared.sha256}
            assert kept.location.startswith(f"{team.exchange}.artifacts.maker.ops@")
            assert len(await kept.read(via=client.artifacts)) == 2_000_000
            with pytest.raises(agentbus.AccessRefused):
                await client.artifacts.read(made)
            async with agentbus.Bus(team.settings("checker"), agent_id="checker-2") as checker:
                data = await checker.artifacts.read(made)
                assert hashlib.sha256(data).hexdigest() == aggregate.subtask("checked").result
                with pytest.raises(agentbus.AccessRefused):
                    await checker.artifacts.read(kept)
    finally:
        for agent in reversed(agents):
            await agent.stop()
    for agent in agents:
        assert agent.bus.stats.refused == 0, f"{agent.id} refused something"


async def _until_listed(client: agentbus.Bus, wanted: set[str]) -> None:
    async with asyncio.timeout(WAIT):
        while True:
            reply = await client.request("registry", "list_agents", timeout=5)
            if wanted <= {row["agent_id"] for row in reply.result}:
                return
            await asyncio.sleep(0.2)  # the next heartbeat round, not an event to wait on

"""Artifacts under a user per service, over TLS: read by the pair of users they are stored
between, refused to anyone else (the generated definitions' grants)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from security_support import SecuredTeam
from tls_support import CertificateAuthority

import agentbus
from agentbus import Artifact
from agentbus.agents import Agent, skill
from agentbus.definitions import team_grants
from agentbus.testing.chaos import PrivateBroker

pytestmark = pytest.mark.security

WAIT = 20.0


class Maker(Agent):
    name = "maker"

    @skill
    async def make(self, size: int) -> Artifact:
        """Store ``size`` random bytes for the caller."""
        return await agentbus.put_artifact(os.urandom(size), name="made.bin")

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

    maker = Maker(agent_id="maker-1", settings=team.settings("maker"), heartbeat_interval=1)
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

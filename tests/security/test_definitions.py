"""``agentbus definitions``: imported into a private TLS node, a team works on it and the
broker itself refuses what the wire contract does not allow a user."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aio_pika
import aiormq.exceptions
import pytest
from security_support import SecuredTeam

import agentbus
from agentbus import AccessRefused, RequestEnvelope
from agentbus.bus import Topology

pytestmark = pytest.mark.security

DEPLOY_DEFINITIONS = Path(__file__).parents[2] / "deploy" / "rabbitmq" / "definitions.json"
BUILTIN_TEAM = (
    "registry",
    "leader",
    "agentbus.agents.builtin:FilesAgent",
    "agentbus.agents.builtin:CodeAgent",
    "agentbus.agents.builtin:TextAgent",
    "agentbus.agents.builtin:ReportAgent",
)


def test_the_deploy_definitions_are_the_generated_ones() -> None:
    """deploy/rabbitmq/definitions.json is what the CLI prints for the built-in team."""
    printed = subprocess.run(
        [sys.executable, "-m", "agentbus", "definitions", *BUILTIN_TEAM],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert json.loads(printed) == json.loads(DEPLOY_DEFINITIONS.read_text("utf-8"))


def test_each_user_may_publish_only_its_contract_keys(secured_team: SecuredTeam) -> None:
    """The generated topic permissions, read: requests only to callees, no foreign queue."""
    topics = {p["user"]: p for p in secured_team.document["topic_permissions"]}
    permissions = {p["user"]: p for p in secured_team.document["permissions"]}
    assert set(topics) == {"work", "admin", "caller", "caller-eu", "mallory"}
    assert "agent\\.(work(-[^.-]+)?)\\.request" in topics["caller"]["write"]
    assert "admin" not in topics["caller"]["write"]
    assert "caller" in topics["work"]["write"], "work replies and sends events to its callers"
    assert "service" not in permissions["caller"]["read"], "a client reads no service queue"


async def test_a_team_on_generated_permissions_works_and_the_broker_refuses_the_rest(
    secured_team: SecuredTeam,
) -> None:
    """work serves caller over TLS; caller cannot request admin nor read work's queue."""
    served: list[str] = []

    async def handler(request: RequestEnvelope) -> dict[str, Any]:
        served.append(request.sender_id)
        return {"ok": True}

    async with (
        agentbus.Bus(secured_team.settings("work"), agent_id="work-1") as worker,
        agentbus.Bus(secured_team.settings("caller"), agent_id="caller-1") as client,
    ):
        await worker.serve(handler, service="work")
        reply = await client.request("work", "go", {}, timeout=10)
        with pytest.raises(AccessRefused) as forbidden:
            await client.request("admin", "go", {}, timeout=10)
        after = await client.request("work", "go", {}, timeout=10)

    assert reply.result == {"ok": True}
    assert after.result == {"ok": True}
    assert "agent.admin.request" in forbidden.value.message
    assert served == ["caller-1", "caller-1"]
    assert worker.stats.refused == 0

    connection = await aio_pika.connect(
        f"{secured_team.node.tls_url()}?auth=external",
        ssl_context=secured_team.ssl_context("caller"),
    )
    try:
        channel = await connection.channel()
        queue = Topology(secured_team.exchange).service_queue("work")
        stolen = await channel.get_queue(queue, ensure=False)
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as refused:
            await stolen.get(no_ack=True, fail=False)
    finally:
        await connection.close()
    assert "access to queue" in str(refused.value)

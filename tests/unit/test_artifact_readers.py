"""Whom a skill's files are stored for: the request's sender, or the user it names; in a
plan, the service of the step that takes them, or the plan's requester."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agentbus import Agent, Artifact, RemoteError, Settings
from agentbus.envelopes import ARTIFACT_READER, RequestEnvelope
from agentbus.leader import Leader, PlanClient, PlanStatus
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus
from support.file_agents import Auditor, Checker, Maker
from support.waiting import wait_until

SETTINGS = Settings(shutdown_grace=0.5)


Start = Callable[..., Awaitable[Agent]]


@pytest.fixture
async def team() -> AsyncIterator[tuple[MemoryBroker, Start]]:
    broker = MemoryBroker()
    started: list[Agent] = []

    async def start(cls: type[Agent], agent_id: str, settings: Settings = SETTINGS) -> Agent:
        bus = await MemoryBus(broker, settings, agent_id=agent_id).open()
        agent = cls(agent_id=agent_id, bus=bus, settings=settings, heartbeat_interval=0.2)
        await agent.start()
        started.append(agent)
        return agent

    yield broker, start
    for agent in reversed(started):
        await agent.stop()
        await agent.bus.aclose()


def _online(registry: Registry) -> set[str]:
    return {record.agent_id for record in registry.table.records() if record.online}


def _request(metadata: dict[str, Any]) -> RequestEnvelope:
    return RequestEnvelope.model_validate(
        {
            "sender_id": "client-1",
            "receiver_id": "maker",
            "payload": {"action": "make", "parameters": {"size": 1000}},
            "metadata": metadata,
        }
    )


async def test_a_request_names_the_user_its_answers_files_are_for(
    team: tuple[MemoryBroker, Start],
) -> None:
    """metadata.artifact_reader: stored for that user, not the sender's; a name that is no
    user's name is refused with invalid_parameters, and the agent goes on serving."""
    broker, start = team
    await start(Maker, "maker-1")
    async with MemoryBus(broker, SETTINGS, agent_id="client-1") as client:
        plain = await client.send_request(_request({}), timeout=5)
        assert broker.artifacts.readers(Artifact.model_validate(plain.result)) == (
            "maker",
            "client",
        )
        named = await client.send_request(_request({ARTIFACT_READER: "checker"}), timeout=5)
        assert broker.artifacts.readers(Artifact.model_validate(named.result)) == (
            "maker",
            "checker",
        )
        for bad in ["a.b", "", 7]:
            with pytest.raises(RemoteError) as refused:
                await client.send_request(_request({ARTIFACT_READER: bad}), timeout=5)
            assert refused.value.code == "invalid_parameters"
            assert ARTIFACT_READER in refused.value.message
        again = await client.send_request(_request({}), timeout=5)
        assert Artifact.model_validate(again.result).size == 1000


async def test_a_plan_stores_each_steps_files_for_whoever_reads_them_next(
    team: tuple[MemoryBroker, Start],
) -> None:
    """A step one service takes: stored for that service (by the registry when the taker
    names only a skill); a step none takes: for the plan's requester; a step two services
    take: for the leader, as before."""
    broker, start = team
    registry = await start(Registry, "registry-1")
    for cls, agent_id in [
        (Maker, "maker-1"),
        (Checker, "checker-1"),
        (Auditor, "auditor-1"),
        (Leader, "leader-1"),
    ]:
        await start(cls, agent_id)
    assert isinstance(registry, Registry)
    await wait_until(lambda: "checker-1" in _online(registry))
    make = {"skill": "make", "service": "maker", "parameters": {"size": 5000}}
    plan = {
        "subtasks": [
            {"id": "one", **make},
            {"id": "read", "skill": "digest", "depends_on": ["one"], "inputs": {"document": "one"}},
            {"id": "leaf", **make},
            {"id": "shared", **make},
            {
                "id": "check",
                "skill": "digest",
                "service": "checker",
                "depends_on": ["shared"],
                "inputs": {"document": "shared"},
            },
            {
                "id": "audit",
                "skill": "audit",
                "service": "auditor",
                "depends_on": ["shared"],
                "inputs": {"document": "shared"},
            },
        ]
    }
    async with MemoryBus(broker, SETTINGS, agent_id="submitter-1") as bus:
        aggregate = await PlanClient(bus).run(plan, timeout=20)
    assert aggregate.status is PlanStatus.COMPLETED, aggregate
    results = {outcome.id: outcome.result for outcome in aggregate.subtasks}

    def readers(step: str) -> tuple[str, str]:
        return broker.artifacts.readers(Artifact.model_validate(results[step]))

    assert readers("one") == ("maker", "checker")  # "read" names a skill: the registry's
    assert readers("leaf") == ("maker", "submitter")
    assert readers("shared") == ("maker", "leader")
    assert results["check"] == results["audit"] != results["read"]


@pytest.mark.parametrize("verified", [True, False], ids=["users-per-service", "shared-user"])
async def test_a_file_two_services_take_is_copied_for_each_where_users_are_theirs(
    team: tuple[MemoryBroker, Start], verified: bool
) -> None:
    """Stored for the leader (two services take it); where senders are verified (a user per
    service) the leader copies it, chunk by chunk, into each taker's stream before it sends
    the step; on a shared user each takes the leader's."""
    broker, start = team

    def as_user(user: str) -> Settings:
        url = f"amqp://{user}:secret@localhost/"
        return Settings(shutdown_grace=0.5, url=url, verify_sender=verified)

    for cls, agent_id in [
        (Maker, "maker-1"),
        (Checker, "checker-1"),
        (Auditor, "auditor-1"),
        (Leader, "leader-1"),
    ]:
        await start(cls, agent_id, as_user(agent_id.partition("-")[0]))
    make = {"skill": "make", "service": "maker", "parameters": {"size": 300_000}}
    takers = [
        {"id": service, "skill": "whose", "service": service, "depends_on": ["shared"]}
        | {"inputs": {"document": "shared"}}
        for service in ("checker", "auditor")
    ]
    plan = {"subtasks": [{"id": "shared", **make}, *takers]}
    async with MemoryBus(broker, as_user("submitter"), agent_id="submitter-1") as bus:
        aggregate = await PlanClient(bus).run(plan, timeout=20)
    assert aggregate.status is PlanStatus.COMPLETED, aggregate
    shared = Artifact.model_validate(aggregate.subtask("shared").result)
    assert broker.artifacts.readers(shared) == ("maker", "leader")
    for service in ("checker", "auditor"):
        owner, reader, digest = aggregate.subtask(service).result
        assert digest == shared.sha256
        expected = ("leader-1", service) if verified else ("maker-1", "leader")
        assert (owner, reader) == expected

"""Two sites, each its own broker, linked by federation both ways (docs/sites.md).

A request is served at the requester's site when an instance runs there, and crosses the
link only when none does; its progress and answer come back; each site's registry lists
the whole team with each agent's site.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from chaos_support import eventually
from fault_support import Team

from agentbus import Agent, Settings, Unroutable, skill
from agentbus.bus import Bus
from agentbus.envelopes import ResponseEnvelope
from agentbus.leader import Leader, PlanClient, PlanStatus
from agentbus.registry import Registry
from conftest import Sites

pytestmark = pytest.mark.sites

_LINK_UP = 60.0  # s: the links start and carry each site's bindings to the other


class Greeter(Agent):
    name = "greeter"

    @skill
    async def greet(self, who: str) -> dict[str, Any]:
        """Say hello, and from where."""
        return {"text": f"hello {who}", "by": self.id, "site": self.site}

    @skill
    async def count(self, upto: int) -> AsyncIterator[int]:
        """Send 0..upto-1 as partial results."""
        for n in range(upto):
            yield n


async def _client(settings: Settings, agent_id: str) -> Bus:
    return await Bus(settings, agent_id=agent_id).open()


async def _greet(bus: Bus) -> ResponseEnvelope:
    return await bus.request("greeter", "greet", {"who": "ann"}, timeout=5)


async def test_request_crosses_when_no_instance_is_local(sites: Sites, team: Team) -> None:
    await team.start(Greeter(agent_id="greeter-b", settings=sites.b, heartbeat_interval=1))
    bus = await _client(sites.a, "client-a")
    try:
        began = time.monotonic()
        reply = await eventually(lambda: _greet(bus), _LINK_UP, "a request from a served at b")
        print(f"link up and a request across after {time.monotonic() - began:.2f} s")
        assert reply.result == {"text": "hello ann", "by": "greeter-b", "site": "b"}
        chunks: list[Any] = []

        def on_progress(progress: ResponseEnvelope) -> None:
            if progress.result.get("state") == "partial":
                chunks.append(progress.result["chunk"])

        streamed = await bus.request(
            "greeter", "count", {"upto": 3}, timeout=5, on_progress=on_progress
        )
        assert (chunks, streamed.result) == ([0, 1, 2], [0, 1, 2])
    finally:
        await bus.aclose()


async def test_request_stays_at_its_site_when_an_instance_runs_there(
    sites: Sites, team: Team
) -> None:
    for site, settings in (("a", sites.a), ("b", sites.b)):
        await team.start(Greeter(agent_id=f"greeter-{site}", settings=settings))
    bus_a = await _client(sites.a, "client-a")
    bus_b = await _client(sites.b, "client-b")
    try:
        served_a = [(await _greet(bus_a)).result["site"] for _ in range(20)]
        served_b = [(await _greet(bus_b)).result["site"] for _ in range(20)]
        assert (set(served_a), set(served_b)) == ({"a"}, {"b"})
    finally:
        await bus_b.aclose()
        await bus_a.aclose()


async def test_each_site_registry_lists_the_whole_team(sites: Sites, team: Team) -> None:
    for site, settings in (("a", sites.a), ("b", sites.b)):
        await team.start(Registry(agent_id=f"registry-{site}", settings=settings))
        await team.start(
            Greeter(agent_id=f"greeter-{site}", settings=settings, heartbeat_interval=1)
        )
    for site, settings in (("a", sites.a), ("b", sites.b)):
        bus = await _client(settings, f"client-{site}")
        try:

            async def listed(bus: Bus = bus) -> dict[str, Any] | None:
                reply = await bus.request("registry", "list_agents", {"service": "greeter"})
                found = {agent["agent_id"]: agent["site"] for agent in reply.result}
                return found if len(found) == 2 else None

            found = await eventually(listed, _LINK_UP, f"the registry at {site} to list both")
            assert found == {"greeter-a": "a", "greeter-b": "b"}
        finally:
            await bus.aclose()


async def test_service_at_no_site_is_unroutable_at_once(sites: Sites, team: Team) -> None:
    await team.start(Greeter(agent_id="greeter-b", settings=sites.b))
    bus = await _client(sites.a, "client-a")
    try:
        await eventually(lambda: _greet(bus), _LINK_UP, "the link to carry b's bindings")
        with pytest.raises(Unroutable) as raised:
            await bus.request("nobody", "greet", timeout=30)
        assert raised.value.code == "agent_unavailable"
    finally:
        await bus.aclose()


class Weigher(Agent):
    name = "weigher"

    @skill
    async def weigh(self, text: str) -> dict[str, Any]:
        """Weigh a text, and say where."""
        return {"weight": len(text), "site": self.site}


async def test_a_durable_plan_runs_steps_at_both_sites(sites: Sites, team: Team) -> None:
    """The leader at a runs a step where its skill is (b) and one at home; the plan's
    answers come back though its reply queue is at a (docs/sites.md)."""
    await team.start(Registry(agent_id="registry-a", settings=sites.a))
    await team.start(Greeter(agent_id="greeter-a", settings=sites.a, heartbeat_interval=1))
    await team.start(Weigher(agent_id="weigher-b", settings=sites.b, heartbeat_interval=1))
    await team.start(Leader(agent_id="leader-a", settings=sites.a, durable=True))
    bus = await _client(sites.a, "client-a")
    plan = {
        "id": "two-sites",
        "subtasks": [
            {"id": "hello", "skill": "greet", "parameters": {"who": "bo"}},
            {
                "id": "weight",
                "skill": "weigh",
                "depends_on": ["hello"],
                "inputs": {"text": "hello.text"},
            },
        ],
    }

    async def weigher_listed() -> bool | None:
        reply = await bus.request("registry", "find_skill", {"skill": "weigh"}, timeout=5)
        return True if reply.result else None

    try:
        await eventually(weigher_listed, _LINK_UP, "the registry at a to list b's weigher")
        aggregate = await PlanClient(bus).run(plan, timeout=30)
    finally:
        await bus.aclose()
    assert aggregate.status is PlanStatus.COMPLETED, aggregate.model_dump_json(indent=2)
    hello, weight = aggregate.subtask("hello"), aggregate.subtask("weight")
    assert hello.result == {"text": "hello bo", "by": "greeter-a", "site": "a"}
    assert weight.result == {"weight": len("hello bo"), "site": "b"}
    assert (hello.attempts, weight.attempts) == (1, 1)

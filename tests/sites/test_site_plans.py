"""A durable plan whose steps run at the far site, and its leader dying at the worst moment.

A step that crosses is answered by routing key to its leader's instance queue, not to the
plan's reply queue (a queue name means nothing at the far site). A leader that dies with
such an answer in hand, before the journal has the step's end, leaves the next leader to
ask again under the same request id: the far site's de-duplication answers it with what
the step returned, and nothing runs twice (docs/sites.md).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from chaos_agents import LedgerWorker
from chaos_support import eventually
from fault_support import Team

from agentbus.bus import Bus, Topology
from agentbus.leader import Plan, PlanClient, PlanStatus, SubtaskStatus
from agentbus.testing.chaos import AgentLauncher, Ledger, SendOutcome, queue_depths
from conftest import Sites

pytestmark = pytest.mark.sites

_LINK_UP = 60.0  # s: the links start and carry each site's bindings to the other
_STEPS = 30
_HIT = 12  # the subtask end at which the first leader dies


async def test_a_leader_dying_under_steps_at_the_far_site_runs_none_twice(
    sites: Sites, team: Team, agent_process: AgentLauncher, tmp_path: Path
) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        far = LedgerWorker(
            agent_id="worker-b", settings=sites.b, ledger=ledger, heartbeat_interval=1
        )
        await team.start(far)
        a = sites.a
        env = {
            "AGENTBUS_DURABLE_PLANS": "1",
            "AGENTBUS_SITE": "a",
            "AGENTBUS_PEER_SITES": "b",
            "AGENTBUS_PRESENCE_CHECK": "0",
        }

        def leader(number: int, fault: bool = False) -> object:
            extra = {"AGENTBUS_FAULT_POINTS": f"leader.settling:{_HIT}"} if fault else {}
            return agent_process.start(
                "agentbus.leader:Leader", "--id", f"leader-{number}", "--heartbeat", "1",
                url=a.url, exchange=a.exchange, env={**env, **extra},
            )  # fmt: skip

        probes: list[str] = []
        client = await Bus(a.model_copy(update={"presence_check": 0}), agent_id="client-a").open()
        try:

            async def crossed() -> bool | None:
                reply = await client.request("ledger-worker", "work", {}, timeout=5)
                ledger.record_send(reply.result["key"], SendOutcome.CONFIRMED)
                probes.append(reply.result["key"])
                return True

            await eventually(crossed, _LINK_UP, "a request from a served at b")
            first = leader(1, fault=True)
            await first.started()
            work = {"skill": "work", "service": "ledger-worker", "timeout": 20}
            plan = Plan.model_validate(
                {
                    "subtasks": [
                        {"id": f"s{n}", **work, "parameters": {"seconds": 0.05}}
                        for n in range(_STEPS)
                    ],
                    "max_parallel": 4,
                }
            )
            run = asyncio.create_task(PlanClient(client).run(plan, timeout=120))
            assert await first.exited(60) == -signal.SIGKILL  # at its subtask end _HIT
            second = leader(2)
            async with asyncio.timeout(120):
                aggregate = await run
        finally:
            await client.aclose()
        for outcome in aggregate.subtasks:
            done = outcome.status is SubtaskStatus.SUCCEEDED
            ledger.record_send(
                f"{plan.id}/{outcome.id}", SendOutcome.CONFIRMED if done else SendOutcome.FAILED
            )
        name = Topology(sites.b.exchange).service_queue("ledger-worker")
        residue = {name: (await queue_depths(sites.b.url, [name]))[name].messages}
        report = ledger.report(residue)
        print(report.summary(), f"asked again: {far.bus.stats.duplicates}")
        assert second.is_running
        assert aggregate.status is PlanStatus.COMPLETED, aggregate.model_dump_json(indent=2)
        assert {agent for outcome in aggregate.subtasks for agent in outcome.agents} == {"worker-b"}
        assert report.lost == []
        assert report.duplicated == {}  # the step asked again was answered, not run again
        assert report.unexpected == []
        assert report.effects == _STEPS + len(probes)
        assert not any(report.residue.values())

"""A durable leader on the cluster: its node killed while the leader process lives on.

The leader rows of RELIABILITY.md on a 3-node cluster (the chaos kit's ``PrivateCluster``):
the plan's journal is a replicated stream and its reply queue a quorum queue. Here the
*node* the leader is connected to is killed (-9) mid-plan, the leader process stays: its
connection fails over, the ``run_plan`` delivery it held goes back to the queue and comes
back to a leader, which reads the journal and finishes the plan. The ledger says nothing
was lost or done twice, without the workers' own de-duplication (``once`` is off).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from chaos_support import BusOpener
from fault_support import SERVICE, Team, stop_all, wait_for

from agentbus import Settings
from agentbus.bus import Topology
from agentbus.leader import Plan, PlanClient, PlanStatus, SubtaskStatus
from agentbus.testing.chaos import AgentLauncher, Ledger, PrivateCluster, SendOutcome

pytestmark = pytest.mark.cluster

FAST = {"reconnect_interval": 0.5, "heartbeat": 2, "queue_type": "quorum"}
LEADER = "leader-1"


def _plan(shape: str, count: int) -> Plan:
    work = {"skill": "work", "service": SERVICE, "timeout": 20, "parameters": {"seconds": 0.3}}
    if shape == "chain":
        subtasks = [{"id": "s0", **work}]
        subtasks += [{"id": f"s{n}", **work, "depends_on": [f"s{n - 1}"]} for n in range(1, count)]
        return Plan.model_validate({"subtasks": subtasks})
    work["parameters"] = {"seconds": 0.05}
    return Plan.model_validate(
        {"subtasks": [{"id": f"s{n}", **work} for n in range(count)], "max_parallel": 8}
    )


@pytest.mark.parametrize(("shape", "count"), [("chain", 10), ("fan-out", 200)])
async def test_durable_leaders_node_killed(
    private_cluster: PrivateCluster,
    cluster_exchange: str,
    ledger: Ledger,
    dedup_path: str,
    team: Team,
    open_bus: BusOpener,
    agent_process: AgentLauncher,
    shape: str,
    count: int,
) -> None:
    """kill -9 of the node under a living durable leader: the plan completes, each
    subtask's effect once, one aggregate with one attempt each."""
    cluster = private_cluster
    # The workers and the client start on the second node, the leader on the first: the
    # kill takes the leader's node only (a worker whose node dies mid-task runs it again,
    # at-least-once, as the failover rows show; not this row's question).
    elsewhere = ";".join(cluster.urls[1:] + cluster.urls[:1])
    settings = Settings(url=elsewhere, exchange=cluster_exchange, dedup_path=dedup_path, **FAST)
    workers = await team.workers(2, settings, ledger)
    client = await open_bus(elsewhere, agent_id="client-1", **FAST)
    leader = agent_process.start(
        "agentbus.leader:Leader",
        "--id",
        LEADER,
        "--heartbeat",
        "1",
        url=cluster.url,
        exchange=cluster_exchange,
        env={"AGENTBUS_DURABLE_PLANS": "1", "AGENTBUS_QUEUE_TYPE": "quorum"},
    )
    await leader.started()
    victim = await cluster.node_of_connection(f"agentbus:{LEADER}")
    assert victim is not None, "the leader's connection was not found"
    for agent_id in [*(worker.id for worker in workers), client.agent_id]:
        assert await cluster.node_of_connection(f"agentbus:{agent_id}") != victim
    plan = _plan(shape, count)
    run = asyncio.create_task(PlanClient(client).run(plan, timeout=120))
    half = 4 if shape == "chain" else count // 3
    await wait_for(lambda: len(ledger.effects()) >= half, 30, f"{half} subtasks done")
    killed = time.monotonic()
    await cluster.kill(victim)
    async with asyncio.timeout(120):
        aggregate = await run
    finished_after = time.monotonic() - killed
    moved = await cluster.node_of_connection(f"agentbus:{LEADER}")
    for outcome in aggregate.subtasks:
        succeeded = outcome.status is SubtaskStatus.SUCCEEDED
        key = f"{plan.id}/{outcome.id}"
        ledger.record_send(key, SendOutcome.CONFIRMED if succeeded else SendOutcome.FAILED)
    shutdown = await stop_all(team.aclose, client.aclose)
    url = next(url for i, url in enumerate(cluster.urls) if i != victim)
    queue = Topology(cluster_exchange).service_queue(SERVICE)
    report = await ledger.check(url=url, queues=[queue])
    assert leader.is_running, f"the leader process died with its node:\n{leader.tail()}"
    leader.terminate()

    print(
        f"\n[cluster: durable leader's node kill -9, {shape} of {count}] {report.summary()} "
        f"finished_after_kill={finished_after:.2f} shutdown={shutdown:.2f} "
        f"leader_moved_to={moved}"
    )
    assert "plan taken over" in leader.text(), "the plan ended before its leader's node went"
    assert aggregate.status is PlanStatus.COMPLETED
    assert [o.attempts for o in aggregate.subtasks] == [1] * count
    assert report.recorded_twice == []
    assert report.unexpected == []
    assert report.lost == [], "a subtask succeeded without an effect"
    assert report.duplicated == {}, "a subtask's effect ran twice"
    assert report.effects == count
    assert not any(report.residue.values()), f"left in the queues: {report.residue}"

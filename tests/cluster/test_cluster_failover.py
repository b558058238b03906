"""The CLUSTER rows of RELIABILITY.md: a team on quorum queues rides out a node's failure.

A real 3-node RabbitMQ cluster of private nodes (the chaos kit's ``PrivateCluster``,
shared by the tier) serves a team: two ``LedgerWorker`` agents and a client, every bus
given all three nodes (``url`` in kombu's ``;`` form), the service and every instance
(reply) queue on quorum queues.
Under steady traffic a node is killed (-9), stopped, or killed and started again. The
ledger then says what was lost or done twice, and a probe measures how long until a
fresh request is answered again. Figures are printed: ``pytest -rP``.

As in the fault tests, the work is called with ``once=True`` (``Ledger.apply_once``, the
user-side guarantee against RabbitMQ's at-least-once windows) and the executions it
absorbed are counted as replays.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from chaos_support import BusOpener
from fault_support import (
    SERVICE,
    Producer,
    Team,
    consumers_back,
    steady_traffic,
    stop_all,
    wait_for,
)

from agentbus import Settings
from agentbus.bus import Topology
from agentbus.leader import Plan, PlanClient, PlanStatus, SubtaskStatus
from agentbus.testing.chaos import (
    AgentLauncher,
    AgentProcess,
    Ledger,
    LedgerReport,
    PrivateCluster,
    SendOutcome,
)

pytestmark = pytest.mark.cluster

RECONNECT = 0.5  # the reconnect interval of every bus here
FAST: dict[str, Any] = {"reconnect_interval": RECONNECT, "heartbeat": 2, "queue_type": "quorum"}
FLOWING_BOUND = 30.0  # a hang guard, not the target (under 5 s)
PROBE_TIMEOUT = 2.0  # each probe request's own timeout
TRAFFIC = {"lanes": 4, "limit": 3000, "seconds": 0.02, "once": True, "timeout": 5}


def _show(name: str, report: LedgerReport, **figures: Any) -> None:
    extra = " ".join(
        f"{key}={value:.2f}" if isinstance(value, float) else f"{key}={value}"
        for key, value in figures.items()
    )
    print(f"\n[cluster: {name}] {report.summary()} {extra}")


def _assert_whole(report: LedgerReport, producer: Producer | None = None) -> None:
    if producer is not None:
        assert report.sent == producer.calls, "a request was not recorded"
    assert report.recorded_twice == [], "a request ended twice"
    assert report.lost == [], "confirmed without an effect"
    assert report.duplicated == {}, "an effect ran twice"
    assert report.unexpected == []
    assert not any(report.residue.values()), f"left in the queues: {report.residue}"


async def _more(ended: Callable[[], int], count: int, seconds: float = 20.0) -> None:
    floor = ended() + count
    await wait_for(lambda: ended() >= floor, seconds, f"{count} more requests to end")


async def _flowing_again(producer: Producer, since: float) -> float:
    """Send fresh requests one after another until one is answered; return since ``since``."""
    deadline = since + FLOWING_BOUND
    while time.monotonic() < deadline:
        if await producer.call(timeout=PROBE_TIMEOUT, seconds=0.0, once=True) is not None:
            return time.monotonic() - since
    pytest.fail(f"no request answered within {FLOWING_BOUND} s of the fault", pytrace=False)


class _Scene:
    """A team on the cluster: two workers and a client, every bus given every node."""

    def __init__(
        self, cluster: PrivateCluster, exchange: str, ledger: Ledger, dedup_path: str
    ) -> None:
        self.cluster = cluster
        self.exchange = exchange
        self.ledger = ledger
        self.settings = Settings(url=cluster.url, exchange=exchange, dedup_path=dedup_path, **FAST)
        self.queue = Topology(exchange).service_queue(SERVICE)

    async def start(self, team: Team, open_bus: BusOpener) -> Producer:
        self.workers = await team.workers(2, self.settings, self.ledger)
        self.client = await open_bus(self.cluster.url, agent_id="client-1", **FAST)
        return Producer(self.client, self.ledger)

    async def agents_node(self) -> int:
        """The node every agent of the scene is connected to (they open on the same one)."""
        ids = [*(worker.id for worker in self.workers), self.client.agent_id]
        nodes = {await self.cluster.node_of_connection(f"agentbus:{id_}") for id_ in ids}
        assert len(nodes) == 1, f"agents spread over nodes {nodes}"
        (node,) = nodes
        assert node is not None, "an agent's connection was not found"
        return node

    def url_besides(self, *down: int) -> str:
        """A running node's URL (for the ledger's queue checks), not one of ``down``."""
        return next(url for i, url in enumerate(self.cluster.urls) if i not in down)

    async def finish(self, *down: int) -> tuple[LedgerReport, float]:
        shutdown = await stop_all(*(worker.stop for worker in self.workers), self.client.aclose)
        report = await self.ledger.check(url=self.url_besides(*down), queues=[self.queue])
        return report, shutdown


@pytest.fixture
def scene(
    private_cluster: PrivateCluster, cluster_exchange: str, ledger: Ledger, dedup_path: str
) -> _Scene:
    """This test's team on the session's cluster."""
    return _Scene(private_cluster, cluster_exchange, ledger, dedup_path)


async def test_agents_node_killed(scene: _Scene, team: Team, open_bus: BusOpener) -> None:
    """kill -9 of the node the agents are on: they fail over, 0 lost, 0 done twice."""
    producer = await scene.start(team, open_bus)
    async with steady_traffic(producer, **TRAFFIC) as ended:
        await _more(ended, 20)
        victim = await scene.agents_node()
        began = time.monotonic()
        await scene.cluster.kill(victim)
        flowing = await _flowing_again(producer, began)
        back = await consumers_back(scene.url_besides(victim), scene.queue, 2, FLOWING_BOUND)
        await _more(ended, 20)
    moved = await scene.agents_node()
    report, shutdown = await scene.finish(victim)

    _show(
        "agents' node kill -9",
        report,
        flowing_again=flowing,
        consumers_back=back,
        shutdown=shutdown,
        publish_retries=scene.client.stats.publish_retries,
    )
    assert moved != victim
    _assert_whole(report, producer)


async def test_queue_leader_node_killed(
    scene: _Scene, team: Team, open_bus: BusOpener, ledger: Ledger
) -> None:
    """kill -9 of the node leading the service's quorum queue (not the agents'): 0 lost."""
    cluster = scene.cluster
    # A quorum queue is led by the node its declaring client is on: let a worker on the
    # last node declare it, so the leader is not the node the team works on.
    last = len(cluster.urls) - 1
    declarer = scene.settings.model_copy(update={"url": cluster.urls[last]})
    (first,) = await team.workers(1, declarer, ledger, prefix="declarer")
    await first.stop()
    producer = await scene.start(team, open_bus)
    async with steady_traffic(producer, **TRAFFIC) as ended:
        await _more(ended, 20)
        victim = await cluster.queue_leader(scene.queue)
        agents = await scene.agents_node()
        began = time.monotonic()
        await cluster.kill(victim)
        flowing = await _flowing_again(producer, began)
        await _more(ended, 20)
    leader = await cluster.queue_leader(scene.queue)
    report, shutdown = await scene.finish(victim)

    _show(
        "queue leader's node kill -9",
        report,
        flowing_again=flowing,
        shutdown=shutdown,
        new_leader=leader,
        reconnects=scene.client.stats.connections - 1,
    )
    assert victim != agents, "the leader was on the agents' node: not this row's case"
    assert leader != victim
    _assert_whole(report, producer)


async def test_agents_node_stopped_gracefully(
    scene: _Scene, team: Team, open_bus: BusOpener
) -> None:
    """A clean shutdown of the agents' node: they fail over, 0 lost, 0 done twice."""
    producer = await scene.start(team, open_bus)
    async with steady_traffic(producer, **TRAFFIC) as ended:
        await _more(ended, 20)
        victim = await scene.agents_node()
        began = time.monotonic()
        stopping = asyncio.create_task(scene.cluster.stop(victim))
        flowing = await _flowing_again(producer, began)
        await stopping
        stopped = time.monotonic() - began
        await _more(ended, 20)
    report, shutdown = await scene.finish(victim)

    _show(
        "agents' node stopped",
        report,
        flowing_again=flowing,
        node_stopped_in=stopped,
        shutdown=shutdown,
        publish_retries=scene.client.stats.publish_retries,
    )
    assert await scene.cluster.running_nodes() == sorted(
        node.node for i, node in enumerate(scene.cluster.nodes) if i != victim
    )
    _assert_whole(report, producer)


async def test_killed_node_restarted_rejoins(
    scene: _Scene, team: Team, open_bus: BusOpener
) -> None:
    """The agents' node killed, then started again: back in the cluster, traffic never lost."""
    cluster = scene.cluster
    producer = await scene.start(team, open_bus)
    async with steady_traffic(producer, **TRAFFIC) as ended:
        await _more(ended, 20)
        victim = await scene.agents_node()
        began = time.monotonic()
        await cluster.kill(victim)
        flowing = await _flowing_again(producer, began)
        restarted = time.monotonic()
        await cluster.start(victim)
        rejoined = await wait_for_running(cluster, FLOWING_BOUND)
        rejoin = time.monotonic() - restarted
        await _more(ended, 20)
    report, shutdown = await scene.finish()

    _show(
        "killed node restarted",
        report,
        flowing_again=flowing,
        rejoined_in=rejoin,
        shutdown=shutdown,
    )
    assert rejoined == sorted(node.node for node in cluster.nodes), "not every node is back"
    _assert_whole(report, producer)


async def wait_for_running(cluster: PrivateCluster, seconds: float) -> list[str]:
    """Wait until every node of ``cluster`` is running in it; return their names."""
    everyone = len(cluster.nodes)
    deadline = time.monotonic() + seconds
    while len(running := await cluster.running_nodes()) < everyone:
        if time.monotonic() > deadline:
            pytest.fail(f"only {running} running after {seconds} s", pytrace=False)
        await asyncio.sleep(0.2)
    return running


@pytest.mark.parametrize(("shape", "count"), [("chain", 10), ("fan-out", 200)])
async def test_durable_leader_killed_on_the_cluster(
    scene: _Scene,
    team: Team,
    open_bus: BusOpener,
    agent_process: AgentLauncher,
    shape: str,
    count: int,
) -> None:
    """A durable leader (its journal a replicated stream) SIGKILLed mid-plan: another
    leader takes the plan over, every effect once, one aggregate, one attempt each."""
    await scene.start(team, open_bus)
    env = {"AGENTBUS_DURABLE_PLANS": "1", "AGENTBUS_QUEUE_TYPE": "quorum"}
    options = ("--heartbeat", "1")
    url, exchange = scene.cluster.url, scene.exchange

    def leader(agent_id: str) -> AgentProcess:
        return agent_process.start(
            "agentbus.leader:Leader",
            "--id",
            agent_id,
            *options,
            url=url,
            exchange=exchange,
            env=env,
        )

    first = leader("leader-1")
    await first.started()
    work = {"skill": "work", "service": SERVICE, "timeout": 20, "parameters": {"seconds": 0.3}}
    if shape == "chain":
        subtasks = [{"id": "s0", **work}]
        subtasks += [{"id": f"s{n}", **work, "depends_on": [f"s{n - 1}"]} for n in range(1, count)]
        plan = Plan.model_validate({"subtasks": subtasks})
    else:
        work["parameters"] = {"seconds": 0.05}
        plan = Plan.model_validate(
            {"subtasks": [{"id": f"s{n}", **work} for n in range(count)], "max_parallel": 8}
        )
    run = asyncio.create_task(PlanClient(scene.client).run(plan, timeout=120))
    half = 4 if shape == "chain" else count // 3
    await wait_for(lambda: len(scene.ledger.effects()) >= half, 30, f"{half} subtasks done")
    first.kill()
    killed = time.monotonic()
    second = leader("leader-2")
    async with asyncio.timeout(120):
        aggregate = await run
    finished_after = time.monotonic() - killed
    for outcome in aggregate.subtasks:
        succeeded = outcome.status is SubtaskStatus.SUCCEEDED
        key = f"{plan.id}/{outcome.id}"
        scene.ledger.record_send(key, SendOutcome.CONFIRMED if succeeded else SendOutcome.FAILED)
    report, shutdown = await scene.finish()
    second.terminate()

    _show(f"durable leader killed, {shape} of {count}", report,
          finished_after_kill=finished_after, shutdown=shutdown)  # fmt: skip
    assert aggregate.status is PlanStatus.COMPLETED
    assert [o.attempts for o in aggregate.subtasks] == [1] * count
    _assert_whole(report)
    assert report.effects == count

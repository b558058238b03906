"""The nemesis run: keyed requests and durable plans under load while faults come at random.

On the private 3-node cluster: three worker processes that share no file (their
de-duplication window is the shared store, ``AGENTBUS_DEDUP_URL``), two durable leaders,
and a client reaching the cluster through a proxy (so it can be partitioned). The client
keeps keyed requests in flight (each with an effect of 0.2 s) and runs fan-out plans of
10 steps, one after another; ``nemesis.Nemesis`` injects every kind of fault in
``nemesis.FAULTS``, one at a time, drawn from a seeded schedule, for
``AGENTBUS_NEMESIS_SECONDS`` (150 by default; the documented long run is 3600).

At the end, the ledger: nothing lost, no effect twice, nothing unexpected, every request
ended (answered, refused, or timed out: none hangs), every plan answered exactly once and
completed, nothing left in the queues. The seed is printed first; replay a run with
``AGENTBUS_NEMESIS_SEED=<seed>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from chaos_support import BusOpener
from fault_support import SERVICE, Producer, steady_traffic, wait_for
from nemesis import Crew, Nemesis, dead_letters

from agentbus.bus import Topology
from agentbus.leader import Aggregate, Plan, PlanClient, PlanStatus, SubtaskStatus
from agentbus.testing.chaos import AgentLauncher, ChaosProxy, Ledger, PrivateCluster, SendOutcome
from support.required import missing

SECONDS = float(os.environ.get("AGENTBUS_NEMESIS_SECONDS", "150"))
SEED = int(os.environ.get("AGENTBUS_NEMESIS_SEED") or random.SystemRandom().randrange(2**32))
CHAOS = Path(__file__).resolve().parent.parent / "chaos"  # chaos_agents.py, for the workers
FAST = {"reconnect_interval": 0.5, "heartbeat": 2, "queue_type": "quorum"}
STEPS = 10

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(SECONDS + 900)]


def _dedup_url() -> str:
    url = os.environ.get("AGENTBUS_TEST_DEDUP_URL")
    if not url:
        missing("no shared de-duplication store (AGENTBUS_TEST_DEDUP_URL; scripts/ensure-redis)")
    return url


def _plan() -> Plan:
    # once: the effect applied with its check in one transaction (the inbox pattern), so a
    # run after a kill -9 between the effect and its record is a replay, not an effect.
    parameters = {"seconds": 0.1, "once": True}
    work = {"skill": "work", "service": SERVICE, "timeout": 60, "parameters": parameters}
    return Plan.model_validate(
        {"subtasks": [{"id": f"s{n}", **work} for n in range(STEPS)], "max_parallel": 4}
    )


class Plans:
    """Runs plans one after another until stopped; records each subtask's end in the ledger."""

    def __init__(self, client: PlanClient, ledger: Ledger) -> None:
        self.client = client
        self.ledger = ledger
        self.answers: dict[str, list[Aggregate]] = {}
        self.failures: dict[str, str] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            plan = _plan()
            assert plan.id is not None
            self.answers[plan.id] = []
            try:
                aggregate = await self.client.run(plan, timeout=300)
            except Exception as exc:  # recorded; the run fails on it below
                self.failures[plan.id] = f"{type(exc).__name__}: {exc}"
                for n in range(STEPS):
                    self.ledger.record_send(f"{plan.id}/s{n}", SendOutcome.UNKNOWN)
                continue
            self.answers[plan.id].append(aggregate)
            for outcome in aggregate.subtasks:
                ok = outcome.status is SubtaskStatus.SUCCEEDED
                key = f"{plan.id}/{outcome.id}"
                self.ledger.record_send(key, SendOutcome.CONFIRMED if ok else SendOutcome.FAILED)


async def test_nemesis(
    private_cluster: PrivateCluster,
    cluster_exchange: str,
    ledger: Ledger,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
) -> None:
    print(f"\n[nemesis] seed={SEED} seconds={SECONDS:.0f} (AGENTBUS_NEMESIS_SEED replays it)")
    cluster = private_cluster
    env = {
        "AGENTBUS_DEDUP_URL": _dedup_url(),
        "AGENTBUS_DURABLE_PLANS": "1",
        "AGENTBUS_QUEUE_TYPE": "quorum",
        "AGENTBUS_RECONNECT_INTERVAL": "0.5",
    }
    numbers = itertools.count()

    ids: dict[int, str] = {}

    def start(target: str, role: str, cwd: Path | None = None) -> Any:
        agent_id = f"{role}-{next(numbers)}"
        process = agent_process.start(
            target, "--id", agent_id, "--heartbeat", "1",
            url=cluster.url, exchange=cluster_exchange, env=env, cwd=cwd,
        )  # fmt: skip
        ids[process.pid] = agent_id
        return process

    crew = Crew(
        leaders=[start("agentbus.leader:Leader", "leader") for _ in range(2)],
        workers=[start("chaos_agents:LedgerWorker", "worker", CHAOS) for _ in range(3)],
        start_leader=lambda: start("agentbus.leader:Leader", "leader"),
        start_worker=lambda: start("chaos_agents:LedgerWorker", "worker", CHAOS),
        ids=ids,
    )
    for process in [*crew.leaders, *crew.workers]:
        await process.started()
    async with ChaosProxy("127.0.0.1", cluster.nodes[0].port) as proxy:
        client = await open_bus(proxy.url(), agent_id="client-1", **FAST, presence_check=0)
        producer = Producer(client, ledger)
        plans = Plans(PlanClient(client), ledger)
        nemesis = Nemesis(SEED, cluster, proxy, crew, ledger)
        stop = asyncio.Event()
        began = time.monotonic()
        traffic = {"timeout": 30, "seconds": 0.2, "once": True}
        async with steady_traffic(producer, lanes=4, limit=10**9, **traffic):
            planner = asyncio.create_task(plans.run(stop))
            await wait_for(lambda: len(ledger.effects()) >= 20, 60, "work flowing")
            try:
                await nemesis.run(SECONDS)
            finally:
                stop.set()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(400):
                        await planner
        elapsed = time.monotonic() - began
        queue = Topology(cluster_exchange).service_queue(SERVICE)
        report = await ledger.check(url=cluster.urls[0], queues=[queue])
        dead = await dead_letters(cluster.urls[0], Topology(cluster_exchange).dead_letter_queue)

    answered = {plan_id: len(answers) for plan_id, answers in plans.answers.items()}
    statuses = {a.status for answers in plans.answers.values() for a in answers}
    print(
        f"[nemesis] seed={SEED} {elapsed:.0f} s: {report.summary()} requests={producer.calls} "
        f"plans={len(answered)} ({sum(answered.values())} answers)\n"
        + nemesis.table()
        + f"\n[nemesis] replacements started again (exited before they served): {nemesis.restarts}"
        + "\n[nemesis] dead-lettered (queue, reason): "
        + (", ".join(f"{q} {r}: {n}" for (q, r), n in sorted(dead.items())) or "none")
        + "\n"
        + "\n".join(nemesis.log)
    )
    assert planner.done(), f"seed {SEED}: a plan never ended"
    assert plans.failures == {}, f"seed {SEED}: {plans.failures}"
    assert set(answered.values()) == {1}, f"seed {SEED}: a plan answered {answered}"
    unfinished = {
        f"{a.plan_id}/{o.id}": (o.status.value, o.attempts, o.error)
        for answers in plans.answers.values()
        for a in answers
        for o in a.subtasks
        if o.status is not SubtaskStatus.SUCCEEDED
    }
    assert statuses == {PlanStatus.COMPLETED}, f"seed {SEED}: {unfinished}"
    assert report.sent == producer.calls + STEPS * len(answered)
    assert report.recorded_twice == [], f"seed {SEED}: a request ended twice"
    assert report.lost == [], f"seed {SEED}: confirmed without an effect"
    assert report.duplicated == {}, f"seed {SEED}: an effect ran twice"
    reruns = nemesis.unexplained_reruns()
    assert reruns == {}, f"seed {SEED}: run again after its effect, with no kill -9 to say why"
    assert report.unexpected == [], f"seed {SEED}"
    assert not any(report.residue.values()), f"seed {SEED}: left in the queues: {report.residue}"
    assert all(row.count >= 1 for row in nemesis.rows.values())

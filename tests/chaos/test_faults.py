"""The FAULT rows of RELIABILITY.md, each proved through the ledger on a private RabbitMQ node.

Producers record every request with how it ended (``confirmed``: answered, or a job the
broker confirmed; ``failed``: a clear error; ``unknown``: a timeout or no confirm), and
workers record every effect before they ack. The ledger's checker then says what was lost
(confirmed, no effect), unexpected, or done twice, and what was left in the queues.

Workers share a ``SqliteDedupStore`` (``AGENTBUS_DEDUP_PATH``), as instances on one host
should. Where a fault leaves RabbitMQ's at-least-once windows open (a publish retried after
a lost confirm puts a second copy in the queue; a handler cancelled by a closing channel
just after its effect), the work is called with ``once=True``: the worker applies its
effect with ``Ledger.apply_once``, the user-side guarantee, and the executions it absorbed
are counted as replays. Figures are printed: ``pytest -rP``.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
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
from agentbus.leader import Leader, Plan, PlanClient, PlanStatus, Progress, SubtaskStatus
from agentbus.registry import Registry
from agentbus.testing.chaos import (
    AgentLauncher,
    AgentProcess,
    ChaosProxy,
    Ledger,
    LedgerReport,
    PrivateBroker,
    SendOutcome,
    queue_depths,
)

pytestmark = pytest.mark.chaos

HERE = Path(__file__).resolve().parent
RECONNECT = 0.5  # the reconnect interval of every bus here
FAST = {"reconnect_interval": RECONNECT}
BACK_WITHIN = RECONNECT + 5  # consumers must be back this soon after a fault ends


@pytest.fixture
def dedup_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The de-duplication file the workers share, in-process and as processes."""
    path = str(tmp_path / "dedup.db")
    monkeypatch.setenv("AGENTBUS_DEDUP_PATH", path)
    return path


@pytest.fixture
async def team() -> AsyncIterator[Team]:
    """In-process agents, stopped after the test."""
    agents = Team()
    yield agents
    await agents.aclose()


def _settings(url: str, exchange: str, **extra: Any) -> Settings:
    return Settings(url=url, exchange=exchange, **{**FAST, **extra})


def _service_queue(exchange: str) -> str:
    return Topology(exchange).service_queue(SERVICE)


async def _more(ended: Any, count: int, seconds: float = 20.0) -> None:
    floor = ended() + count
    await wait_for(lambda: ended() >= floor, seconds, f"{count} more requests to end")


def _show(name: str, report: LedgerReport, **figures: Any) -> None:
    extra = " ".join(
        f"{key}={value:.2f}" if isinstance(value, float) else f"{key}={value}"
        for key, value in figures.items()
    )
    print(f"\n[{name}] {report.summary()} {extra}")


def _assert_whole(report: LedgerReport, producer: Producer | None = None) -> None:
    if producer is not None:
        assert report.sent == producer.calls, "a request was not recorded"
        assert sum(report.endings.values()) == producer.calls
    assert report.recorded_twice == [], "a request ended twice"
    assert report.lost == [], "confirmed without an effect"
    assert report.duplicated == {}, "an effect ran twice"
    assert report.unexpected == []
    assert not any(report.residue.values()), f"left in the queues: {report.residue}"


def _worker(
    launcher: AgentLauncher, agent_id: str, url: str, exchange: str, *options: str
) -> AgentProcess:
    return launcher.start(
        "chaos_agents:LedgerWorker",
        *("--id", agent_id, "--heartbeat", "1", *options),
        url=url,
        exchange=exchange,
        cwd=HERE,
    )


async def test_all_connections_force_closed_ten_times(
    private_broker: PrivateBroker,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_path: str,
    team: Team,
) -> None:
    """All connections force-closed 10 times under steady traffic: all answered, none twice."""
    config = _settings(private_broker.url, chaos_exchange, dedup_path=dedup_path)
    workers = await team.workers(2, config, ledger)
    client = await open_bus(private_broker.url, **FAST)
    producer = Producer(client, ledger)
    queue = _service_queue(chaos_exchange)
    backs: list[float] = []
    began = time.monotonic()
    async with steady_traffic(
        producer, lanes=6, limit=3000, seconds=0.05, once=True, timeout=20
    ) as ended:
        for _ in range(10):
            await _more(ended, 10)
            await asyncio.to_thread(private_broker.close_connections)
            backs.append(await consumers_back(private_broker.url, queue, 2, BACK_WITHIN))
        await _more(ended, 10)
    shutdown = await stop_all(*(worker.stop for worker in workers), client.aclose)
    report = await ledger.check(url=private_broker.url, queues=[queue])

    _show(
        "force-close x10",
        report,
        seconds=time.monotonic() - began,
        consumers_back_max=max(backs),
        shutdown=shutdown,
        publish_retries=client.stats.publish_retries,
        answered_from_dedup=sum(w.bus.stats.duplicates for w in workers),
    )
    _assert_whole(report, producer)
    assert report.endings == {"response": producer.calls}, "every request answered"


async def test_broker_killed_and_restarted_mid_stream(
    private_broker: PrivateBroker,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_path: str,
    team: Team,
) -> None:
    """kill -9 of the node mid-stream, then restart: confirmed work is done, unconfirmed resent."""
    config = _settings(private_broker.url, chaos_exchange, dedup_path=dedup_path)
    workers = await team.workers(2, config, ledger)
    client = await open_bus(private_broker.url, **FAST)
    producer = Producer(client, ledger)
    queue = _service_queue(chaos_exchange)
    async with steady_traffic(
        producer, lanes=2, limit=1000, seconds=0.05, once=True, timeout=15
    ) as ended:
        await _more(ended, 10)
        # A backlog of confirmed jobs, slower to work off (8 slots, 0.1 s each) than to send.
        jobs = [await producer.job(seconds=0.1, once=True) for _ in range(120)]
        # Jobs sent during the outage: their publishes are retried until the node is back.
        outage_jobs = asyncio.create_task(_jobs(producer, 10, pause=0.2))
        backlog = sum(1 for job in jobs if not ledger.effects(job))
        began = time.monotonic()
        await asyncio.to_thread(private_broker.kill)
        await asyncio.to_thread(private_broker.restart)
        outage = time.monotonic() - began
        back = await consumers_back(private_broker.url, queue, 2, BACK_WITHIN)
        resent = await outage_jobs
        await _more(ended, 10, 30)
    await wait_for(lambda: ledger.report().lost == [], 30, "every confirmed job to be done")
    shutdown = await stop_all(*(worker.stop for worker in workers), client.aclose)
    report = await ledger.check(url=private_broker.url, queues=[queue])

    _show(
        "broker kill -9",
        report,
        backlog_at_kill=backlog,
        outage=outage,
        consumers_back=back,
        shutdown=shutdown,
        publish_retries=client.stats.publish_retries,
    )
    assert backlog > 0, "the kill found no confirmed work queued"
    assert client.stats.publish_retries > 0, "nothing was resent"
    _assert_whole(report, producer)
    done = {message_id for message_id, _ in ledger.effects()}
    assert set(jobs) | set(resent) <= done, "a job was not done"
    assert report.outcomes.get(SendOutcome.FAILED, 0) == 0


async def _jobs(producer: Producer, count: int, pause: float) -> list[str]:
    sent = []
    for _ in range(count):
        sent.append(await producer.job(seconds=0.0, once=True))
        await asyncio.sleep(pause)
    return sent


async def test_network_stall_of_five_seconds_is_ridden_out(
    private_broker: PrivateBroker,
    chaos_proxy: ChaosProxy,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_path: str,
    team: Team,
) -> None:
    """A 5 s stall of every connection: ridden out on the same connections, all answered once."""
    url = chaos_proxy.url()
    config = _settings(url, chaos_exchange, heartbeat=5, dedup_path=dedup_path)
    workers = await team.workers(2, config, ledger)
    client = await open_bus(url, heartbeat=5, **FAST)
    producer = Producer(client, ledger)
    queue = _service_queue(chaos_exchange)
    connections = chaos_proxy.connections
    async with steady_traffic(producer, lanes=4, limit=2000, seconds=0.05, timeout=20) as ended:
        await _more(ended, 20)
        chaos_proxy.stall()
        await asyncio.sleep(5)  # the fault's duration, not a wait for an event
        chaos_proxy.resume()
        resumed = time.monotonic()
        await _more(ended, 20)
        flowing = time.monotonic() - resumed
    closed = (chaos_proxy.closed_by_client, chaos_proxy.closed_by_target)
    consumers = (await queue_depths(private_broker.url, [queue]))[queue].consumers
    shutdown = await stop_all(*(worker.stop for worker in workers), client.aclose)
    report = await ledger.check(url=private_broker.url, queues=[queue])

    _show("stall 5 s", report, flowing_after_resume=flowing, shutdown=shutdown)
    assert chaos_proxy.connections == connections, "a bus reconnected"
    assert closed == (0, 0), "a connection was given up"
    assert consumers == 2
    _assert_whole(report, producer)
    assert report.endings == {"response": producer.calls}


async def test_network_stall_past_the_heartbeats_is_detected_and_recovered(
    private_broker: PrivateBroker,
    chaos_proxy: ChaosProxy,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_path: str,
    team: Team,
) -> None:
    """A stall until every client gives up (heartbeat 2 s): detected, recovered, stop bounded."""
    heartbeat = 2
    url = chaos_proxy.url()
    config = _settings(
        url, chaos_exchange, heartbeat=heartbeat, shutdown_grace=1, dedup_path=dedup_path
    )
    workers = await team.workers(3, config, ledger)
    client = await open_bus(url, heartbeat=heartbeat, **FAST)
    producer = Producer(client, ledger)
    queue = _service_queue(chaos_exchange)
    async with steady_traffic(
        producer, lanes=4, limit=2000, seconds=0.05, once=True, timeout=40
    ) as ended:
        await _more(ended, 20)
        chaos_proxy.stall()
        stalled = time.monotonic()
        # A stop with work in flight: each broker round trip of it is bounded (2 s) and
        # fails on the stalled link: the goodbye heartbeat, the consumer cancel, the
        # agent_offline event and the close, plus the grace (1 s) for the work.
        stop_during_stall = await stop_all(workers[2].stop, bound=4 * 2 + 1 + 3)
        # aiormq gives up after 3 * (heartbeat + 1) s of silence; RabbitMQ sooner.
        bound = 3 * (heartbeat + 1) + heartbeat + 2
        await wait_for(lambda: chaos_proxy.closed_by_client >= 4, bound, "every client")
        detected = time.monotonic() - stalled
        chaos_proxy.resume()
        back = await consumers_back(private_broker.url, queue, 2, BACK_WITHIN)
        await _more(ended, 20, 40)
    shutdown = await stop_all(*(worker.stop for worker in workers), client.aclose)
    report = await ledger.check(url=private_broker.url, queues=[queue])

    _show(
        "stall past heartbeats",
        report,
        stall=detected,
        consumers_back=back,
        stop_during_stall=stop_during_stall,
        shutdown=shutdown,
        broker_closed=chaos_proxy.closed_by_target,
    )
    assert detected <= bound
    _assert_whole(report, producer)
    assert report.endings == {"response": producer.calls}


async def test_worker_killed_mid_task_another_instance_completes_it(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_path: str,
    team: Team,
) -> None:
    """SIGKILL of a worker holding subtasks: the other completes them, one effect each, whole."""
    url = private_broker.url
    first = _worker(agent_process, "worker-a", url, chaos_exchange)
    second = _worker(agent_process, "worker-b", url, chaos_exchange)
    await asyncio.gather(first.started(), second.started())
    await team.start(Leader(agent_id="leader-1", settings=_settings(url, chaos_exchange)))
    client = await open_bus(url, **FAST)
    plan = Plan.model_validate(
        {
            "subtasks": [
                {"id": f"s{n}", "skill": "work", "service": SERVICE, "timeout": 30}
                | {"parameters": {"seconds": 3}}
                for n in range(6)
            ],
            "max_parallel": 6,
        }
    )
    progress: list[Progress] = []
    run = asyncio.create_task(PlanClient(client).run(plan, timeout=60, on_progress=progress.append))

    def holders() -> dict[str, str]:
        return {p.subtask_id: p.agent_id for p in progress if p.transition == "running"}

    await wait_for(lambda: len(holders()) == 6, 15, "every subtask to start")
    held = {s for s, agent in holders().items() if agent == "worker-a"}
    first.kill()
    assert await first.exited(5) == -signal.SIGKILL
    async with asyncio.timeout(60):
        aggregate = await run
    for outcome in aggregate.subtasks:
        succeeded = outcome.status is SubtaskStatus.SUCCEEDED
        key = f"{plan.id}/{outcome.id}"
        ledger.record_send(key, SendOutcome.CONFIRMED if succeeded else SendOutcome.FAILED)
    report = await ledger.check(url=url, queues=[_service_queue(chaos_exchange)])

    _show("worker SIGKILL", report, held_by_killed=len(held), attempts=aggregate.totals.attempts)
    assert held, "the killed worker held no subtask"
    assert aggregate.status is PlanStatus.COMPLETED
    for subtask_id in held:
        assert ledger.effects(f"{plan.id}/{subtask_id}") == [
            (f"{plan.id}/{subtask_id}", "worker-b")
        ]
        assert aggregate.subtask(subtask_id).agents == ["worker-a", "worker-b"]
    _assert_whole(report)
    assert report.effects == len(plan.subtasks)


async def test_worker_terminated_drains_short_work_and_requeues_long_work(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_path: str,
) -> None:
    """SIGTERM: short work finishes and is acked there; long work is requeued, done elsewhere."""
    url = private_broker.url
    draining = _worker(agent_process, "worker-a", url, chaos_exchange, "--grace", "4")
    await draining.started()
    client = await open_bus(url, **FAST)
    producer = Producer(client, ledger)
    short = [asyncio.create_task(producer.call(seconds=2, timeout=20)) for _ in range(2)]
    long = [asyncio.create_task(producer.call(seconds=6, timeout=20)) for _ in range(2)]

    async def in_flight() -> int:
        reply = await client.request("worker-a", "ping", timeout=2)
        return int(reply.result["in_flight"])

    began = time.monotonic()
    while await in_flight() < 4:
        assert time.monotonic() - began < 10, "worker-a did not take the four requests"
        await asyncio.sleep(0.05)
    draining.terminate()
    terminated = time.monotonic()
    other = _worker(agent_process, "worker-b", url, chaos_exchange)  # consumes from now on
    await other.started()
    assert await draining.exited(15) == 0
    exit_after = time.monotonic() - terminated
    async with asyncio.timeout(30):
        short_replies = await asyncio.gather(*short)
        long_replies = await asyncio.gather(*long)
    report = await ledger.check(url=url, queues=[_service_queue(chaos_exchange)])

    _show("worker SIGTERM", report, exit_after_sigterm=exit_after)
    assert [reply and reply.sender_id for reply in short_replies] == ["worker-a"] * 2
    assert [reply and reply.sender_id for reply in long_replies] == ["worker-b"] * 2
    agents = sorted(agent for _, agent in ledger.effects())
    assert agents == ["worker-a", "worker-a", "worker-b", "worker-b"]
    _assert_whole(report, producer)
    assert report.endings == {"response": 4}


async def test_leader_restarted_mid_plan(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_path: str,
    team: Team,
) -> None:
    """Leader SIGKILLed mid-plan, another started, without durable plans (--no-durable): the
    plan completes, each subtask applied once."""
    # What is asserted, precisely: the one run_plan request ends once, with the aggregate
    # of the new leader, which got the request redelivered and ran the plan again; every
    # subtask in it succeeded. Effects are keyed by plan_id/subtask_id (the leader puts
    # both in each subtask request's metadata). A leader keeps no durable plan state, so
    # the new one sends every subtask again, under new message ids that no bus-level
    # de-duplication can match; the worker applies its effect once per key (apply_once,
    # the user-side guarantee): each key has exactly one effect, re-sent ones are replays.
    url = private_broker.url
    await team.workers(2, _settings(url, chaos_exchange, dedup_path=dedup_path), ledger)
    leader = "agentbus.leader:Leader"
    options = ("--heartbeat", "1")
    plain = {"AGENTBUS_DURABLE_PLANS": "0"}  # the row without the journal
    first = agent_process.start(
        leader, "--id", "leader-1", *options, url=url, exchange=chaos_exchange, env=plain
    )
    await first.started()
    client = await open_bus(url, **FAST)
    subtasks = [
        {"id": f"s{n}", "skill": "work", "service": SERVICE, "timeout": 10}
        | {"parameters": {"seconds": 0.4, "once": True}}
        for n in range(12)
    ]
    plan = Plan.model_validate({"subtasks": subtasks, "max_parallel": 2})
    run = asyncio.create_task(PlanClient(client).run(plan, timeout=60))
    await wait_for(lambda: len(ledger.effects()) >= 4, 20, "four subtasks to be done")
    first.kill()
    assert await first.exited(5) == -signal.SIGKILL
    done_before = len(ledger.effects())
    second = agent_process.start(
        leader, "--id", "leader-2", *options, url=url, exchange=chaos_exchange, env=plain
    )
    async with asyncio.timeout(60):
        aggregate = await run
    for outcome in aggregate.subtasks:
        succeeded = outcome.status is SubtaskStatus.SUCCEEDED
        key = f"{plan.id}/{outcome.id}"
        ledger.record_send(key, SendOutcome.CONFIRMED if succeeded else SendOutcome.FAILED)
    report = await ledger.check(url=url, queues=[_service_queue(chaos_exchange)])

    replayed = sum(1 for o in aggregate.subtasks if not o.result["applied"])
    _show("leader restart", report, done_before_kill=done_before, replayed_in_aggregate=replayed)
    assert second.is_running
    assert aggregate.status is PlanStatus.COMPLETED
    assert all(o.status is SubtaskStatus.SUCCEEDED for o in aggregate.subtasks)
    assert {o.result["agent_id"] for o in aggregate.subtasks} <= {"worker-0", "worker-1"}
    _assert_whole(report)
    assert report.effects == len(plan.subtasks)
    assert replayed >= done_before, "the new leader did not re-run the plan from its start"


@pytest.mark.parametrize(("shape", "count"), [("chain", 10), ("fan-out", 200)])
async def test_durable_plan_survives_its_leader_killed(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
    shape: str,
    count: int,
) -> None:
    """Durable leader SIGKILLed mid-plan: another takes it over from the journal; every
    subtask's effect happens once with no help from the worker (no apply_once) and no
    de-duplication window the workers share (each its own, as on two hosts), the
    requester gets one aggregate, and each subtask counts one attempt."""
    url = private_broker.url
    await team.workers(2, _settings(url, chaos_exchange), ledger)
    leader = "agentbus.leader:Leader"
    options = ("--heartbeat", "1")
    durable = {"AGENTBUS_DURABLE_PLANS": "1"}
    first = agent_process.start(
        leader, "--id", "leader-1", *options, url=url, exchange=chaos_exchange, env=durable
    )
    await first.started()
    client = await open_bus(url, **FAST)
    work = {"skill": "work", "service": SERVICE, "timeout": 20, "parameters": {"seconds": 0.3}}
    if shape == "chain":
        subtasks = [{"id": "s0", **work}] + [
            {"id": f"s{n}", **work, "depends_on": [f"s{n - 1}"]} for n in range(1, count)
        ]
        plan = Plan.model_validate({"subtasks": subtasks})
    else:
        work["parameters"] = {"seconds": 0.05}
        subtasks = [{"id": f"s{n}", **work} for n in range(count)]
        plan = Plan.model_validate({"subtasks": subtasks, "max_parallel": 8})
    run = asyncio.create_task(PlanClient(client).run(plan, timeout=120))
    half = 4 if shape == "chain" else count // 3
    await wait_for(lambda: len(ledger.effects()) >= half, 30, f"{half} subtasks to be done")
    first.kill()
    killed = time.monotonic()
    assert await first.exited(5) == -signal.SIGKILL
    done_before = len(ledger.effects())
    second = agent_process.start(
        leader, "--id", "leader-2", *options, url=url, exchange=chaos_exchange, env=durable
    )
    async with asyncio.timeout(120):
        aggregate = await run
    finished_after = time.monotonic() - killed
    for outcome in aggregate.subtasks:
        succeeded = outcome.status is SubtaskStatus.SUCCEEDED
        key = f"{plan.id}/{outcome.id}"
        ledger.record_send(key, SendOutcome.CONFIRMED if succeeded else SendOutcome.FAILED)
    report = await ledger.check(url=url, queues=[_service_queue(chaos_exchange)])

    _show(
        f"durable leader killed, {shape} of {count}",
        report,
        done_before_kill=done_before,
        finished_after_kill=finished_after,
    )
    assert second.is_running
    assert aggregate.status is PlanStatus.COMPLETED
    assert all(o.status is SubtaskStatus.SUCCEEDED for o in aggregate.subtasks)
    assert [o.attempts for o in aggregate.subtasks] == [1] * count
    _assert_whole(report)
    assert report.effects == count  # once each, though the workers apply every request


async def test_a_map_over_thousands_of_items_survives_its_leader_killed(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
) -> None:
    """A step mapped over 10,000 items, its durable leader SIGKILLed a third of the way:
    another takes the plan over from the journal, and each item's effect happens once
    (the workers share no de-duplication window, as on two hosts)."""
    count = 10_000
    url = private_broker.url
    await team.workers(2, _settings(url, chaos_exchange), ledger)
    leader = "agentbus.leader:Leader"
    options = ("--heartbeat", "1")
    durable = {"AGENTBUS_DURABLE_PLANS": "1"}
    first = agent_process.start(
        leader, "--id", "leader-1", *options, url=url, exchange=chaos_exchange, env=durable
    )
    await first.started()
    client = await open_bus(url, **FAST)
    plan = Plan.model_validate(
        {
            "id": "map-kill",
            "subtasks": [
                {"id": "n", "skill": "count", "service": SERVICE, "parameters": {"n": count}},
                {
                    "id": "m",
                    "skill": "work_item",
                    "service": SERVICE,
                    "depends_on": ["n"],
                    "map": {"over": "n", "as": "index", "concurrency": 32},
                },
            ],
        }
    )
    run = asyncio.create_task(PlanClient(client).run(plan, timeout=300))
    third = count // 3
    await wait_for(lambda: len(ledger.effects()) >= third, 120, f"{third} items to be done")
    first.kill()
    killed = time.monotonic()
    assert await first.exited(5) == -signal.SIGKILL
    done_before = len(ledger.effects())
    second = agent_process.start(
        leader, "--id", "leader-2", *options, url=url, exchange=chaos_exchange, env=durable
    )
    async with asyncio.timeout(300):
        aggregate = await run
    finished_after = time.monotonic() - killed
    mapped = aggregate.subtask("m")
    for index in range(count):
        ledger.record_send(f"{plan.id}/m[{index}]", SendOutcome.CONFIRMED)
    report = await ledger.check(url=url, queues=[_service_queue(chaos_exchange)])

    _show(
        f"durable leader killed, map of {count}",
        report,
        done_before_kill=done_before,
        finished_after_kill=finished_after,
    )
    assert second.is_running
    assert aggregate.status is PlanStatus.COMPLETED
    assert [item["index"] for item in mapped.result] == list(range(count))
    assert mapped.items is not None
    assert mapped.items["succeeded"] == count
    _assert_whole(report)
    assert report.effects == count  # each item once


@pytest.mark.parametrize("hit", [10, 30])
async def test_leader_dying_between_an_answer_and_its_journal_asks_nothing_again(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
    hit: int,
) -> None:
    """The worst moment for a durable leader to die: an answer is in, the journal does not
    have its end yet (the fault point ``leader.settling``, not timing luck). The answer is still
    on the plan's reply queue, so the next leader takes it: no step is asked again, none
    runs twice, though the workers share no de-duplication window (as on two hosts)."""
    url = private_broker.url
    workers = await team.workers(2, _settings(url, chaos_exchange), ledger)
    leader = "agentbus.leader:Leader"
    options = ("--heartbeat", "1")
    durable = {"AGENTBUS_DURABLE_PLANS": "1"}
    first = agent_process.start(
        leader, "--id", "leader-1", *options, url=url, exchange=chaos_exchange,
        env={**durable, "AGENTBUS_FAULT_POINTS": f"leader.settling:{hit}"},
    )  # fmt: skip
    await first.started()
    # No presence check: while no leader runs, the plan's request waits for the next.
    client = await open_bus(url, **FAST, presence_check=0)
    work = {"skill": "work", "service": SERVICE, "timeout": 20, "parameters": {"seconds": 0.05}}
    count = 60
    plan = Plan.model_validate(
        {"subtasks": [{"id": f"s{n}", **work} for n in range(count)], "max_parallel": 8}
    )
    run = asyncio.create_task(PlanClient(client).run(plan, timeout=120))
    assert await first.exited(60) == -signal.SIGKILL  # it died at its subtask end ``hit``
    killed = time.monotonic()
    done_before = len(ledger.effects())
    second = agent_process.start(
        leader, "--id", "leader-2", *options, url=url, exchange=chaos_exchange, env=durable
    )
    async with asyncio.timeout(120):
        aggregate = await run
    for outcome in aggregate.subtasks:
        succeeded = outcome.status is SubtaskStatus.SUCCEEDED
        ledger.record_send(
            f"{plan.id}/{outcome.id}", SendOutcome.CONFIRMED if succeeded else SendOutcome.FAILED
        )
    finished_after = time.monotonic() - killed
    report = await ledger.check(url=url, queues=[_service_queue(chaos_exchange)])
    asked_again = sum(worker.bus.stats.duplicates for worker in workers)

    _show(
        f"durable leader dies at subtask end {hit}, fan-out of {count}",
        report,
        done_before_kill=done_before,
        finished_after_kill=finished_after,
        asked_again=asked_again,
    )
    assert second.is_running
    assert aggregate.status is PlanStatus.COMPLETED
    assert [o.attempts for o in aggregate.subtasks] == [1] * count
    _assert_whole(report)
    assert report.effects == count  # each step ran once
    assert asked_again == 0  # and none was asked a second time, of either worker


async def test_requester_gone_before_the_reply(
    private_broker: PrivateBroker,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
) -> None:
    """A requester gone before the reply: dropped and counted (or parked), nothing hangs."""
    url = private_broker.url
    [worker] = await team.workers(1, _settings(url, chaos_exchange), ledger)
    gone = await open_bus(url, instance_queue_expires=0.5, **FAST)  # its queue goes with it
    parked = await open_bus(url, **FAST)  # its queue outlives it by 60 s
    calls = [
        asyncio.create_task(Producer(bus, ledger).call(seconds=2, timeout=10))
        for bus in (gone, parked)
    ]
    await wait_for(lambda: worker.in_flight == 2, 5, "the worker to take both")
    closing = await stop_all(gone.aclose, parked.aclose)
    async with asyncio.timeout(5):
        assert await asyncio.gather(*calls) == [None, None]
    await wait_for(lambda: worker.in_flight == 0, 10, "the work to end")
    await wait_for(lambda: worker.bus.stats.replies_dropped == 1, 5, "the dropped reply")
    topology = Topology(chaos_exchange)
    queues = [topology.instance_queue(bus.agent_id) for bus in (gone, parked)]
    depths = await queue_depths(url, queues)
    after = Producer(await open_bus(url, **FAST), ledger)
    assert await after.call(timeout=5) is not None, "the worker no longer serves"
    report = await ledger.check(url=url, queues=[_service_queue(chaos_exchange)])

    _show("requester gone", report, closing=closing, stats=worker.bus.stats.as_dict())
    assert not depths[queues[0]].exists
    assert depths[queues[1]].messages == 1, "the reply to the other waits in its queue"
    assert report.endings == {"error:BusClosed": 2, "response": 1}
    _assert_whole(report)
    assert report.effects == 3


async def test_nobody_serves_fails_at_once(
    private_broker: PrivateBroker,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
) -> None:
    """Nobody serves: agent_unavailable at once, and a plan's unknown skill no_capable_agent."""
    url = private_broker.url
    config = _settings(url, chaos_exchange)
    await team.start(Registry(agent_id="registry-1", settings=config, heartbeat_interval=1))
    await team.start(Leader(agent_id="leader-1", settings=config, heartbeat_interval=1))
    client = await open_bus(url, **FAST)
    began = time.monotonic()
    assert await Producer(client, ledger, service="nobody").call(timeout=10) is None
    request_took = time.monotonic() - began
    plan = Plan.model_validate(
        {
            "subtasks": [
                {"id": "unknown-skill", "skill": "nobody_has_it", "critical": False},
                {"id": "no-instance", "skill": "work", "service": "nobody", "critical": False},
            ]
        }
    )
    began = time.monotonic()
    aggregate = await PlanClient(client).run(plan, timeout=30)
    plan_took = time.monotonic() - began
    report = ledger.report()

    _show("nobody serves", report, request_took=request_took, plan_took=plan_took)
    assert report.endings == {"error:Unroutable": 1}
    assert request_took < 1
    assert plan_took < 5
    assert aggregate.status is PlanStatus.PARTIAL  # nothing succeeded, nothing critical failed
    assert aggregate.subtask("unknown-skill").error == {
        "code": "no_capable_agent",
        "message": "no live agent offers the skill 'nobody_has_it'",
    }
    no_instance = aggregate.subtask("no-instance").error
    assert no_instance is not None
    assert no_instance["code"] == "agent_unavailable"
    assert report.effects == 0


async def test_handler_that_always_raises_answers_once_and_traffic_flows(
    private_broker: PrivateBroker,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_path: str,
    team: Team,
) -> None:
    """A raising handler: one processing_failed reply per request, one attempt; others flow."""
    url = private_broker.url
    config = _settings(url, chaos_exchange, dedup_path=dedup_path)
    workers = await team.workers(2, config, ledger)
    client = await open_bus(url, **FAST)
    producer = Producer(client, ledger)
    failing = [producer.call("fail", timeout=10) for _ in range(20)]
    working = [producer.call("work", timeout=10) for _ in range(20)]
    async with asyncio.timeout(30):
        await asyncio.gather(*failing, *working)
    topology = Topology(chaos_exchange)
    queues = [topology.service_queue(SERVICE), topology.dead_letter_queue]
    depths = await queue_depths(url, queues)
    report = ledger.report({queues[0]: depths[queues[0]].messages})

    _show("handler raises", report, handler_errors=sum(w.bus.stats.handler_errors for w in workers))
    assert report.endings == {"error:processing_failed": 20, "response": 20}
    assert len(report.failed_with_effect) == 20, "each failing request ran once"
    assert depths[queues[1]].messages == 0, "the current contract: answered, not dead-lettered"
    assert sum(w.bus.stats.handler_errors for w in workers) == 20
    _assert_whole(report, producer)


@dataclass(frozen=True, slots=True)
class PoisonRun:
    """What became of a request that SIGKILLs every worker taking it, amid steady traffic."""

    poison: str
    letter: aio_pika.abc.AbstractIncomingMessage
    attempts: int
    report: LedgerReport
    others: int
    restarts: int
    seconds: float


async def _poison_crashing_workers(
    agent_process: AgentLauncher, open_bus: BusOpener, url: str, exchange: str, ledger: Ledger
) -> PoisonRun:
    # Two workers, restarted by a supervisor as they die; one poison among steady requests.
    workers = [_worker(agent_process, f"worker-{n}", url, exchange) for n in range(2)]
    await asyncio.gather(*(worker.started() for worker in workers))
    restarts = 0

    async def supervise() -> None:
        nonlocal restarts
        while True:
            for n, worker in enumerate(workers):
                if not worker.is_running:
                    restarts += 1
                    workers[n] = _worker(agent_process, f"worker-{n}-{restarts}", url, exchange)
            await asyncio.sleep(0.1)

    supervisor = asyncio.create_task(supervise())
    # The workers crash and restart: their requests wait in the queue through it, so the
    # client does not give up on a service whose instances are all down for a moment.
    client = await open_bus(url, presence_check=0, **FAST)
    producer = Producer(client, ledger)
    topology = Topology(exchange)
    dead_letters = topology.dead_letter_queue
    try:
        async with steady_traffic(
            producer, lanes=1, limit=500, pause=0.1, seconds=0.0, timeout=30
        ) as ended:
            await _more(ended, 5)
            poison = await producer.job("crash")
            began = time.monotonic()
            while (await queue_depths(url, [dead_letters]))[dead_letters].messages == 0:
                assert time.monotonic() - began < 60, "the poison was not dead-lettered"
                await asyncio.sleep(0.2)
            seconds = time.monotonic() - began
            await _more(ended, 5, 30)
    finally:
        supervisor.cancel()
    letter = await _get_one(url, dead_letters)
    report = await ledger.check(url=url, queues=[topology.service_queue(SERVICE)])
    return PoisonRun(
        poison=poison,
        letter=letter,
        attempts=len(ledger.effects(poison)),
        report=report,
        others=producer.calls - 1,
        restarts=restarts,
        seconds=seconds,
    )


def _assert_only_the_poison_repeated(run: PoisonRun, name: str) -> None:
    _show(
        name,
        run.report,
        attempts=run.attempts,
        worker_restarts=run.restarts,
        dead_lettered_after=run.seconds,
    )
    assert run.letter.message_id == run.poison
    assert run.report.duplicated == {run.poison: run.attempts}, "only the poison ran more than once"
    assert run.report.lost == []
    assert run.report.unexpected == []
    assert run.report.endings["response"] == run.others, "other traffic flowed"
    assert not any(run.report.residue.values())


@pytest.mark.parametrize(
    ("queue_type", "death_reason", "attempt_header"),
    [
        pytest.param("quorum", "delivery_limit", None, id="quorum"),  # x-delivery-limit
        pytest.param("classic", "rejected", 3, id="classic"),  # counted in x-agentbus-attempt
    ],
)
async def test_poison_request_crashing_its_worker_is_dead_lettered(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    dedup_path: str,
    queue_type: str,
    death_reason: str,
    attempt_header: int | None,
) -> None:
    """A request that kills each worker taking it: dead-lettered after the delivery limit."""
    agent_process.env.update({"AGENTBUS_QUEUE_TYPE": queue_type, "AGENTBUS_DELIVERY_LIMIT": "2"})
    run = await _poison_crashing_workers(
        agent_process, open_bus, private_broker.url, chaos_exchange, ledger
    )

    _assert_only_the_poison_repeated(run, f"poison, {queue_type}")
    assert run.letter.headers.get("x-first-death-reason") == death_reason
    assert run.letter.headers.get("x-agentbus-attempt") == attempt_header
    # The first delivery and two returns (the limit); on a classic queue one more at most:
    # a worker that dies just after acking the original it republished may lose that ack
    # with its socket (the kernel resets a socket closed with unread data), so the original
    # comes back once more beside its copy (at-least-once; seen in about 1 run of 4 under load).
    expected = {3} if queue_type == "quorum" else {3, 4}
    assert run.attempts in expected, "the first delivery and two returns (the limit)"


async def _get_one(url: str, queue: str) -> aio_pika.abc.AbstractIncomingMessage:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        source = await channel.declare_queue(queue, passive=True)
        message = await source.get(no_ack=True, fail=True)
        assert message is not None
        return message

"""The LOAD rows of RELIABILITY.md, in bounded forms for CI, on a private RabbitMQ node.

- a publish-rate ramp to saturation: bounded memory and in-flight, nothing lost at any step;
- a soak with forced reconnects: flat memory, fds and channels, no consumer-count drift;
- a fan-out of 1 to 10,000 subtasks: whole aggregates; a plan's deadline is honoured.

Every request goes through the ledger (see ``test_faults``): producers record how each
ended, workers record each effect. Figures are printed: ``pytest -rP``.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from chaos_support import BusOpener
from fault_support import SERVICE, Producer, consumers_back, steady_traffic, wait_for

from agentbus.bus import Topology
from agentbus.leader import Aggregate, Plan, PlanClient, PlanStatus, SubtaskStatus
from agentbus.testing.chaos import (
    AgentLauncher,
    AgentProcess,
    Ledger,
    LedgerReport,
    PrivateBroker,
    SendOutcome,
    queue_depths,
)

pytestmark = pytest.mark.chaos

HERE = Path(__file__).resolve().parent
FAST: dict[str, Any] = {"reconnect_interval": 0.5}
MIB = 1024 * 1024


def _worker(
    launcher: AgentLauncher, agent_id: str, url: str, exchange: str, target: str
) -> AgentProcess:
    return launcher.start(
        target, "--id", agent_id, "--heartbeat", "1", url=url, exchange=exchange, cwd=HERE
    )


def _rss(pid: int) -> int:
    """The resident set size of process ``pid``, in bytes (``VmRSS`` in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"no VmRSS for pid {pid}")


def _fds(pid: int) -> int:
    """How many file descriptors process ``pid`` has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def _assert_whole(report: LedgerReport, producer: Producer | None = None) -> None:
    if producer is not None:
        assert report.sent == producer.calls, "a request was not recorded"
        assert sum(report.endings.values()) == producer.calls, "a request did not end once"
    assert report.recorded_twice == [], "a request ended twice"
    assert report.lost == [], "confirmed without an effect"
    assert report.duplicated == {}, "an effect ran twice"
    assert report.unexpected == []
    assert not any(report.residue.values()), f"left in the queues: {report.residue}"


# The publish-rate ramp.

RAMP = (100, 200, 400, 800, 1600)  # requests a second, each for STEP seconds
STEP = 1.0
BURST = 1000  # then as fast as the producer can: all at once
CAP = 256  # the producer's max_outstanding: in-flight requests at most
# The worker holds at most its prefetch (4) requests and a de-duplication window of its
# replies (about 2.5 KiB each, at most AGENTBUS_DEDUP_SIZE of them); its memory must not
# grow with the offered rate. The 4,100 requests here fit in the default window (100,000):
# a window of 1,000 caps that state at about 2.5 MiB, so what is left to grow is a leak.
WORKER_DEDUP_SIZE = 1000
RSS_SLACK = 16 * MIB  # growth allowed over the worker's RSS after the first step


@dataclass
class Step:
    rate: float
    sent: int
    seconds: float
    peak_outstanding: int
    peak_waiting: int
    worker_rss: int

    def row(self) -> str:
        rate = "burst" if self.rate == float("inf") else f"{self.rate:g}/s"
        return (
            f"rate={rate} sent={self.sent} took={self.seconds:.2f}s "
            f"done/s={self.sent / self.seconds:.0f} peak_outstanding={self.peak_outstanding} "
            f"peak_waiting_for_slot={self.peak_waiting} worker_rss={self.worker_rss / MIB:.1f}MiB"
        )


async def _open_loop(producer: Producer, rate: float, count: int) -> list[asyncio.Task[Any]]:
    """Start ``count`` requests at ``rate`` a second, on schedule, whatever the answers do."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    calls = []
    for n in range(count):
        delay = began + n / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)  # the schedule of an open-loop producer
        calls.append(asyncio.create_task(producer.call(timeout=30)))
    return calls


async def test_publish_rate_ramp_to_saturation_keeps_in_flight_and_memory_bounded(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
) -> None:
    """Open-loop ramp 100..1,600/s then a burst: all answered once, in-flight and RSS bounded."""
    url = private_broker.url
    agent_process.env["AGENTBUS_DEDUP_SIZE"] = str(WORKER_DEDUP_SIZE)
    worker = _worker(agent_process, "worker-0", url, chaos_exchange, "chaos_agents:LedgerWorker")
    await worker.started()
    client = await open_bus(url, max_outstanding=CAP, **FAST)
    producer = Producer(client, ledger)
    peaks = {"outstanding": 0, "waiting": 0}

    async def sample() -> None:
        while True:
            outstanding = client.outstanding
            peaks["outstanding"] = max(peaks["outstanding"], outstanding)
            peaks["waiting"] = max(peaks["waiting"], client.in_flight - outstanding)
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(sample())
    steps: list[Step] = []
    try:
        for rate in (*RAMP, float("inf")):
            peaks.update(outstanding=0, waiting=0)
            count = BURST if rate == float("inf") else int(rate * STEP)
            began = time.monotonic()
            calls = await _open_loop(producer, rate, count)
            async with asyncio.timeout(60):
                await asyncio.gather(*calls)
            took = time.monotonic() - began
            rss = _rss(worker.pid)
            steps.append(Step(rate, count, took, peaks["outstanding"], peaks["waiting"], rss))
            report = ledger.report()
            print(f"\n[ramp] {steps[-1].row()}\n[ramp] {report.summary()}")
            _assert_whole(report, producer)
            assert report.endings == {"response": producer.calls}, "every request answered"
            assert steps[-1].peak_outstanding <= CAP
    finally:
        sampler.cancel()
    report = await ledger.check(url=url, queues=[Topology(chaos_exchange).service_queue(SERVICE)])

    _assert_whole(report, producer)
    burst = steps[-1]
    assert burst.peak_outstanding == CAP, "the burst never reached the cap"
    assert burst.peak_waiting > 0, "no caller waited for a slot: no backpressure"
    baseline = steps[0].worker_rss
    assert max(step.worker_rss for step in steps) <= baseline + RSS_SLACK, [
        step.row() for step in steps
    ]
    assert worker.is_running


# The soak with forced reconnects.

SOAK_ROUNDS = 4
SOAK_PERIOD = 15.0  # seconds of traffic between two forced closes
RSS_FLAT = 8 * MIB  # growth allowed from the first sample after a reconnect to the last
FDS_FLAT = 2


@dataclass
class Sample:
    ended: int
    worker_rss: int
    worker_fds: int
    own_fds: int
    channels: int
    connections: int
    consumers: int

    def row(self) -> str:
        return (
            f"ended={self.ended} worker_rss={self.worker_rss / MIB:.1f}MiB "
            f"worker_fds={self.worker_fds} test_fds={self.own_fds} channels={self.channels} "
            f"connections={self.connections} consumers={self.consumers}"
        )


async def _sample(broker: PrivateBroker, queue: str, worker: AgentProcess, ended: int) -> Sample:
    listed = await asyncio.to_thread(broker.rabbitmqctl, "list_channels", "connection")
    channels = [line.split()[0] for line in listed.splitlines() if line.strip()]
    consumers = (await queue_depths(broker.url, [queue]))[queue].consumers
    return Sample(
        ended=ended,
        worker_rss=_rss(worker.pid),
        worker_fds=_fds(worker.pid),
        own_fds=_fds(os.getpid()),
        channels=len(channels),
        connections=len(set(channels)),
        consumers=consumers,
    )


@pytest.mark.timeout(240)
async def test_soak_with_forced_reconnects_stays_flat(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    open_bus: BusOpener,
    chaos_exchange: str,
    ledger: Ledger,
    tmp_path: Path,
) -> None:
    """60 s of traffic, connections force-closed every 15 s: flat RSS, fds, channels, consumers."""
    url = private_broker.url
    agent_process.env["AGENTBUS_DEDUP_PATH"] = str(tmp_path / "dedup.db")
    worker = _worker(agent_process, "worker-0", url, chaos_exchange, "chaos_agents:LedgerWorker")
    await worker.started()
    client = await open_bus(url, **FAST)
    producer = Producer(client, ledger)
    queue = Topology(chaos_exchange).service_queue(SERVICE)
    samples: list[Sample] = []
    async with steady_traffic(
        producer, lanes=4, limit=1_000_000, pause=0.01, once=True, timeout=20
    ) as ended:
        await wait_for(lambda: ended() >= 50, 20, "the traffic to flow")
        samples.append(await _sample(private_broker, queue, worker, ended()))
        loop = asyncio.get_running_loop()
        began = loop.time()
        for round_ in range(1, SOAK_ROUNDS + 1):
            # The soak's schedule, not a wait for an event: a close every SOAK_PERIOD.
            await asyncio.sleep(max(began + round_ * SOAK_PERIOD - loop.time(), 0))
            await asyncio.to_thread(private_broker.close_connections)
            await consumers_back(url, queue, 1, 10)
            floor = ended() + 20
            await wait_for(lambda: ended() >= floor, 20, "traffic after the reconnect")  # noqa: B023
            samples.append(await _sample(private_broker, queue, worker, ended()))
    report = await ledger.check(url=url, queues=[queue])

    soaked = loop.time() - began
    print("\n" + "\n".join(f"[soak] {sample.row()}" for sample in samples))
    print(f"[soak] {soaked=:.1f}s {report.summary()} retries={client.stats.publish_retries}")
    _assert_whole(report, producer)
    assert report.endings == {"response": producer.calls}, "every request answered"
    after = samples[1:]
    assert all(s.consumers == 1 for s in samples), "the consumer count drifted"
    assert len({s.channels for s in after}) == 1, "the channel count drifted"
    assert len({s.connections for s in after}) == 1, "the connection count drifted"
    assert after[-1].worker_rss - after[0].worker_rss <= RSS_FLAT
    assert after[-1].worker_fds - after[0].worker_fds <= FDS_FLAT
    assert after[-1].own_fds - after[0].own_fds <= FDS_FLAT
    assert worker.is_running


# The fan-out.

FAN_OUT = (1, 10, 100, 1_000, 10_000)
BIG = str(16 * MIB)  # a 10,000-subtask plan and its aggregate are over the 1 MiB default
DEADLINE = 2.5
DEADLINE_SLACK = 2.0  # the leader cancels running work and skips the rest within this


def _fan_out_plan(n: int) -> Plan:
    work = [{"id": f"s{i}", "skill": "work", "service": SERVICE, "timeout": 60} for i in range(n)]
    gather = {
        "id": "gather",
        "skill": "gather",
        "service": SERVICE,
        "depends_on": [f"s{i}" for i in range(n)],
        "inputs": {"keys": [f"s{i}.key" for i in range(n)]},
    }
    return Plan.model_validate({"subtasks": [*work, gather], "max_parallel": n})


def _record(ledger: Ledger, aggregate: Aggregate, skill: str = "work") -> None:
    """Record each subtask of ``skill`` as a send: confirmed if it succeeded, else failed."""
    for outcome in aggregate.subtasks:
        if outcome.skill == skill:
            succeeded = outcome.status is SubtaskStatus.SUCCEEDED
            outcome_of = SendOutcome.CONFIRMED if succeeded else SendOutcome.FAILED
            ledger.record_send(f"{aggregate.plan_id}/{outcome.id}", outcome_of)


@pytest.fixture
async def fan_out_team(
    private_broker: PrivateBroker,
    agent_process: AgentLauncher,
    chaos_exchange: str,
    ledger: Ledger,
) -> list[AgentProcess]:
    """A leader and two fan-in workers as processes (on ``ledger``), allowed 16 MiB envelopes."""
    url = private_broker.url
    agent_process.env["AGENTBUS_MAX_MESSAGE_SIZE"] = BIG
    target = "load_agents:FanInWorker"
    team = [_worker(agent_process, f"worker-{n}", url, chaos_exchange, target) for n in range(2)]
    team.append(
        agent_process.start(
            "agentbus.leader:Leader",
            *("--id", "leader-1", "--heartbeat", "1"),
            url=url,
            exchange=chaos_exchange,
        )
    )
    await asyncio.gather(*(process.started() for process in team))
    return team


@pytest.mark.timeout(240)
async def test_fan_out_of_1_to_10000_subtasks_gives_whole_aggregates(
    private_broker: PrivateBroker,
    fan_out_team: list[AgentProcess],
    open_bus: BusOpener,
    ledger: Ledger,
) -> None:
    """Plans of 1..10,000 subtasks and a fan-in: all succeed once, the fan-in sees every one."""
    client = await open_bus(private_broker.url, max_message_size=int(BIG), **FAST)
    leader_rss = []
    for n in FAN_OUT:
        plan = _fan_out_plan(n)
        began = time.monotonic()
        async with asyncio.timeout(180):
            aggregate = await PlanClient(client).run(plan, timeout=180)
        took = time.monotonic() - began
        _record(ledger, aggregate)
        leader_rss.append(_rss(fan_out_team[-1].pid))
        report = ledger.report()
        print(
            f"\n[fan-out {n}] took={took:.2f}s attempts={aggregate.totals.attempts} "
            f"leader_rss={leader_rss[-1] / MIB:.1f}MiB {report.summary()}"
        )

        assert aggregate.status is PlanStatus.COMPLETED, aggregate.error
        statuses = {outcome.status for outcome in aggregate.subtasks}
        assert statuses == {SubtaskStatus.SUCCEEDED}
        assert len(aggregate.subtasks) == n + 1
        assert aggregate.subtask("gather").result == {"count": n, "distinct": n}
        assert aggregate.totals.attempts == n + 1, "a subtask was retried"
        _assert_whole(report)
    report = await ledger.check(
        url=private_broker.url, queues=[Topology(client.settings.exchange).service_queue(SERVICE)]
    )
    _assert_whole(report)
    assert report.effects == sum(FAN_OUT)


async def test_plan_deadline_shorter_than_its_work_ends_by_the_deadline(
    private_broker: PrivateBroker,
    fan_out_team: list[AgentProcess],
    open_bus: BusOpener,
    ledger: Ledger,
) -> None:
    """A 2.5 s deadline on 6 s of work: it ends by then (+2 s), the rest cancelled or skipped."""
    client = await open_bus(private_broker.url, **FAST)
    seconds, count, parallel = 1.0, 12, 2  # 6 s of work at two at a time
    subtasks = [
        {"id": f"s{i}", "skill": "work", "service": SERVICE, "parameters": {"seconds": seconds}}
        for i in range(count)
    ]
    plan = Plan.model_validate(
        {"subtasks": subtasks, "max_parallel": parallel, "deadline": DEADLINE}
    )
    began = time.monotonic()
    async with asyncio.timeout(30):
        aggregate = await PlanClient(client).run(plan, timeout=30)
    took = time.monotonic() - began
    _record(ledger, aggregate)
    report = ledger.report()
    ran = (aggregate.ended_at - aggregate.started_at).total_seconds()
    by_status = {
        status: [o.id for o in aggregate.subtasks if o.status is status] for status in SubtaskStatus
    }
    print(
        f"\n[deadline] took={took:.2f}s leader_ran={ran:.2f}s "
        f"{ {status.value: len(ids) for status, ids in by_status.items() if ids} } "
        f"{report.summary()}"
    )

    assert count * seconds / parallel > DEADLINE + DEADLINE_SLACK, "the work must outlast it"
    assert ran <= DEADLINE + DEADLINE_SLACK
    assert aggregate.status is PlanStatus.FAILED
    assert aggregate.error is not None
    assert "deadline" in aggregate.error
    assert by_status[SubtaskStatus.SUCCEEDED], "nothing finished before the deadline"
    assert by_status[SubtaskStatus.SKIPPED], "nothing was left unstarted"
    terminal = {SubtaskStatus.SUCCEEDED, SubtaskStatus.CANCELLED, SubtaskStatus.SKIPPED}
    assert {o.status for o in aggregate.subtasks} <= terminal
    for subtask_id in by_status[SubtaskStatus.SKIPPED]:
        assert ledger.effects(f"{plan.id}/{subtask_id}") == [], "skipped work ran"
    assert report.recorded_twice == []
    assert report.lost == []
    assert report.duplicated == {}

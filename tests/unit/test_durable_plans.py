"""Durable plans on the in-memory bus: journaled, and taken over when their leader goes."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from agentbus import (
    Agent,
    ConnectionLost,
    Leader,
    PlanClient,
    RemoteError,
    Settings,
    current_request,
    skill,
)
from agentbus.bus._poison import ATTEMPT_HEADER
from agentbus.envelopes import RequestEnvelope, RequestPayload, ResponseEnvelope, encode
from agentbus.leader import PlanStatus
from agentbus.registry import Registry
from agentbus.testing import MemoryBroker, MemoryBus, MemoryMessage
from agentbus.testing._memory_journal import MemoryJournal

SETTINGS = Settings(shutdown_grace=0.2)


class Steps(Agent):
    name = "steps"
    runs: Counter[str] = Counter()
    gate: asyncio.Event = asyncio.Event()
    holding: asyncio.Event = asyncio.Event()

    @skill
    async def step(self, n: int, hold: bool = False) -> int:
        Steps.runs[current_request().message_id] += 1
        if hold:
            Steps.holding.set()
            await Steps.gate.wait()
        return n + 1


def _chain(length: int, hold_at: int | None = None) -> dict[str, object]:
    subtasks: list[dict[str, object]] = [{"id": "s0", "skill": "step", "parameters": {"n": 0}}]
    for i in range(1, length):
        subtask: dict[str, object] = {
            "id": f"s{i}",
            "skill": "step",
            "depends_on": [f"s{i - 1}"],
            "inputs": {"n": f"s{i - 1}"},
        }
        if i == hold_at:
            subtask["parameters"] = {"hold": True}
        subtasks.append(subtask)
    return {"id": "chain", "subtasks": subtasks}


@pytest.fixture(autouse=True)
def _reset() -> None:
    Steps.runs = Counter()
    Steps.gate = asyncio.Event()
    Steps.holding = asyncio.Event()


def _bus(broker: MemoryBroker, agent_id: str) -> MemoryBus:
    return MemoryBus(broker, SETTINGS, agent_id=agent_id)


@contextlib.asynccontextmanager
async def _team(broker: MemoryBroker) -> AsyncIterator[MemoryBus]:
    """A registry, a durable leader and a steps agent; the client's bus."""
    async with (
        Registry(bus=_bus(broker, "registry-1"), heartbeat_interval=0.2),
        Leader(bus=_bus(broker, "leader-1"), durable=True, heartbeat_interval=0.2),
        Steps(bus=_bus(broker, "steps-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        yield client


def _records(broker: MemoryBroker) -> list[dict[str, Any]]:
    """Every record of the leaders' journal, in order."""
    entries = broker.journals.get("agentbus.journal.plans", [])
    return [record for _, body in entries for record in orjson.loads(body)["records"]]


async def _run_durably(broker: MemoryBroker, plan: dict[str, object]) -> ResponseEnvelope:
    """A registry, a durable leader and a steps agent run ``plan`` for a client."""
    async with _team(broker) as client:
        return await client.request("leader", "run_plan", {"plan": plan}, timeout=20)


async def test_a_durable_plan_runs_as_any_and_journals_its_steps() -> None:
    """Same aggregate as without the journal; the journal holds begun, sent and settled."""
    broker = MemoryBroker()
    reply = await _run_durably(broker, _chain(3))
    assert reply.result["status"] == PlanStatus.COMPLETED.value
    assert [s["result"] for s in reply.result["subtasks"]] == [1, 2, 3]
    journal = broker.journals["agentbus.journal.plans"]
    records = [record for _, body in journal for record in orjson.loads(body)["records"]]
    kinds = Counter(record["kind"] for record in records)
    assert kinds == {"begun": 1, "sent": 3, "settled": 3, "ended": 1}
    assert not [q for q in broker.queues if ".replies.plan-" in q]  # deleted at the end


async def test_a_one_step_plan_is_two_journal_writes() -> None:
    """Its begun goes with its step's sent (nothing is sent before both are in), its step's
    settled with its ended (the answer leaves once both are in): two confirmed appends."""
    broker = MemoryBroker()
    reply = await _run_durably(broker, _chain(1))
    assert reply.result["status"] == PlanStatus.COMPLETED.value
    writes = [
        [record["kind"] for record in orjson.loads(body)["records"]]
        for _, body in broker.journals["agentbus.journal.plans"]
    ]
    assert writes == [["begun", "sent"], ["settled", "ended"]]


def _begun_queues(broker: MemoryBroker) -> dict[str, str]:
    """Each plan's reply queue, as its begun record names it, by plan id."""
    return {r["plan_id"]: r["queue"] for r in _records(broker) if r["kind"] == "begun"}


async def test_plans_one_after_another_are_answered_on_one_reply_queue() -> None:
    """An ended plan's queue serves the next plan (no queue made and deleted a plan); a
    late answer to the first plan's step reaches the queue and is dropped; the queue
    goes when the leader stops."""
    broker = MemoryBroker()
    async with _team(broker) as client:
        first = await client.request("leader", "run_plan", {"plan": _chain(1) | {"id": "p0"}})
        queue = _begun_queues(broker)["p0"]
        step = RequestEnvelope(
            message_id=f"{first.result['subtasks'][0]['id']}-late",
            sender_id="leader-1",
            receiver_id="steps",
            payload=RequestPayload(action="step"),
        )
        late = step.response(7, sender_id="steps-1")
        await client.send_reply(late, client.topology.reply_queue(queue))
        later = [
            await client.request("leader", "run_plan", {"plan": _chain(2) | {"id": f"p{n}"}})
            for n in (1, 2)
        ]
        drained = broker.message_count(client.topology.reply_queue(queue))
    assert [r.result["status"] for r in (first, *later)] == ["completed"] * 3
    assert [s["result"] for s in later[0].result["subtasks"]] == [1, 2]
    assert set(_begun_queues(broker).values()) == {queue}
    assert drained == 0
    assert not [q for q in broker.queues if ".replies.plan-" in q]  # deleted at the end


class OtherLeader(Leader):
    name = "leader-a"


async def test_an_ended_plan_delivered_again_is_answered_while_its_queue_serves_on() -> None:
    """Leader 1 ended the plan (journaled) and holds its queue for the next; the plan's
    request comes again to leader 2 (its answer was lost): leader 2 answers the journal's
    aggregate without taking the queue, which leader 1 holds."""
    broker = MemoryBroker()
    async with (
        Registry(bus=_bus(broker, "registry-1"), heartbeat_interval=0.2),
        OtherLeader(bus=_bus(broker, "leader-1"), durable=True, heartbeat_interval=0.2),
        Leader(bus=_bus(broker, "leader-2"), durable=True, heartbeat_interval=0.2),
        Steps(bus=_bus(broker, "steps-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        run_plan = RequestEnvelope(
            sender_id="client-1",
            receiver_id="leader-a",
            payload=RequestPayload(action="run_plan", parameters={"plan": _chain(2)}),
        )
        first = await client.send_request(run_plan, timeout=10)
        again = run_plan.model_copy(update={"receiver_id": "leader"})
        answer = asyncio.create_task(client.send_request(again, timeout=5, sent=True))
        message = MemoryMessage(
            encode(again), message_id=again.message_id, headers={ATTEMPT_HEADER: 2}
        )
        broker.publish(message, "agent.leader.request", exchange=client.topology.exchange)
        second = await answer
    assert second.result["status"] == first.result["status"] == "completed"
    assert [s["result"] for s in second.result["subtasks"]] == [1, 2]
    assert sorted(Steps.runs.values()) == [1, 1]  # nothing ran again


async def test_a_plan_whose_leader_goes_mid_step_is_finished_by_another_once() -> None:
    """Leader 1 goes while step 2 runs; leader 2 takes the redelivered plan from the
    journal: steps 0-1 not run again, step 2's answer taken, 3-4 run; one aggregate."""
    broker = MemoryBroker()
    async with (
        Registry(bus=_bus(broker, "registry-1"), heartbeat_interval=0.2),
        Steps(bus=_bus(broker, "steps-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        asking = await _leader_goes_mid_step(broker, client, _chain(5, hold_at=2))
        async with Leader(bus=_bus(broker, "leader-2"), durable=True, heartbeat_interval=0.2):
            Steps.gate.set()  # the step leader 1 sent now ends: its answer waits for leader 2
            reply = await asyncio.wait_for(asking, 30)
    aggregate = reply.result
    assert reply.sender_id == "leader-2"
    assert aggregate["status"] == PlanStatus.COMPLETED.value
    assert [s["result"] for s in aggregate["subtasks"]] == [1, 2, 3, 4, 5]
    assert [s["attempts"] for s in aggregate["subtasks"]] == [1] * 5
    assert sorted(Steps.runs.values()) == [1] * 5  # each step ran once, under one id each


async def test_a_step_still_running_at_the_take_over_is_not_sent_to_a_second_instance() -> None:
    """Two instances, one busy with step 2 when leader 1 goes: leader 2 waits for that
    step's answer before asking again, so the idle instance does not run it a second time
    (their de-duplication shares finished work only)."""
    broker = MemoryBroker()
    async with (
        Registry(bus=_bus(broker, "registry-1"), heartbeat_interval=0.2),
        Steps(bus=_bus(broker, "steps-1"), heartbeat_interval=0.2, concurrency=1),
        Steps(bus=_bus(broker, "steps-2"), heartbeat_interval=0.2, concurrency=1),
        _bus(broker, "client-1") as client,
    ):
        asking = await _leader_goes_mid_step(broker, client, _chain(4, hold_at=2))
        async with Leader(bus=_bus(broker, "leader-2"), durable=True, heartbeat_interval=0.2):
            await asyncio.wait_for(_journaled_begun_by(broker, "leader-2"), 10)
            for _ in range(20):  # let a copy sent at the take-over reach an idle instance
                await asyncio.sleep(0)
            Steps.gate.set()
            reply = await asyncio.wait_for(asking, 30)
    assert reply.result["status"] == PlanStatus.COMPLETED.value
    assert [s["attempts"] for s in reply.result["subtasks"]] == [1] * 4
    assert sorted(Steps.runs.values()) == [1] * 4


async def _leader_goes_mid_step(
    broker: MemoryBroker, client: MemoryBus, plan: dict[str, object]
) -> asyncio.Task[ResponseEnvelope]:
    """Leader 1 takes the plan and goes while its held step runs; the request is asked."""
    first = Leader(bus=_bus(broker, "leader-1"), durable=True, heartbeat_interval=0.2)
    await first.start()
    asking = asyncio.create_task(client.request("leader", "run_plan", {"plan": plan}, timeout=30))
    await asyncio.wait_for(Steps.holding.wait(), 10)
    await first.bus.drain(grace=0)  # its run_plan goes back to the leaders' queue
    await first.bus.aclose()
    return asking


async def _journaled_begun_by(broker: MemoryBroker, leader: str) -> None:
    while True:
        records = [
            record
            for journal in broker.journals.values()
            for _, body in journal
            for record in orjson.loads(body)["records"]
        ]
        if any(r["kind"] == "begun" and r["leader"] == leader for r in records):
            return
        await asyncio.sleep(0.01)


async def test_a_plan_s_status_while_running_after_it_ended_and_from_another_leader() -> None:
    """plan_status: running with each subtask so far; ended with the aggregate; and a
    leader that never ran it reads it from the journal."""
    broker = MemoryBroker()
    async with (
        Registry(bus=_bus(broker, "registry-1"), heartbeat_interval=0.2),
        Steps(bus=_bus(broker, "steps-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        plans = PlanClient(client)
        async with Leader(bus=_bus(broker, "leader-1"), durable=True, heartbeat_interval=0.2):
            asking = asyncio.create_task(plans.run(_chain(4, hold_at=2), timeout=30))
            await asyncio.wait_for(Steps.holding.wait(), 10)
            running = await plans.status("chain")
            Steps.gate.set()
            aggregate = await asking
            ended = await plans.status("chain")
        async with Leader(bus=_bus(broker, "leader-2"), durable=True, heartbeat_interval=0.2):
            journaled = await plans.status("chain")
            with pytest.raises(RemoteError, match="no plan 'nope' is known to leader-2"):
                await plans.status("nope")
    assert (running.state, running.leader, running.done, running.total) == (
        "running",
        "leader-1",
        2,
        4,
    )
    assert [s.status.value for s in running.subtasks] == [
        "succeeded",
        "succeeded",
        "running",
        "pending",
    ]
    assert ended.state == "ended"
    assert ended.aggregate == aggregate
    assert journaled.state == "ended"
    assert journaled.leader == "leader-1"
    assert journaled.aggregate is not None
    assert journaled.aggregate.status is PlanStatus.COMPLETED
    assert [s.result for s in journaled.aggregate.subtasks] == [1, 2, 3, 4]
    assert [s.attempts for s in journaled.aggregate.subtasks] == [1] * 4


async def test_a_request_as_a_task_is_looked_up_by_its_id_after_its_requester_went() -> None:
    """run_task: a plan of one subtask under the caller's id; the requester gone, another
    client reads the result by that id."""
    broker = MemoryBroker()
    async with (
        Registry(bus=_bus(broker, "registry-1"), heartbeat_interval=0.2),
        Steps(bus=_bus(broker, "steps-1"), heartbeat_interval=0.2),
        Leader(bus=_bus(broker, "leader-1"), heartbeat_interval=0.2),
        _bus(broker, "client-2") as other,
    ):
        async with _bus(broker, "client-1") as gone:
            asking = asyncio.create_task(
                PlanClient(gone).run_task("steps", "step", {"n": 1, "hold": True}, task_id="t-1")
            )
            await asyncio.wait_for(Steps.holding.wait(), 10)
            running = await PlanClient(other).status("t-1")
            asking.cancel()
        Steps.gate.set()
        answered = await PlanClient(other).run_task("steps", "step", {"n": 41})
        ended = await PlanClient(other).status("t-1")

    assert (running.state, running.total) == ("running", 1)
    assert ended.state == "ended"
    assert ended.aggregate is not None
    (outcome,) = ended.aggregate.subtasks
    assert (outcome.id, outcome.status.value, outcome.result) == ("task", "succeeded", 2)
    assert answered.subtask("task").result == 42
    assert answered.plan_id.startswith("plan-")


async def test_a_durable_plan_cancelled_by_request_ends_and_is_not_taken_over() -> None:
    """A cancel request for the run_plan: its requester is told ``cancelled``, the step
    running is cancelled, the journal says the plan ended, and a later leader neither
    runs it again nor reports it running."""
    broker = MemoryBroker()
    async with (
        Registry(bus=_bus(broker, "registry-1"), heartbeat_interval=0.2),
        Steps(bus=_bus(broker, "steps-1"), heartbeat_interval=0.2),
        _bus(broker, "client-1") as client,
    ):
        run_plan = RequestEnvelope(
            sender_id="client-1",
            receiver_id="leader",
            payload=RequestPayload(action="run_plan", parameters={"plan": _chain(4, hold_at=1)}),
        )
        async with Leader(bus=_bus(broker, "leader-1"), durable=True, heartbeat_interval=0.2):
            asking = asyncio.create_task(client.send_request(run_plan, timeout=30))
            await asyncio.wait_for(Steps.holding.wait(), 10)
            await client.request("leader-1", "cancel", {"message_id": run_plan.message_id})
            with pytest.raises(RemoteError) as caught:
                await asking
        async with Leader(bus=_bus(broker, "leader-2"), durable=True, heartbeat_interval=0.2):
            journaled = await PlanClient(client).status("chain")

    assert caught.value.code == "cancelled"
    assert journaled.state == "ended"
    assert journaled.leader == "leader-1"
    # s0 ran and s1 was stopped while it held; s2 and s3 never ran, under any leader.
    assert sorted(Steps.runs.values()) == [1, 1]
    assert not [q for q in broker.queues if ".replies.plan-" in q]  # its replies queue went


async def test_a_connection_lost_under_a_durable_plan_is_not_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The journal's first write fails as a reconnect longer than its wait does: the
    run_plan request goes back to the queue and runs again; it is not answered
    ``agent_unavailable``, nor is that error kept by de-duplication as its reply."""
    append = MemoryJournal.append
    lost: list[str] = []

    async def lost_once(self: MemoryJournal, record: dict[str, Any]) -> None:
        if not lost and record.get("plan"):  # the plan's first write: begun, its first step
            lost.append(str(record["plan"]))
            raise ConnectionLost("the connection to the broker was lost: injected")
        await append(self, record)

    monkeypatch.setattr(MemoryJournal, "append", lost_once)
    broker = MemoryBroker()
    reply = await _run_durably(broker, _chain(3))
    assert lost, "the loss was injected"
    assert reply.result["status"] == PlanStatus.COMPLETED.value
    assert sorted(Steps.runs.values()) == [1] * 3


async def test_a_plan_s_end_not_written_sends_its_request_back_after_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The answer goes while the plan's end is written; the write fails: the run_plan
    request is not acknowledged, runs again from the journal (its last step's answer taken
    from the plan's queue, not asked again) and ends there; the requester has its answer."""
    append = MemoryJournal.append
    lost: list[dict[str, Any]] = []
    ended = asyncio.Event()

    async def end_lost_once(self: MemoryJournal, record: dict[str, Any]) -> None:
        kinds = [r.get("kind") for r in record.get("records", ())]
        if not lost and "ended" in kinds:
            lost.append(record)
            raise ConnectionLost("the connection to the broker was lost: injected")
        await append(self, record)
        if "ended" in kinds:
            ended.set()

    monkeypatch.setattr(MemoryJournal, "append", end_lost_once)
    broker = MemoryBroker()
    async with _team(broker) as client:
        reply = await client.request("leader", "run_plan", {"plan": _chain(3)}, timeout=20)
        await asyncio.wait_for(ended.wait(), 10)
    assert lost, "the loss was injected"
    assert reply.result["status"] == PlanStatus.COMPLETED.value
    assert sorted(Steps.runs.values()) == [1] * 3  # nothing asked again
    assert [r["kind"] for r in _records(broker)].count("begun") == 2  # run again, from the journal


async def test_a_plan_s_answer_goes_while_its_end_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The write of the plan's end is held until the requester has the answer: the answer
    does not wait for it, and the request is acknowledged once it is in (not run again)."""
    append = MemoryJournal.append
    answered, ended = asyncio.Event(), asyncio.Event()

    async def end_after_the_answer(self: MemoryJournal, record: dict[str, Any]) -> None:
        the_end = "ended" in [r.get("kind") for r in record.get("records", ())]
        if the_end:
            await answered.wait()
        await append(self, record)
        if the_end:
            ended.set()

    monkeypatch.setattr(MemoryJournal, "append", end_after_the_answer)
    broker = MemoryBroker()
    async with _team(broker) as client:
        reply = await client.request("leader", "run_plan", {"plan": _chain(2)}, timeout=5)
        answered.set()
        await asyncio.wait_for(ended.wait(), 10)
        await broker.idle()
        waiting = broker.message_count("agentbus.service.leader")
    assert reply.result["status"] == PlanStatus.COMPLETED.value
    assert [r["kind"] for r in _records(broker)].count("begun") == 1  # acknowledged, not run again
    assert waiting == 0

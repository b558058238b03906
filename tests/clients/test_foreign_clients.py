"""The wire contract spoken by Node.js (amqplib) and Go (amqp091-go), against a real team.

Each test starts agentbus processes (registry, leader, workers: ``agentbus registry``,
``agentbus leader``, ``agentbus run``) on its own exchange and runs one of the example
clients (examples/clients/node/client.mjs, examples/clients/go/main.go) as a user would: a
request answered on the client's own reply queue, correlated; a plan on the leader followed
through its progress events to the aggregate; a registry event received on broadcast.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

import aio_pika
import orjson
import pytest
from clients_support import (
    LEADER,
    REGISTRY,
    WORKER,
    Finished,
    ForeignClient,
    client_command,
    finished,
    started,
)
from processes import Processes

pytestmark = [pytest.mark.clients, pytest.mark.integration]

SENT = re.compile(r"sent (\S+) on agent\.(\S+)\.request, replies to (\S+)")


@pytest.fixture(params=["node", "go"])
def client(request: pytest.FixtureRequest, procs: Processes) -> ForeignClient:
    """The Node.js or the Go client, on this test's exchange."""
    kind: str = request.param
    client_command(kind)  # skip (or fail under CI) before a team is started for nothing
    return ForeignClient(kind, procs.url, procs.exchange)


def sent_request(run: Finished, client: ForeignClient) -> tuple[str, str, str]:
    """The (message id, receiver, reply queue) of the request the client says it sent."""
    match = SENT.search(run.notes)
    assert match is not None, f"the {client.kind} client did not say what it sent:\n{run.notes}"
    message_id, receiver, queue = match.groups()
    return message_id, receiver, queue


def assert_reply_to(reply: dict[str, Any], run: Finished, client: ForeignClient) -> None:
    """``reply`` answers the request the client sent: correlated, to its sender id."""
    message_id, _, queue = sent_request(run, client)
    assert queue.startswith("amq.gen-"), queue  # its own, server-named reply queue
    assert reply["metadata"]["correlation_id"] == message_id
    assert reply["receiver_id"].startswith(f"{client.kind}-client-")


async def test_a_request_is_answered_on_the_clients_own_reply_queue(
    procs: Processes, client: ForeignClient
) -> None:
    """A skill's answer and an error reply each come back correlated to the request sent."""
    await started(procs, procs.agent("Worker", WORKER))

    ok = await client.run("request", "worker", "square", '{"n": 7}')
    assert ok.status == 0, ok.notes
    [reply] = ok.envelopes
    assert reply["message_type"] == "response"
    assert reply["payload"]["status"] == "success"
    assert reply["payload"]["result"] == 49
    assert reply["sender_id"] == WORKER
    assert_reply_to(reply, ok, client)

    bad = await client.run("request", "worker", "square", '{"n": "seven"}')
    assert bad.status == 1, bad.notes
    [error] = bad.envelopes
    assert error["message_type"] == "error"
    assert error["payload"]["code"] == "invalid_parameters"
    assert_reply_to(error, bad, client)

    # Nothing bound for the receiver: the broker returns the mandatory request at once.
    nobody = await client.run("request", "nobody", "square", '{"n": 1}')
    assert nobody.status == 2
    assert "agent_unavailable" in nobody.notes
    assert nobody.envelopes == []


async def test_a_plan_that_shapes_itself_is_sent_by_a_raw_client(
    procs: Processes, client: ForeignClient
) -> None:
    """A mapped step and a condition, in a plan a foreign client sends as JSON: the map's
    items in its progress, the results in order, the false branch skipped."""
    team = (procs.registry(REGISTRY), procs.leader(LEADER), procs.agent("Worker", WORKER))
    await started(procs, *team)
    plan = {
        "id": f"{client.kind}-shaped",
        "subtasks": [
            {"id": "n", "skill": "numbers", "parameters": {"n": 4}},
            {"id": "sq", "skill": "square", "depends_on": ["n"], "map": {"over": "n", "as": "n"}},
            {"id": "sum", "skill": "total", "depends_on": ["sq"], "inputs": {"values": "sq"}},
            {
                "id": "big",
                "skill": "square",
                "depends_on": ["sum"],
                "when": {">": [{"var": "sum"}, 100]},
                "inputs": {"n": "sum"},
            },
        ],
    }

    run = await client.run("plan", "-", stdin=orjson.dumps(plan))

    assert run.status == 0, run.notes
    *events, reply = run.envelopes
    outcomes = {o["id"]: o for o in reply["payload"]["result"]["subtasks"]}
    assert outcomes["sq"]["result"] == [0, 1, 4, 9]
    assert outcomes["sq"]["items"]["succeeded"] == 4
    assert outcomes["sum"]["result"] == 14
    assert outcomes["big"]["status"] == "skipped"
    assert outcomes["big"]["error"]["code"] == "condition_not_met"
    items = {
        t["subtask_id"]
        for event in events
        for t in event["payload"]["event_data"]["transitions"]
        if t["subtask_id"].startswith("sq[")
    }
    assert items == {f"sq[{n}]" for n in range(4)}


async def test_a_question_is_answered_by_the_node_client(procs: Processes) -> None:
    """Node.js: input_required with the question, a bad answer asked again, then the result."""
    client_command("node")
    node = ForeignClient("node", procs.url, procs.exchange)
    await started(procs, procs.agent("Worker", WORKER))

    run = await node.run("converse", "worker", "power", '{"n": 3}', "9", "2")

    assert run.status == 0, run.notes
    asked, again, done = run.envelopes
    assert asked["payload"]["status"] == "input_required"
    question = asked["payload"]["result"]
    assert question["text"] == "Which power of 3?"
    assert question["answer_schema"] == {"maximum": 5, "minimum": 0, "type": "integer"}
    assert question["service"] == "worker"
    assert_reply_to(asked, run, node)
    # 9 is over the maximum: the same question again, with why, under a new id.
    assert again["payload"]["status"] == "input_required"
    assert again["payload"]["result"]["rejected"]["answer"] == 9
    assert again["payload"]["result"]["question_id"] != question["question_id"]
    assert done["payload"] == {"status": "success", "result": 9, "error": None}
    assert "asks: Which power of 3?" in run.notes

    # An older client (1.0) is told of the question as an error it already understands.
    old = await node.run("request", "worker", "power", '{"n": 2}')
    assert old.status == 1
    [error] = old.envelopes
    assert error["payload"]["code"] == "input_required"
    assert error["payload"]["details"]["question"]["text"] == "Which power of 2?"


async def test_a_plan_is_followed_through_its_progress_to_the_aggregate(
    procs: Processes, client: ForeignClient
) -> None:
    """A plan sent to the leader: progress events in order, then the aggregate, correlated."""
    team = (procs.registry(REGISTRY), procs.leader(LEADER), procs.agent("Worker", WORKER))
    await started(procs, *team)
    squares = [{"id": f"s{n}", "skill": "square", "parameters": {"n": n}} for n in range(3)]
    plan = {
        "id": f"{client.kind}-plan",
        "subtasks": [
            *squares,
            {
                "id": "sum",
                "skill": "total",
                "depends_on": ["s0", "s1", "s2"],
                "inputs": {"values": ["s0", "s1", "s2"]},
            },
        ],
    }

    run = await client.run("plan", "-", stdin=orjson.dumps(plan))

    assert run.status == 0, run.notes
    *events, reply = run.envelopes
    assert reply["message_type"] == "response"
    assert reply["sender_id"] == LEADER
    assert_reply_to(reply, run, client)
    aggregate = reply["payload"]["result"]
    assert aggregate["plan_id"] == plan["id"]
    assert aggregate["status"] == "completed"
    outcomes = {outcome["id"]: outcome for outcome in aggregate["subtasks"]}
    assert outcomes["sum"]["result"] == 0 + 1 + 4
    # Progress came to the client (agent.<its sender id>.event), in order, up to 4 of 4 done.
    assert events, "no plan_progress event reached the client"
    assert {event["payload"]["event_name"] for event in events} == {"plan_progress"}
    assert {event["receiver_id"] for event in events} == {reply["receiver_id"]}
    transitions = [t for event in events for t in event["payload"]["event_data"]["transitions"]]
    succeeded = [t["subtask_id"] for t in transitions if t["transition"] == "succeeded"]
    assert sorted(succeeded) == ["s0", "s1", "s2", "sum"]
    assert succeeded[-1] == "sum"  # after its dependencies
    last = events[-1]["payload"]["event_data"]
    assert (last["done"], last["total"]) == (4, 4)


async def test_an_event_from_the_team_is_received_on_broadcast(
    procs: Processes, client: ForeignClient
) -> None:
    """The client hears the registry announce a worker that comes online."""
    await started(procs, procs.registry(REGISTRY))
    listener = await client.start("listen", "agent_online", "1")
    try:
        assert listener.stderr is not None
        note = await asyncio.wait_for(listener.stderr.readline(), 30)
        assert b"listening on" in note, note
        await started(procs, procs.agent("Worker", WORKER))
        out, err = await asyncio.wait_for(listener.communicate(), 30)
    finally:
        if listener.returncode is None:
            listener.kill()
            await listener.wait()
    run = finished(listener.returncode, out, note + err, 0)
    assert run.status == 0, run.notes
    [event] = run.envelopes
    assert event["message_type"] == "event"
    assert event["receiver_id"] == "broadcast"
    assert event["sender_id"] == REGISTRY
    assert event["payload"]["event_name"] == "agent_online"
    assert event["payload"]["event_data"]["agent_id"] == WORKER
    assert event["payload"]["event_data"]["service"] == "worker"


async def test_a_reply_to_another_request_is_ignored(
    procs: Processes, client: ForeignClient
) -> None:
    """A stray reply on the client's queue (another correlation id) is not taken for its own."""
    await started(procs, procs.agent("Alpha", "alpha-1"))
    caller = await client.start("request", "alpha", "slow", '{"seconds": 1}')
    try:
        assert caller.stderr is not None
        note = await asyncio.wait_for(caller.stderr.readline(), 30)
        match = SENT.search(note.decode())
        assert match is not None, note
        message_id, _, queue = match.groups()
        stray = {
            "protocol_version": "1.0",
            "sender_id": "alpha-1",
            "receiver_id": "someone",
            "message_type": "response",
            "metadata": {"correlation_id": f"not-{message_id}"},
            "payload": {"status": "success", "result": "stray", "error": None},
        }
        connection = await aio_pika.connect(procs.url)
        async with connection:
            channel = await connection.channel()
            message = aio_pika.Message(
                orjson.dumps(stray),
                content_type="application/json",
                correlation_id=f"not-{message_id}",
            )
            await channel.default_exchange.publish(message, routing_key=queue)
        out, err = await asyncio.wait_for(caller.communicate(), 30)
    finally:
        if caller.returncode is None:
            caller.kill()
            await caller.wait()
    run = finished(caller.returncode, out, note + err, 0)
    assert run.status == 0, run.notes
    [reply] = run.envelopes
    assert reply["payload"]["result"] == "slept 1s"
    assert reply["metadata"]["correlation_id"] == message_id


async def test_the_node_client_reads_an_artifact_by_the_wire_contract(
    procs: Processes, tmp_path: Any
) -> None:
    """Node.js: an agent's 3 MB artifact, read off its stream by amqplib alone, checked."""
    client_command("node")
    node = ForeignClient("node", procs.url, procs.exchange)
    await started(procs, procs.agent("Maker", "maker-1"))
    bus = await procs.client()
    made = await bus.request("maker", "make", {"size": 3_000_000, "reader": "node"}, timeout=30)
    reference = made.result["artifact"]
    path = tmp_path / "artifact.bin"

    run = await node.run("artifact", orjson.dumps(reference).decode(), str(path))

    assert run.status == 0, run.notes
    [read] = run.envelopes
    assert read == {
        "id": reference["id"],
        "size": 3_000_000,
        "sha256": reference["sha256"],
        "verified": True,
    }
    assert hashlib.sha256(path.read_bytes()).hexdigest() == reference["sha256"]

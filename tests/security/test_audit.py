"""The audit trail on a RabbitMQ stream: one record per admitted request and per refusal,
replayable by a reader that stops and starts again, and off when turned off."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import aio_pika
import orjson
import pytest

import agentbus
from agentbus import RequestEnvelope, Settings
from agentbus.bus import Refusal, read_audit
from agentbus.envelopes import RequestPayload, encode
from agentbus.security import AuditEntry
from agentbus.testing.chaos import PrivateBroker
from support.waiting import wait_until

pytestmark = pytest.mark.security

WAIT = 10.0
RECORD_KEYS = {
    "v",
    "at",
    "kind",
    "recorder",
    "sender_id",
    "user_id",
    "message_type",
    "action",
    "receiver",
    "outcome",
    "duration_ms",
    "message_id",
    "plan_id",
}


async def _all(settings: Settings, **options: Any) -> list[AuditEntry]:
    return [entry async for entry in read_audit(settings, idle=1.0, **options)]


async def _copy_to(url: str, exchange: str, sender: str) -> str:
    """Publish a CC'd request to ``svc`` as a foreign client; return its message id."""
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel()
        target = await channel.get_exchange(exchange, ensure=False)
        request = RequestEnvelope(
            sender_id=sender, receiver_id="svc", payload=RequestPayload(action="go")
        )
        message = aio_pika.Message(
            encode(request),
            message_id=request.message_id,
            headers={"CC": ["agent.other.request"]},
        )
        await target.publish(message, "agent.svc.request")
    finally:
        await connection.close()
    return request.message_id


async def _garbage_to(url: str, exchange: str) -> str:
    """Publish a JSON object that is no envelope to ``svc``; return its AMQP message id."""
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel()
        target = await channel.get_exchange(exchange, ensure=False)
        message_id = f"garbage-{secrets.token_hex(4)}"
        body = orjson.dumps({"sender_id": "cli-1", "payload": [1, 2]})
        await target.publish(aio_pika.Message(body, message_id=message_id), "agent.svc.request")
    finally:
        await connection.close()
    return message_id


async def test_one_record_per_request_and_refusal_replayable_after_a_restart(
    tls_node: PrivateBroker,
) -> None:
    """7 requests (one failing), 2 refusals, 1 undecodable: 10 records, read again in parts."""
    settings = Settings(url=tls_node.url, exchange=f"audit-{secrets.token_hex(3)}", audit=True)
    began = datetime.now(UTC)

    async def handler(request: RequestEnvelope) -> str:
        if request.payload.parameters.get("fail"):
            raise agentbus.InvalidParameters("no")
        return "ok"

    async with (
        agentbus.Bus(settings, agent_id="svc-1") as server,
        agentbus.Bus(settings.model_copy(update={"audit": False}), agent_id="cli-1") as client,
    ):
        await server.serve(handler, service="svc")
        sent = [await client.send_request(_request(), timeout=WAIT) for _ in range(6)]
        failing = _request(fail=True)
        with pytest.raises(agentbus.RemoteError, match="invalid_parameters"):
            await client.send_request(failing, timeout=WAIT)
        refused = [await _copy_to(tls_node.url, settings.exchange, "cli-1") for _ in range(2)]
        garbage = await _garbage_to(tls_node.url, settings.exchange)
        await wait_until(lambda: server.stats.refused == 2, WAIT)
        await wait_until(lambda: server.stats.dead_lettered == 3, WAIT)

    entries = await _all(settings)
    records = [entry.record for entry in entries]
    requests = {r["message_id"]: r for r in records if r["kind"] == "request"}
    refusals = {r["message_id"]: r for r in records if r["kind"] == "refusal"}
    assert len(records) == 10, "exactly one record each"
    assert set(requests) == {r.metadata.correlation_id for r in sent} | {failing.message_id}
    assert set(refusals) == {*refused, garbage}
    assert refusals[garbage]["outcome"] == "invalid_envelope"
    assert all(set(r) == RECORD_KEYS for r in records), "no parameters, no results"
    assert [r["outcome"] for r in requests.values()].count("success") == 6
    assert requests[failing.message_id]["outcome"] == "invalid_parameters"
    assert {refusals[m]["outcome"] for m in refused} == {Refusal.CARBON_COPY.value}
    assert all(r["recorder"] == "svc-1" for r in records)
    assert all(r["action"] == "go" for r in records if r["message_id"] != garbage)
    assert all(r["duration_ms"] is not None for r in requests.values())
    positions = [entry.position for entry in entries]
    assert positions == sorted(positions)
    assert len(set(positions)) == 10

    # A reader that read 4 and stopped starts again after its last record: the rest.
    first = await _all(settings, limit=4)
    rest = await _all(settings, after=first[-1].position)
    assert [e.record for e in first + rest] == records
    # From a time: everything after the run began, nothing from the future.
    assert len(await _all(settings, start=began - timedelta(seconds=1))) == 10
    assert await _all(settings, start="next") == []


def _request(**parameters: Any) -> RequestEnvelope:
    return RequestEnvelope(
        sender_id="cli-1",
        receiver_id="svc",
        payload=RequestPayload(action="go", parameters=parameters),
    )


async def test_the_cli_tails_the_stream(tls_node: PrivateBroker) -> None:
    """``agentbus audit --from first --count 1`` prints the first record as JSON."""
    settings = Settings(url=tls_node.url, exchange=f"audit-{secrets.token_hex(3)}", audit=True)

    async def handler(request: RequestEnvelope) -> str:
        return "ok"

    async with agentbus.Bus(settings, agent_id="svc-1") as server:
        await server.serve(handler, service="svc")
        reply = await server.request("svc", "go", timeout=WAIT)
    command = [sys.executable, "-m", "agentbus", "--url", tls_node.url]
    command += ["--exchange", settings.exchange, "audit", "--from", "first", "--count", "1"]
    done = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, check=True, timeout=60
    )
    line = orjson.loads(done.stdout)
    assert line["offset"] == 0
    assert line["message_id"] == reply.metadata.correlation_id
    assert line["outcome"] == "success"


async def test_audit_off_writes_nothing_and_no_stream_means_off(tls_node: PrivateBroker) -> None:
    """audit=False writes nothing; the default writes only where the stream exists."""
    exchange = f"audit-{secrets.token_hex(3)}"
    settings = Settings(url=tls_node.url, exchange=exchange)

    async def handler(request: RequestEnvelope) -> str:
        return "ok"

    async with agentbus.Bus(settings, agent_id="svc-1") as server:  # no stream: off
        await server.serve(handler, service="svc")
        await server.request("svc", "go", timeout=WAIT)
    with pytest.raises(agentbus.ConfigurationError, match="no audit stream"):
        await _all(settings)
    async with agentbus.Bus(settings.model_copy(update={"audit": True}), agent_id="mk-1"):
        pass  # makes the stream
    off = settings.model_copy(update={"audit": False})
    async with agentbus.Bus(off, agent_id="svc-1") as server:
        await server.serve(handler, service="svc")
        await server.request("svc", "go", timeout=WAIT)
    async with agentbus.Bus(settings, agent_id="svc-1") as server:  # stream there: on
        await server.serve(handler, service="svc")
        await server.request("svc", "go", timeout=WAIT)
    assert len(await _all(settings)) == 1


async def test_records_batched_under_load_are_each_read_once(tls_node: PrivateBroker) -> None:
    """200 requests at once: records share stream messages, yet each is read exactly once,
    and a reader that stops in the middle of a message reads on from the next record."""
    settings = Settings(url=tls_node.url, exchange=f"audit-{secrets.token_hex(3)}", audit=True)

    async def handler(request: RequestEnvelope) -> str:
        return "ok"

    async with agentbus.Bus(settings, agent_id="svc-1") as server:
        await server.serve(handler, service="svc", prefetch=64)
        async with agentbus.Bus(settings.model_copy(update={"audit": False})) as client:
            replies = await asyncio.gather(
                *(client.request("svc", "go", timeout=WAIT) for _ in range(200))
            )

    entries = await _all(settings)
    ids = [entry.record["message_id"] for entry in entries]
    assert sorted(ids) == sorted(reply.metadata.correlation_id for reply in replies)
    assert len({entry.offset for entry in entries}) < 200, "some records shared a message"
    shared = next(e for e in entries if e.index == 1)  # the second record of a message
    resumed = await _all(settings, after=shared.position)
    assert [e.record for e in resumed] == [e.record for e in entries[entries.index(shared) + 1 :]]

"""The SECURITY row of RELIABILITY.md, on a private RabbitMQ node with users of its own.

Each case sends what an attacker (a foreign client on raw aio-pika, logged in as a broker
user of its own) could send, and a legitimate request where it helps; the ledger then
shows effects exactly where expected and nowhere else, and the counters show the refusal.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from chaos_support import until
from fault_support import SERVICE, Producer, Team

import agentbus
from agentbus import AccessRefused, Settings
from agentbus.bus import Refusal, Topology
from agentbus.envelopes import (
    ErrorEnvelope,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    ResponsePayload,
    ResponseStatus,
)
from agentbus.testing.chaos import Ledger, PrivateBroker, SendOutcome
from support.broker import next_reply, publish_raw

pytestmark = pytest.mark.chaos

WAIT = 10.0  # seconds any one delivery may take to arrive


@dataclass(frozen=True, slots=True)
class User:
    """A broker user of this test: its name and AMQP URL."""

    name: str
    url: str


@pytest.fixture
async def team(users: Any) -> AsyncIterator[Team]:
    """In-process agents, stopped after the test (before its users are deleted)."""
    agents = Team()
    yield agents
    await agents.aclose()


@pytest.fixture
def users(private_broker: PrivateBroker) -> Iterator[Any]:
    """Create broker users (unique names) on the private node; delete them afterwards."""
    made: list[str] = []

    def add(prefix: str, **permissions: str) -> User:
        name = f"{prefix}{secrets.token_hex(3)}"
        url = private_broker.add_user(name, secrets.token_hex(8), **permissions)
        made.append(name)
        return User(name, url)

    yield add
    for name in made:
        private_broker.delete_user(name)


@pytest.fixture
async def raw() -> AsyncIterator[Any]:
    """Open raw aio-pika connections (a foreign client); close them afterwards."""
    connections: list[aio_pika.abc.AbstractConnection] = []

    async def connect(url: str) -> aio_pika.abc.AbstractChannel:
        connection = await aio_pika.connect(url)
        connections.append(connection)
        return await connection.channel()

    yield connect
    for connection in connections:
        await connection.close()


def _request(sender: str, receiver: str = SERVICE) -> RequestEnvelope:
    return RequestEnvelope(
        sender_id=sender,
        receiver_id=receiver,
        payload=RequestPayload(action="work", parameters={}),
    )


async def _reply_queue(channel: aio_pika.abc.AbstractChannel) -> aio_pika.abc.AbstractQueue:
    return await channel.declare_queue("", exclusive=True)


async def _verified_workers(
    team: Team, users: Any, private_broker: PrivateBroker, exchange: str, ledger: Ledger
) -> tuple[User, list[Any]]:
    worker_user = users("w")
    config = Settings(url=worker_user.url, exchange=exchange, verify_sender=True)
    workers = await team.workers(2, config, ledger, prefix=worker_user.name)
    return worker_user, workers


async def test_sender_id_of_another_agent_is_refused(
    private_broker: PrivateBroker,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
    users: Any,
    raw: Any,
) -> None:
    """verify_sender: user A sending as "b" is refused (unauthorized), counted; no effect."""
    _, workers = await _verified_workers(team, users, private_broker, chaos_exchange, ledger)
    client_user = users("c")
    client = await agentbus.Bus(
        Settings(url=client_user.url, exchange=chaos_exchange, verify_sender=True),
        agent_id=f"{client_user.name}-1",
    ).open()
    attacker = users("a")
    channel = await raw(attacker.url)
    replies = await _reply_queue(channel)
    try:
        forged = _request(sender="b")
        await publish_raw(
            channel,
            chaos_exchange,
            forged,
            f"agent.{SERVICE}.request",
            user_id=attacker.name,  # the broker checks it is the connection's user
            reply_to=replies.name,
        )
        ledger.record_send(forged.message_id, SendOutcome.FAILED, detail="forged sender")
        answer = await next_reply(replies, WAIT)
        honest = await Producer(client, ledger).call(timeout=WAIT)
    finally:
        await client.aclose()

    report = ledger.report()
    assert isinstance(answer, ErrorEnvelope)
    assert answer.payload.code == "unauthorized"
    assert answer.payload.details == {"reason": Refusal.SENDER_MISMATCH}
    assert honest is not None, "a request from a verified sender is served"
    assert sum(w.bus.stats.refused_by[Refusal.SENDER_MISMATCH] for w in workers) == 1
    await until(lambda: sum(w.bus.stats.dead_lettered for w in workers) == 1, WAIT, "dead-letter")
    assert report.effects == 1
    assert report.failed_with_effect == []
    assert report.unexpected == []
    assert report.duplicated == {}


async def test_a_message_without_user_id_is_refused(
    private_broker: PrivateBroker,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
    users: Any,
    raw: Any,
) -> None:
    """verify_sender: a request without user_id is refused and counted; no effect."""
    _, workers = await _verified_workers(team, users, private_broker, chaos_exchange, ledger)
    attacker = users("a")
    channel = await raw(attacker.url)
    replies = await _reply_queue(channel)
    anonymous = _request(sender=attacker.name)
    await publish_raw(
        channel, chaos_exchange, anonymous, f"agent.{SERVICE}.request", reply_to=replies.name
    )
    ledger.record_send(anonymous.message_id, SendOutcome.FAILED, detail="no user_id")
    answer = await next_reply(replies, WAIT)

    report = ledger.report()
    assert isinstance(answer, ErrorEnvelope)
    assert answer.payload.details == {"reason": Refusal.MISSING_USER_ID}
    assert sum(w.bus.stats.refused_by[Refusal.MISSING_USER_ID] for w in workers) == 1
    assert sum(w.bus.stats.requests_served for w in workers) == 0
    assert report.effects == 0
    assert report.unexpected == []


async def test_a_forbidden_routing_key_raises_access_refused_and_the_bus_goes_on(
    private_broker: PrivateBroker,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
    users: Any,
) -> None:
    """Topic permissions: a forbidden key raises AccessRefused; allowed keys work after it."""
    workers = await team.workers(
        1, Settings(url=private_broker.url, exchange=chaos_exchange), ledger
    )
    client_user = users("c")
    private_broker.set_topic_permissions(
        client_user.name,
        chaos_exchange,
        write=rf"^agent\.({SERVICE}|{{username}}-[^.]+)\.request$",
    )
    client = await agentbus.Bus(
        # The worker is guest, whose replies carry no user_id: this client does not verify.
        Settings(
            url=client_user.url,
            exchange=chaos_exchange,
            reconnect_interval=0.5,
            verify_sender=False,
        ),
        agent_id=f"{client_user.name}-1",
    ).open()
    producer = Producer(client, ledger)
    try:
        forbidden = _request(sender=client.agent_id, receiver="admin")
        with pytest.raises(AccessRefused) as refused:
            await client.publish(forbidden, timeout=WAIT)
        ledger.record_send(forbidden.message_id, SendOutcome.FAILED, detail="access refused")
        after = [await producer.call(timeout=WAIT) for _ in range(3)]
    finally:
        await client.aclose()

    report = ledger.report()
    assert refused.value.code == "unauthorized"
    assert "agent.admin.request" in refused.value.message
    assert all(reply is not None for reply in after), "allowed keys work after the refusal"
    assert report.effects == 3
    assert report.failed_with_effect == []
    assert report.unexpected == []
    assert report.duplicated == {}
    assert workers[0].bus.stats.refused == 0


@pytest.mark.parametrize("header", ["CC", "BCC"])
async def test_a_carbon_copy_reaches_no_handler_it_should_not(
    private_broker: PrivateBroker,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
    users: Any,
    raw: Any,
    header: str,
) -> None:
    """A request allowed to the worker, copied by CC/BCC to "victim": no effect at the victim.

    CC: both receivers see the header and refuse. BCC: the broker strips the header, so
    the worker serves the message it was allowed to get; the victim's copy carries the
    worker's routing key and is refused on it.
    """
    (worker,) = await team.workers(
        1, Settings(url=private_broker.url, exchange=chaos_exchange), ledger
    )
    victim = await agentbus.Bus(
        Settings(url=private_broker.url, exchange=chaos_exchange), agent_id="victim-1"
    ).open()

    async def victim_handler(request: RequestEnvelope) -> str:
        ledger.record_effect(request.message_id, "victim-1")
        return "done"

    await victim.serve(victim_handler, service="victim")
    attacker = users("a")
    private_broker.set_topic_permissions(
        attacker.name, chaos_exchange, write=rf"^agent\.{SERVICE}\.request$"
    )
    channel = await raw(attacker.url)
    try:
        for receiver in (SERVICE, "victim"):  # the copy is addressed either way
            copied = _request(sender=attacker.name, receiver=receiver)
            await publish_raw(
                channel,
                chaos_exchange,
                copied,
                f"agent.{SERVICE}.request",
                headers={header: ["agent.victim.request"]},
            )
            ledger.record_send(copied.message_id, SendOutcome.UNKNOWN, detail=header)
        await until(lambda: victim.stats.refused == 2, WAIT, "the victim's copies refused")
        expected_at_worker = 1 if header == "BCC" else 0  # the one addressed to it, uncopied
        await until(
            lambda: worker.bus.stats.refused + worker.bus.stats.requests_served == 2,
            WAIT,
            "the worker's deliveries handled",
        )
        await until(
            lambda: (
                victim.stats.dead_lettered == 2
                and worker.bus.stats.dead_lettered == worker.bus.stats.refused
            ),
            WAIT,
            "refused deliveries dead-lettered",
        )
    finally:
        await victim.aclose()

    effects = ledger.effects()
    assert [agent for _, agent in effects if agent == "victim-1"] == [], "no effect at victim"
    assert len(effects) == expected_at_worker
    assert worker.bus.stats.requests_served == expected_at_worker
    if header == "CC":
        assert victim.stats.refused_by == {Refusal.CARBON_COPY: 2}
        assert worker.bus.stats.refused_by == {Refusal.CARBON_COPY: 2}
    else:
        assert victim.stats.refused_by == {Refusal.ROUTING_KEY: 1, Refusal.RECEIVER: 1}
        assert worker.bus.stats.refused_by == {Refusal.ROUTING_KEY: 1}
    assert victim.stats.dead_lettered == 2
    assert ledger.report().unexpected == []


async def test_a_replayed_request_has_no_second_effect(
    private_broker: PrivateBroker,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
    raw: Any,
    tmp_path: Path,
) -> None:
    """The same request published again after it completed: answered from the store, once."""
    config = Settings(
        url=private_broker.url, exchange=chaos_exchange, dedup_path=str(tmp_path / "dedup.db")
    )
    workers = await team.workers(2, config, ledger)
    client = await agentbus.Bus(config.model_copy(update={"dedup_path": None})).open()
    try:
        request = _request(sender=client.agent_id)
        reply = await client.send_request(request, timeout=WAIT)
        ledger.record_send(request.message_id, SendOutcome.CONFIRMED, detail="response")
        channel = await raw(private_broker.url)
        for _ in range(2):
            await publish_raw(channel, chaos_exchange, request, f"agent.{SERVICE}.request")
        await until(
            lambda: sum(w.bus.stats.duplicates for w in workers) == 2, WAIT, "replays answered"
        )
        # The stored reply goes to the original requester, who is no longer waiting.
        await until(
            lambda: client.stats.unknown_replies + client.stats.late_replies == 2,
            WAIT,
            "the stored replies dropped by the requester",
        )
    finally:
        await client.aclose()

    report = ledger.report()
    assert isinstance(reply, ResponseEnvelope)
    assert report.effects == 1
    assert report.duplicated == {}
    assert report.lost == []
    assert sum(w.bus.stats.requests_served for w in workers) == 1


async def test_a_reply_with_an_unknown_correlation_id_is_dropped_and_counted(
    private_broker: PrivateBroker,
    chaos_exchange: str,
    ledger: Ledger,
    team: Team,
    raw: Any,
) -> None:
    """A response to nothing this client asked: dropped, counted, nothing else happens."""
    (worker,) = await team.workers(
        1, Settings(url=private_broker.url, exchange=chaos_exchange), ledger
    )
    client = await agentbus.Bus(
        Settings(url=private_broker.url, exchange=chaos_exchange), agent_id="client-1"
    ).open()
    try:
        stray = ResponseEnvelope(
            sender_id=worker.id,
            receiver_id=client.agent_id,
            payload=ResponsePayload(status=ResponseStatus.SUCCESS, result=1),
            metadata=Metadata(correlation_id=str(uuid.uuid4())),
        )
        channel = await raw(private_broker.url)
        await publish_raw(channel, chaos_exchange, stray, f"agent.{client.agent_id}.response")
        await until(lambda: client.stats.unknown_replies == 1, WAIT, "the stray reply dropped")
        honest = await Producer(client, ledger).call(timeout=WAIT)
        queue = Topology(chaos_exchange).dead_letter_queue
    finally:
        await client.aclose()

    report = await ledger.check(url=private_broker.url, queues=[queue])
    assert honest is not None
    assert client.stats.replies_matched == 1
    assert client.stats.refused == 0
    assert client.stats.dead_lettered == 0
    assert sum(client.stats.errors_sent.values()) == 0
    assert report.effects == 1
    assert report.unexpected == []
    assert report.residue == {queue: 0}, "nothing dead-lettered"

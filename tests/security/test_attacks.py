"""The attack table, across hosts: each attack on a TLS node with generated permissions.

The attacker is a foreign client (raw aio-pika) logged in with a certificate of its own,
allowed what the generated definitions give it (``mallory`` may call ``work``), or a
legitimate user misbehaving (``caller``). Each attack is refused, by the broker or by the
receiver's admission, counted where it is refused, and nothing runs. The TLS-level
attacks (plain connection, unknown CA, no client certificate, revoked user) are in
test_tls.py.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aio_pika
import aiormq.exceptions
import pytest
from security_support import SecuredTeam

import agentbus
from agentbus import RequestEnvelope
from agentbus.bus import Refusal, Topology
from agentbus.envelopes import (
    ErrorEnvelope,
    Metadata,
    RequestPayload,
    ResponseEnvelope,
    ResponsePayload,
    ResponseStatus,
)
from support.broker import next_reply, publish_raw
from support.waiting import wait_until

pytestmark = pytest.mark.security

WAIT = 10.0


@dataclass
class Served:
    """A bus serving a service, and the requests its handler ran."""

    bus: agentbus.Bus
    ran: list[str] = field(default_factory=list)


@pytest.fixture
async def work(secured_team: SecuredTeam) -> AsyncIterator[Served]:
    """Service ``work``, instance ``work-1``, verifying senders (the default for its user)."""
    async with agentbus.Bus(secured_team.settings("work"), agent_id="work-1") as bus:
        served = Served(bus)

        async def handler(request: RequestEnvelope) -> str:
            served.ran.append(request.message_id)
            return "done"

        await bus.serve(handler, service="work")
        yield served


@pytest.fixture
async def admin(secured_team: SecuredTeam) -> AsyncIterator[Served]:
    """Service ``admin``, which nobody but its own user may call."""
    async with agentbus.Bus(secured_team.settings("admin"), agent_id="admin-1") as bus:
        served = Served(bus)

        async def handler(request: RequestEnvelope) -> str:
            served.ran.append(request.message_id)
            return "done"

        await bus.serve(handler, service="admin")
        yield served


Connect = Callable[[str], Awaitable[aio_pika.abc.AbstractChannel]]


@pytest.fixture
async def raw(secured_team: SecuredTeam) -> AsyncIterator[Connect]:
    """Open raw aio-pika channels over TLS as a user (EXTERNAL); close them afterwards."""
    connections: list[aio_pika.abc.AbstractConnection] = []

    async def connect(user: str) -> aio_pika.abc.AbstractChannel:
        connection = await aio_pika.connect(
            f"{secured_team.node.tls_url()}?auth=external",
            ssl_context=secured_team.ssl_context(user),
        )
        connections.append(connection)
        return await connection.channel()

    yield connect
    for connection in connections:
        await connection.close()


def _request(sender: str, receiver: str = "work") -> RequestEnvelope:
    return RequestEnvelope(
        sender_id=sender, receiver_id=receiver, payload=RequestPayload(action="go")
    )


async def _own_queue(
    channel: aio_pika.abc.AbstractChannel, team: SecuredTeam, agent_id: str
) -> aio_pika.abc.AbstractQueue:
    """The attacker's own instance queue (the only queues it may declare)."""
    name = Topology(team.exchange).instance_queue(agent_id)
    return await channel.declare_queue(name, exclusive=True)


@pytest.mark.parametrize(
    ("user", "sender", "reason"),
    [
        pytest.param("mallory", "caller-1", Refusal.SENDER_MISMATCH, id="forged-sender-id"),
        pytest.param("mallory", "mallory-1", Refusal.MISSING_USER_ID, id="missing-user-id"),
        pytest.param("caller", "caller-eu-1", Refusal.SENDER_MISMATCH, id="borrowed-prefix"),
    ],
)
async def test_a_request_in_someone_elses_name_is_refused(
    secured_team: SecuredTeam,
    work: Served,
    raw: Connect,
    user: str,
    sender: str,
    reason: Refusal,
) -> None:
    """user_id is the identity: a sender_id not of it, or no user_id, is refused unrun."""
    channel = await raw(user)
    replies = await _own_queue(channel, secured_team, f"{user}-9")
    request = _request(sender)
    identity = {} if reason is Refusal.MISSING_USER_ID else {"user_id": user}
    await publish_raw(
        channel,
        secured_team.exchange,
        request,
        "agent.work.request",
        reply_to=replies.name,
        **identity,
    )
    answer = await next_reply(replies, WAIT)

    assert isinstance(answer, ErrorEnvelope)
    assert answer.payload.code == "unauthorized"
    assert answer.payload.details == {"reason": reason}
    assert work.bus.stats.refused_by == {reason: 1}
    assert work.ran == []


async def test_a_request_on_a_key_the_user_may_not_write_is_refused_by_the_broker(
    secured_team: SecuredTeam, admin: Served, raw: Connect
) -> None:
    """mallory may call work only: the broker closes its channel on agent.admin.request."""
    channel = await raw("mallory")
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as refused:
        await publish_raw(
            channel,
            secured_team.exchange,
            _request("mallory-1", "admin"),
            "agent.admin.request",
            user_id="mallory",
        )
    assert "agent.admin.request" in str(refused.value)
    assert admin.ran == []
    assert admin.bus.stats.consumed == 0


@pytest.mark.parametrize("target", ["service", "instance", "binding"])
async def test_reading_another_agents_queue_is_refused_by_the_broker(
    secured_team: SecuredTeam, work: Served, raw: Connect, target: str
) -> None:
    """mallory can neither consume work's queues nor bind its own queue to work's keys."""
    channel = await raw("mallory")
    topology = Topology(secured_team.exchange)

    async def attempt() -> None:
        if target == "binding":
            own = await _own_queue(channel, secured_team, "mallory-9")
            await own.bind(secured_team.exchange, "agent.work.request")
            return
        name = topology.service_queue("work") if target == "service" else None
        queue = await channel.get_queue(name or topology.instance_queue("work-1"), ensure=False)
        await queue.get(no_ack=True, fail=False)

    with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as refused:
        await attempt()
    assert "ACCESS_REFUSED" in str(refused.value)
    assert work.bus.stats.consumed == 0


async def test_a_carbon_copy_to_a_forbidden_key_is_refused_by_both_receivers(
    secured_team: SecuredTeam, work: Served, admin: Served, raw: Connect
) -> None:
    """A request on an allowed key, CC'd to admin's: both copies refused, neither runs."""
    channel = await raw("mallory")
    await publish_raw(
        channel,
        secured_team.exchange,
        _request("mallory-1"),
        "agent.work.request",
        user_id="mallory",
        headers={"CC": ["agent.admin.request"]},
    )
    await wait_until(lambda: admin.bus.stats.refused == 1, WAIT)
    await wait_until(lambda: work.bus.stats.refused == 1, WAIT)
    assert admin.bus.stats.refused_by == {Refusal.CARBON_COPY: 1}
    assert work.bus.stats.refused_by == {Refusal.CARBON_COPY: 1}
    assert admin.ran == work.ran == []


async def test_a_replayed_request_runs_once(
    secured_team: SecuredTeam, work: Served, raw: Connect
) -> None:
    """The caller's request published again, twice: answered from the store, run once."""
    async with agentbus.Bus(secured_team.settings("caller"), agent_id="caller-1") as client:
        request = _request("caller-1")
        reply = await client.send_request(request, timeout=WAIT)
        channel = await raw("caller")
        for _ in range(2):
            await publish_raw(
                channel, secured_team.exchange, request, "agent.work.request", user_id="caller"
            )
        await wait_until(lambda: work.bus.stats.duplicates == 2, WAIT)
        await wait_until(lambda: work.bus.stats.requests_served == 1, WAIT)

    assert isinstance(reply, ResponseEnvelope)
    assert work.ran == [request.message_id]


@pytest.mark.parametrize(
    ("sender", "counter"),
    [
        pytest.param("work-1", "refused", id="posing-as-the-service"),
        pytest.param("mallory-1", "unknown_replies", id="as-itself"),
    ],
)
async def test_a_stray_reply_injected_into_a_requesters_queue_is_dropped(
    secured_team: SecuredTeam, work: Served, raw: Connect, sender: str, counter: str
) -> None:
    """mallory writes a reply straight into caller-1's queue: refused or dropped, counted."""
    async with agentbus.Bus(secured_team.settings("caller"), agent_id="caller-1") as client:
        stray = ResponseEnvelope(
            sender_id=sender,
            receiver_id="caller-1",
            payload=ResponsePayload(status=ResponseStatus.SUCCESS, result="forged"),
            metadata=Metadata(correlation_id=str(uuid.uuid4())),
        )
        channel = await raw("mallory")
        queue = Topology(secured_team.exchange).instance_queue("caller-1")
        await publish_raw(channel, "", stray, queue, user_id="mallory")
        await wait_until(lambda: getattr(client.stats, counter) == 1, WAIT)
        honest = await client.request("work", "go", timeout=WAIT)

    assert honest.result == "done"
    assert client.stats.replies_matched == 1
    if counter == "refused":
        assert client.stats.refused_by == {Refusal.SENDER_MISMATCH: 1}


async def test_a_sender_over_its_rate_is_refused_and_others_are_served(
    secured_team: SecuredTeam, raw: Connect
) -> None:
    """mallory floods work (burst 2): the rest answered rate_limited; caller still served."""
    settings = secured_team.settings("work", rate_limit=0.2, rate_burst=2)
    ran: list[str] = []

    async def handler(request: RequestEnvelope) -> str:
        ran.append(request.sender_id)
        return "done"

    async with (
        agentbus.Bus(settings, agent_id="work-2") as server,
        agentbus.Bus(secured_team.settings("caller"), agent_id="caller-2") as client,
    ):
        await server.serve(handler, service="work")
        channel = await raw("mallory")
        replies = await _own_queue(channel, secured_team, "mallory-8")
        for _ in range(5):
            await publish_raw(
                channel,
                secured_team.exchange,
                _request("mallory-8"),
                "agent.work.request",
                user_id="mallory",
                reply_to=replies.name,
            )
        answers = [await next_reply(replies, WAIT) for _ in range(5)]
        honest = await client.request("work", "go", timeout=WAIT)

    codes = sorted(a.payload.code if isinstance(a, ErrorEnvelope) else "ok" for a in answers)
    assert codes == ["ok", "ok", "rate_limited", "rate_limited", "rate_limited"]
    assert honest.result == "done"
    assert ran == ["mallory-8", "mallory-8", "caller-2"]
    assert server.stats.rate_limited == 3

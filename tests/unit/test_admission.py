"""Admission of deliveries: CC/BCC, routing keys, receivers and the sender's identity."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from agentbus import ConfigurationError, Metrics, Settings
from agentbus.envelopes import (
    BROADCAST,
    Envelope,
    EventEnvelope,
    EventPayload,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    ResponsePayload,
    ResponseStatus,
    encode,
)
from agentbus.security import Refusal, publisher_user_id, refusal, verifies_sender
from agentbus.security._admission import connection_user, sent_by
from agentbus.testing import MemoryBroker, MemoryBus, MemoryMessage
from support.waiting import wait_until


@dataclass(frozen=True, slots=True)
class Delivery:
    routing_key: str | None
    headers: Mapping[str, object] | None = None
    user_id: str | None = None


def _request(receiver: str = "svc", sender: str = "alice-1", action: str = "go") -> RequestEnvelope:
    return RequestEnvelope(
        sender_id=sender, receiver_id=receiver, payload=RequestPayload(action=action)
    )


def _check(
    delivery: Delivery, envelope: Envelope, *, shared: bool = True, verify: bool = False
) -> Refusal | None:
    return refusal(
        delivery,
        envelope,
        agent_id="svc-1",
        service="svc",
        shared=shared,
        verify_sender=verify,
        broadcast_actions={"go"},
    )


@pytest.mark.parametrize(
    ("delivery", "envelope", "shared", "expected"),
    [
        pytest.param(Delivery("agent.svc.request"), _request(), True, None, id="service"),
        pytest.param(Delivery("agent.svc-1.request"), _request("svc-1"), False, None, id="inst"),
        pytest.param(
            Delivery("broadcast.request.go"), _request(BROADCAST), False, None, id="broadcast"
        ),
        pytest.param(
            Delivery("agent.svc.request", {"CC": ["agent.x.request"]}),
            _request(),
            True,
            Refusal.CARBON_COPY,
            id="cc",
        ),
        pytest.param(
            Delivery("agent.svc.request", {"BCC": ["agent.x.request"]}),
            _request(),
            True,
            Refusal.CARBON_COPY,
            id="bcc",
        ),
        pytest.param(
            Delivery("agent.other.request"), _request(), True, Refusal.ROUTING_KEY, id="key"
        ),
        pytest.param(
            Delivery("agent.other.request"), _request("other"), True, Refusal.RECEIVER, id="svc"
        ),
        pytest.param(
            Delivery("broadcast.request.go"), _request(BROADCAST), True, Refusal.RECEIVER, id="b"
        ),
        pytest.param(
            Delivery("broadcast.request.drop"),
            _request(BROADCAST, action="drop"),
            False,
            Refusal.RECEIVER,
            id="broadcast-of-an-action-not-taken-on-broadcast",
        ),
        pytest.param(
            Delivery("agent.svc.request"), _request(), False, Refusal.RECEIVER, id="not-inst"
        ),
        pytest.param(Delivery(None), _request(), True, Refusal.ROUTING_KEY, id="no-key"),
        pytest.param(
            Delivery("svc-queue-name"), _request(), True, Refusal.ROUTING_KEY, id="default-ex"
        ),
    ],
)
def test_requests_are_admitted_only_on_their_own_key_and_queue(
    delivery: Delivery, envelope: Envelope, shared: bool, expected: Refusal | None
) -> None:
    """A request passes only with its contract key, for this queue's receiver, without CC."""
    assert _check(delivery, envelope, shared=shared) is expected


def test_an_event_needs_its_own_key_but_may_be_for_anyone() -> None:
    """Subscribers may watch events to others; the key must still be the envelope's."""
    event = EventEnvelope(
        sender_id="a", receiver_id="somebody", payload=EventPayload(event_name="ping")
    )
    assert _check(Delivery("agent.somebody.event"), event, shared=False) is None
    assert _check(Delivery("broadcast.event.ping"), event, shared=False) is Refusal.ROUTING_KEY


def test_a_reply_is_admitted_on_any_key_without_a_carbon_copy() -> None:
    """Replies come through reply_to queues: their key is a queue name."""
    reply = ResponseEnvelope(
        sender_id="svc-2",
        receiver_id="svc-1",
        payload=ResponsePayload(status=ResponseStatus.SUCCESS),
        metadata=Metadata(correlation_id="x"),
    )
    assert _check(Delivery("amq.rabbitmq.reply-to.abc"), reply, shared=False) is None
    assert _check(Delivery("q", {"CC": []}), reply, shared=False) is Refusal.CARBON_COPY


@pytest.mark.parametrize(
    ("user_id", "sender", "expected"),
    [
        ("alice", "alice", None),
        ("alice", "alice-1", None),
        (None, "alice", Refusal.MISSING_USER_ID),
        ("", "alice", Refusal.MISSING_USER_ID),
        ("alice", "bob", Refusal.SENDER_MISMATCH),
        ("alice", "alicex", Refusal.SENDER_MISMATCH),
        ("alice", "alice-", Refusal.SENDER_MISMATCH),
        ("alice-1", "alice", Refusal.SENDER_MISMATCH),
        # A name extending another's with "-" is not the other's to borrow, either way.
        ("alice", "alice-eu-1", Refusal.SENDER_MISMATCH),
        ("alice-eu", "alice-eu-1", None),
        ("alice-eu", "alice-eu", Refusal.SENDER_MISMATCH),
        ("alice-eu", "alice-1", Refusal.SENDER_MISMATCH),
    ],
)
def test_verify_sender_requires_a_user_id_that_owns_the_sender_id(
    user_id: str | None, sender: str, expected: Refusal | None
) -> None:
    """With verify_sender, sender_id is the user or ``<user>-<suffix>``."""
    delivery = Delivery("agent.svc.request", user_id=user_id)
    assert _check(delivery, _request(sender=sender), verify=True) is expected
    assert _check(delivery, _request(sender=sender), verify=False) is None


def test_identity_refusals_are_marked_as_such() -> None:
    """Only identity refusals make the sender_id useless as a reply address."""
    assert {r for r in Refusal if r.is_identity} == {
        Refusal.MISSING_USER_ID,
        Refusal.SENDER_MISMATCH,
    }
    assert all(r.explanation for r in Refusal)


def test_sent_by_needs_a_dash_after_the_user_name() -> None:
    """``bobby`` is not one of ``bob``'s instances; ``bob-2`` is."""
    assert sent_by("bob-2", "bob")
    assert not sent_by("bobby", "bob")


@pytest.mark.parametrize(
    ("url", "user"),
    [
        ("amqp://guest:guest@localhost:5672/", "guest"),
        ("amqp://billing:pw@host/", "billing"),
        ("amqp://a%40b:pw@host/", "a@b"),
        ("amqp://host/", "guest"),
    ],
)
def test_connection_user_is_read_from_the_url(url: str, user: str) -> None:
    """The user name the connection logs in as, percent-decoded; guest by default."""
    assert connection_user(Settings(url=url)) == user


def test_publisher_user_id_when_senders_are_verified_and_a_matching_agent_id() -> None:
    """No user_id for guest or with the check off; else the agent id must belong to the user."""
    url = "amqp://billing:pw@host/"
    assert publisher_user_id(Settings(), "anyone") is None
    assert publisher_user_id(Settings(url=url, verify_sender=False), "anyone") is None
    assert publisher_user_id(Settings(url=url), "billing-1") == "billing"
    with pytest.raises(ConfigurationError, match="does not belong to broker user 'billing'"):
        publisher_user_id(Settings(url=url), "client-1")


def test_sender_verification_is_on_unless_the_identity_is_guest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Default: on for any user of its own, off for the shared guest; the setting overrides."""
    assert verifies_sender(Settings()) is False
    assert verifies_sender(Settings(url="amqp://guest:guest@host/")) is False
    assert verifies_sender(Settings(url="amqp://shop:pw@host/")) is True
    assert verifies_sender(Settings(url="amqp://shop:pw@host/", verify_sender=False)) is False
    monkeypatch.setenv("AGENTBUS_VERIFY_SENDER", "1")
    assert verifies_sender(Settings()) is True


async def test_a_refused_request_is_answered_unauthorized_dead_lettered_and_not_run() -> None:
    """On the in-memory bus: a CC'd request gets unauthorized, one dead letter, no handler call."""
    broker = MemoryBroker()
    ran: list[str] = []

    async def handler(request: RequestEnvelope) -> str:
        ran.append(request.message_id)
        return "ok"

    metrics = Metrics()
    async with MemoryBus(broker, agent_id="svc-1") as server, MemoryBus(broker) as client:
        metrics.attach(server)
        await server.serve(handler, service="svc")
        copied = _request(sender=client.agent_id)
        message = MemoryMessage(
            encode(copied), message_id=copied.message_id, headers={"CC": ["agent.x.request"]}
        )
        broker.publish(message, "agent.svc.request", exchange=server.topology.exchange)
        await wait_until(lambda: client.stats.unknown_replies == 1)
        await broker.idle()
        served = await client.request("svc", "go", timeout=5)

    assert served.result == "ok"
    assert len(ran) == 1, "only the honest request ran"
    assert server.stats.refused == 1
    assert server.stats.refused_by == {Refusal.CARBON_COPY: 1}
    assert server.stats.consumed_by[("request", "refused")] == 1
    assert server.stats.errors_sent["unauthorized"] == 1
    assert [letter.message.message_id for letter in broker.dead_letters] == [copied.message_id]
    labels = {"agent_id": "svc-1", "reason": Refusal.CARBON_COPY.value}
    assert metrics.registry.get_sample_value("agentbus_refused_total", labels) == 1


async def test_verify_sender_on_the_memory_bus_sets_and_checks_user_id() -> None:
    """Both sides verify: the client's user_id is set from its URL, and the server admits it."""
    broker = MemoryBroker()
    settings = Settings(url="amqp://shop:pw@host/", verify_sender=True)

    async def handler(request: RequestEnvelope) -> str:
        return request.sender_id

    async with (
        MemoryBus(broker, settings, agent_id="shop-1") as server,
        MemoryBus(broker, settings, agent_id="shop-2") as client,
    ):
        await server.serve(handler, service="svc")
        reply = await client.request("svc", "go", timeout=5)
        forged = _request(sender="mallory")
        broker.publish(
            MemoryMessage(encode(forged), message_id=forged.message_id, user_id="shop"),
            "agent.svc.request",
            exchange=server.topology.exchange,
        )
        await wait_until(lambda: server.stats.refused == 1)

    assert reply.result == "shop-2"
    assert server.stats.refused_by == {Refusal.SENDER_MISMATCH: 1}

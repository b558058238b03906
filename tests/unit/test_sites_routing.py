"""Sites without a broker: the federation definitions, the local-first choice, the SITE column."""

from __future__ import annotations

from typing import Any

import pytest

from agentbus import Settings, SiteUnreachable, Unroutable
from agentbus._config import peer_sites
from agentbus._topology import Topology
from agentbus.bus._sites import Across, Crossing, SiteRouter
from agentbus.cli._render import agents_table
from agentbus.definitions import federation_definitions
from agentbus.envelopes import RequestEnvelope, RequestPayload


def test_federation_definitions_link_a_site_to_its_peer_outboxes() -> None:
    document = federation_definitions("a", {"b": "amqp://u:p@b.example:5672/"}, exchange="ex")
    (upstream, upstream_set) = document["parameters"]
    assert upstream["value"]["uri"] == "amqp://u:p@b.example:5672"  # default vhost to Erlang
    assert (upstream["value"]["exchange"], upstream["value"]["max-hops"]) == ("ex.outbox.a", 1)
    assert upstream_set["value"] == [{"upstream": "ex-site-b"}]
    assert document["policies"][0]["pattern"] == "^ex$"
    keys = {(b["destination"], b["routing_key"]) for b in document["bindings"]}
    assert keys == {
        ("ex.outbox.b", k) for k in ("broadcast.#", "agent.*.event", "agent.*.response")
    } | {("ex.sites", "broadcast.event.heartbeat"), ("ex.site.b", "")}


def test_a_links_queue_may_cap_how_long_anything_waits_in_it() -> None:
    plain = federation_definitions("a", {"b": "amqp://b"}, exchange="ex")
    assert "message-ttl" not in plain["parameters"][0]["value"]
    capped = federation_definitions("a", {"b": "amqp://b"}, link_message_ttl=120, link_expires=600)
    value = capped["parameters"][0]["value"]
    assert (value["message-ttl"], value["expires"]) == (120_000, 600_000)


def test_federation_definitions_keep_a_beacon_per_peer() -> None:
    document = federation_definitions("a", {"b": "amqp://b", "c": "amqp://c"}, exchange="ex")
    beacons = {q["name"]: q["arguments"] for q in document["queues"]}
    assert beacons.keys() == {"ex.site.b", "ex.site.c"}
    assert beacons["ex.site.b"]["x-max-length"] == 1
    sorting = {
        b["destination"]: b["arguments"] for b in document["bindings"] if b["source"] == "ex.sites"
    }
    assert sorting["ex.site.c"] == {"x-match": "all", "agentbus-site": "c"}
    assert {"name": "ex.sites", "type": "headers"}.items() <= next(
        x for x in document["exchanges"] if x["name"] == "ex.sites"
    ).items()


def test_peer_sites_need_a_site_of_their_own() -> None:
    assert peer_sites(Settings(peer_sites="b,c")) == ()
    assert peer_sites(Settings(site="a", peer_sites="b,a,c")) == ("b", "c")


async def test_router_crosses_only_when_nothing_serves_here() -> None:
    looks: list[str] = []

    async def local(receiver: str) -> bool:
        looks.append(receiver)
        return receiver == "here"

    router = SiteRouter(Topology("ex"), ("b", "c"), local)
    assert await router.crossing("here") is None
    assert await router.crossing("far") == Across({"b": "ex.outbox.b", "c": "ex.outbox.c"})
    assert await router.crossing("far") == Across({"b": "ex.outbox.b", "c": "ex.outbox.c"})
    assert looks == ["here", "far"]  # the answer is remembered


async def test_router_skips_a_peer_not_heard_from() -> None:
    async def nowhere(receiver: str) -> bool:
        return False

    heard = {"b": False, "c": None, "d": True}
    looks: list[str] = []

    async def beacon(site: str) -> bool | None:
        looks.append(site)
        return heard[site]

    router = SiteRouter(Topology("ex"), ("b", "c", "d"), nowhere, beacon)
    assert await router.crossing("far") == Across({"c": "ex.outbox.c", "d": "ex.outbox.d"}, ("b",))
    heard["b"] = True  # remembered for a second: the same answer
    assert await router.crossing("other") == Across(
        {"c": "ex.outbox.c", "d": "ex.outbox.d"}, ("b",)
    )
    assert sorted(looks) == ["b", "c", "d"]


class _Outboxes:
    def __init__(self, routed: set[str]) -> None:
        self.routed = routed
        self.tried: list[dict[str, Any]] = []

    async def publish(self, envelope: RequestEnvelope, **options: Any) -> None:
        self.tried.append(options)
        if options["exchange"] not in self.routed:
            raise Unroutable("nobody there")


async def test_crossing_tries_each_peer_in_order_without_reply_to() -> None:
    request = RequestEnvelope(
        sender_id="client", receiver_id="greeter", payload=RequestPayload(action="greet")
    )
    outboxes = _Outboxes({"ex.outbox.c"})
    await Crossing(outboxes, Across({"b": "ex.outbox.b", "c": "ex.outbox.c"})).publish(
        request, reply_to="q"
    )
    assert [(o["exchange"], o["reply_to"]) for o in outboxes.tried] == [
        ("ex.outbox.b", None),
        ("ex.outbox.c", None),
    ]
    with pytest.raises(Unroutable) as refused:
        await Crossing(_Outboxes(set()), Across({"b": "ex.outbox.b"})).publish(request)
    assert type(refused.value) is Unroutable


async def test_a_request_every_peer_refuses_names_them_and_the_link() -> None:
    """Refused at each peer's outbox: not "nobody serves it", but this site and the peers
    named, and the link to them as what may be down (a stopped link refuses like this)."""
    request = RequestEnvelope(
        sender_id="client", receiver_id="greeter", payload=RequestPayload(action="greet")
    )
    across = Across({"b": "ex.outbox.b", "c": "ex.outbox.c"})
    with pytest.raises(Unroutable) as refused:
        await Crossing(_Outboxes(set()), across).publish(request)
    assert type(refused.value) is Unroutable
    assert str(refused.value) == (
        "nothing at this site serves 'greeter', and the peer site(s) b, c did not take it: "
        "nothing serves it there either, or the link to them is down "
        "(rabbitmqctl federation_status there; docs/sites.md)"
    )
    assert refused.value.details == {"receiver": "greeter", "sites": ["b", "c"]}
    assert refused.value.code == "agent_unavailable"


async def test_crossing_fails_fast_when_a_peer_that_might_serve_is_silent() -> None:
    request = RequestEnvelope(
        sender_id="client", receiver_id="greeter", payload=RequestPayload(action="greet")
    )
    nobody = _Outboxes(set())
    with pytest.raises(SiteUnreachable) as raised:
        await Crossing(nobody, Across({}, ("b",))).publish(request)
    assert nobody.tried == []  # nothing published: at once
    assert (raised.value.code, raised.value.details) == (
        "agent_unavailable",
        {"receiver": "greeter", "sites": ["b"]},
    )
    with pytest.raises(SiteUnreachable):  # c refuses it, b might serve it
        await Crossing(_Outboxes(set()), Across({"c": "ex.outbox.c"}, ("b",))).publish(request)


def test_agents_table_shows_sites_when_agents_have_them() -> None:
    agent = {"agent_id": "g-1", "service": "g", "status": "ready", "in_flight": 0}
    agent |= {"capacity": 1, "skills": [], "age": 1.0}
    assert "SITE" not in agents_table([agent])
    table = agents_table([agent | {"site": "eu"}])
    head, row = table.splitlines()
    assert "SITE" in head
    assert " eu " in row

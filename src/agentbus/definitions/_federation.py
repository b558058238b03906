"""The federation of a site with its peers, as broker definitions (``agentbus federation``).

Each site's topic exchange is federated from an outbox at every peer: the link a site
runs pulls from ``<exchange>.outbox.<this site>`` on each peer, with this site's own
bindings, so a message crosses only when something here is bound for its routing key. The
exchange feeds each outbox the keys that must reach a requester or a listener wherever it
runs (broadcasts, events to an agent, replies by routing key); requests go into an outbox
only when the bus sends one across. One hop at most: what came over a link never leaves
again (docs/sites.md).

Each site also keeps a beacon per peer: the latest heartbeat heard from that peer (sorted by
the header broadcasts carry their site in), gone once it expires. A requester whose request
only a peer could serve looks at the peer's beacon first, and fails fast when it is empty.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from agentbus._exceptions import ConfigurationError
from agentbus._topology import SITE_HEADER, Topology
from agentbus.envelopes import is_valid_id

__all__ = [
    "CROSSING_KEYS",
    "LINK_EXPIRES",
    "erlang_uri",
    "federation_definitions",
    "link_definitions",
    "upstream_name",
]

CROSSING_KEYS: Final = ("broadcast.#", "agent.*.event", "agent.*.response")
"""What every site's exchange hands its outboxes: broadcasts (heartbeats, announce, cancel,
plan progress), events to an agent, and replies and progress sent by routing key."""

_HEARTBEAT_KEY: Final = "broadcast.event.heartbeat"  # agents' heartbeats: the beacons' feed

LINK_EXPIRES: Final = 3600.0
"""Seconds a link's queue at the upstream outlives a cut link (the default), with what it holds."""


def upstream_name(topology: Topology, peer: str) -> str:
    """The federation upstream (a runtime parameter) for ``peer`` site."""
    return f"{topology.exchange}-site-{peer}"


def federation_definitions(
    site: str,
    peers: Mapping[str, str],
    *,
    exchange: str = "agentbus",
    vhost: str = "/",
    link_expires: float = LINK_EXPIRES,
    link_message_ttl: float | None = None,
) -> dict[str, Any]:
    """The definitions that link ``site`` with each of ``peers`` (site: the AMQP URI of its
    broker, credentials included), for ``rabbitmqctl import_definitions`` at ``site``.

    Load the matching document at every peer too: the link each site runs pulls its
    inbound traffic, so a link both ways needs both documents. Needs the
    ``rabbitmq_federation`` plugin. ``link_expires``: seconds the link's queue at a peer
    outlives a cut link, with what it holds; ``link_message_ttl``: seconds anything waits
    in it at most (None: each message's own TTL only).

    Raises:
        ConfigurationError: a site name is not an id, or a site is its own peer.
    """
    return _links(site, peers, exchange, vhost, link_expires, link_message_ttl)


def link_definitions(
    site: str,
    peers: Sequence[str],
    *,
    exchange: str = "agentbus",
    vhost: str = "/",
    link_expires: float = LINK_EXPIRES,
    link_message_ttl: float | None = None,
) -> dict[str, Any]:
    """``federation_definitions`` less the upstreams' URIs (kept elsewhere: in a Secret).

    Raises:
        ConfigurationError: a site name is not an id, or a site is its own peer.
    """
    return _links(site, dict.fromkeys(peers), exchange, vhost, link_expires, link_message_ttl)


def _links(
    site: str,
    peers: Mapping[str, str | None],
    exchange: str,
    vhost: str,
    link_expires: float,
    link_message_ttl: float | None,
) -> dict[str, Any]:
    for name in (site, *peers):
        if not is_valid_id(name):
            raise ConfigurationError(f"site {name!r} is not valid: use 1 to 64 of [A-Za-z0-9_-]")
    if site in peers or not peers:
        raise ConfigurationError("a site needs at least one peer, and is not its own")
    topology = Topology(exchange)
    upstreams = [upstream_name(topology, peer) for peer in peers]
    return {
        "exchanges": [_exchange(vhost, exchange)]
        + [_exchange(vhost, topology.outbox(peer)) for peer in peers]
        + [_exchange(vhost, topology.site_beacons, kind="headers")],
        "queues": [_beacon(vhost, topology.site_beacon(peer)) for peer in peers],
        "bindings": _bindings(vhost, topology, peers),
        "parameters": [
            _upstream(vhost, name, uri, topology.outbox(site), link_expires, link_message_ttl)
            for name, uri in zip(upstreams, peers.values(), strict=True)
        ]
        + [
            {
                "vhost": vhost,
                "component": "federation-upstream-set",
                "name": f"{exchange}-sites",
                "value": [{"upstream": name} for name in upstreams],
            }
        ],
        "policies": [
            {
                "vhost": vhost,
                "name": f"{exchange}-sites",
                "pattern": f"^{re.escape(exchange)}$",
                "apply-to": "exchanges",
                "priority": 1,
                "definition": {"federation-upstream-set": f"{exchange}-sites"},
            }
        ],
    }


def _bindings(vhost: str, topology: Topology, peers: Iterable[str]) -> list[dict[str, Any]]:
    # What each outbox is fed, and the beacons: heartbeats sorted by their site.
    exchange = topology.exchange
    return (
        [
            _feed(vhost, exchange, topology.outbox(peer), key)
            for peer in peers
            for key in CROSSING_KEYS
        ]
        + [_feed(vhost, exchange, topology.site_beacons, _HEARTBEAT_KEY)]
        + [_beacon_binding(vhost, topology, peer) for peer in peers]
    )


def _exchange(vhost: str, name: str, *, kind: str = "topic") -> dict[str, Any]:
    return {
        "vhost": vhost,
        "name": name,
        "type": kind,
        "durable": True,
        "auto_delete": False,
        "internal": False,
        "arguments": {},
    }


def _feed(vhost: str, source: str, outbox: str, key: str) -> dict[str, Any]:
    return {
        "vhost": vhost,
        "source": source,
        "destination": outbox,
        "destination_type": "exchange",
        "routing_key": key,
        "arguments": {},
    }


def _beacon(vhost: str, name: str) -> dict[str, Any]:
    # The latest heartbeat only; it expires with the heartbeat's own TTL (three intervals).
    return {
        "vhost": vhost,
        "name": name,
        "durable": True,
        "auto_delete": False,
        "arguments": {"x-queue-type": "classic", "x-max-length": 1, "x-overflow": "drop-head"},
    }


def _beacon_binding(vhost: str, topology: Topology, peer: str) -> dict[str, Any]:
    return {
        "vhost": vhost,
        "source": topology.site_beacons,
        "destination": topology.site_beacon(peer),
        "destination_type": "queue",
        "routing_key": "",
        # Not an x- header: a headers exchange matches none of those (before "all-with-x").
        "arguments": {"x-match": "all", SITE_HEADER: peer},
    }


def erlang_uri(uri: str) -> str:
    """``uri`` as RabbitMQ's Erlang client reads it: a bare ``/`` path is the default vhost
    to Python clients, and the empty vhost (refused: ``not_allowed``) to the link."""
    parts = urlsplit(uri)
    return urlunsplit(parts._replace(path="")) if parts.path == "/" else uri


def _upstream(
    vhost: str, name: str, uri: str | None, outbox: str, expires: float, message_ttl: float | None
) -> dict[str, Any]:
    ttl = {} if message_ttl is None else {"message-ttl": int(message_ttl * 1000)}
    where = {} if uri is None else {"uri": erlang_uri(uri)}
    return {
        "vhost": vhost,
        "component": "federation-upstream",
        "name": name,
        "value": {
            **ttl,
            **where,
            "exchange": outbox,
            "max-hops": 1,
            # Kept while the link is cut, with what waits in it, this long (ms).
            "expires": int(expires * 1000),
            "ack-mode": "on-confirm",
            # Senders were checked at the upstream; the link republishes with their user_id.
            "trust-user-id": True,
            "reconnect-delay": 1,
        },
    }

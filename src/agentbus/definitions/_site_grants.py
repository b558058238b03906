"""What a team's users may do across sites (docs/sites.md), for ``agentbus definitions``.

A request that nothing at this site serves is published on a peer's outbox
(``<exchange>.outbox.<peer>``): each user that sends requests may write there the very
request keys it may write on the team's exchange, and no other. The link a peer runs logs
in here as a user of its own, which may read that peer's outbox and declare, bind and
consume the link's own objects (named ``federation: ...``) and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from agentbus._exceptions import ConfigurationError
from agentbus._topology import Topology
from agentbus.envelopes import is_valid_id

__all__ = [
    "check_peers",
    "link_permissions",
    "link_users",
    "outbox_names",
    "outbox_topic_permissions",
]

_LINK_OBJECTS: Final = "federation: .*"  # the queue and exchange a federation link declares


def check_peers(peers: Mapping[str, str | None], users: Sequence[str]) -> None:
    """Refuse a peer site or link user that is not an id, or a link user of the team's names.

    Raises:
        ConfigurationError: one is not valid.
    """
    for site, link_user in peers.items():
        if not is_valid_id(site):
            raise ConfigurationError(f"site {site!r} is not valid: use 1 to 64 of [A-Za-z0-9_-]")
        if link_user is not None and (not is_valid_id(link_user) or link_user in users):
            raise ConfigurationError(
                f"{link_user!r} cannot be the link user of {site!r}: not an id, or a team user"
            )


def outbox_names(topology: Topology, peers: Sequence[str]) -> list[str]:
    """The peers' outboxes, as regexes (for a requester's vhost write permission)."""
    return [re.escape(topology.outbox(peer)) for peer in peers]


def outbox_topic_permissions(
    requests: Mapping[str, Sequence[str]], topology: Topology, vhost: str, peers: Sequence[str]
) -> list[dict[str, str]]:
    """Each requester's topic permission on each peer's outbox: its request keys only.

    ``requests``: for each user, the request keys it may write on the team's exchange.
    """
    found = []
    for user, writes in requests.items():
        if not writes:
            continue
        found += [
            {
                "user": user,
                "vhost": vhost,
                "exchange": topology.outbox(peer),
                "write": f"^({'|'.join(writes)})$",
                "read": "^$",
            }
            for peer in peers
        ]
    return found


def link_permissions(topology: Topology, vhost: str, site: str, user: str) -> dict[str, str]:
    """The vhost permissions of ``user``, as which ``site``'s link logs in here."""
    outbox = re.escape(topology.outbox(site))
    return {
        "user": user,
        "vhost": vhost,
        "configure": f"^{_LINK_OBJECTS}$",
        "write": f"^{_LINK_OBJECTS}$",
        "read": f"^({outbox}|{_LINK_OBJECTS})$",
    }


def link_users(
    topology: Topology, vhost: str, peers: Mapping[str, str | None], hashing: str
) -> dict[str, list[dict[str, Any]]]:
    """The peers' link users with their permissions, as definitions entries."""
    named = {site: user for site, user in peers.items() if user is not None}
    return {
        "users": [
            {"name": user, "password_hash": "", "hashing_algorithm": hashing, "tags": []}
            for user in named.values()
        ],
        "permissions": [link_permissions(topology, vhost, s, u) for s, u in named.items()],
    }

"""A team's broker users as Kubernetes resources of the RabbitMQ messaging topology operator.

The same grants as ``definitions`` (``team_grants``), written as the operator's ``User``,
``Permission`` and ``TopicPermission`` resources: one of each per user (and a
``TopicPermission`` per peer site's outbox a requester may write, a ``User`` and a
``Permission`` per peer's link user: docs/sites.md), made from the very entries a
definitions document has (``user_definitions``). Each user's credentials are in a Secret
of its own that the ``User`` imports (``importCredentialsSecret``) and the user's
Deployment reads. The Secret holds the broker user's name, so it is the service's name, as
the permissions' patterns expect; ``credential_secrets`` makes those Secrets with random
passwords, for an operator to apply once (they are not kept in git).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Final

from agentbus._topology import Topology
from agentbus.definitions._site_grants import check_peers
from agentbus.definitions._team import Grant, user_definitions

__all__ = [
    "API_VERSION",
    "PART_OF",
    "credential_secrets",
    "dns_name",
    "secret_name",
    "topology_resources",
]

API_VERSION: Final = "rabbitmq.com/v1beta1"
"""The messaging topology operator's API group and version."""

PART_OF: Final = {"app.kubernetes.io/part-of": "agentbus"}
"""The label every generated resource carries."""

_NOT_DNS: Final = re.compile(r"[^a-z0-9-]+")


def dns_name(text: str) -> str:
    """``text`` as a DNS-1123 name (ids may hold ``_`` and capitals, RabbitMQ names ``.``)."""
    return _NOT_DNS.sub("-", text.lower()).strip("-")[:253].rstrip("-")


def _resource_name(prefix: str, user: str) -> str:
    """A DNS-1123 name for ``user``'s resources."""
    return dns_name(f"{prefix}-user-{user}")


def secret_name(user: str, *, prefix: str = "agentbus") -> str:
    """The name of the Secret that holds ``user``'s broker credentials."""
    return _resource_name(prefix, user)


def _resource(kind: str, name: str, user: str, spec: dict[str, Any]) -> dict[str, Any]:
    labels = {**PART_OF, "agentbus.dev/broker-user": dns_name(user)}
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def topology_resources(
    grants: Sequence[Grant],
    *,
    cluster: str,
    exchange: str = "agentbus",
    vhost: str = "/",
    prefix: str = "agentbus",
    peers: Mapping[str, str | None] | None = None,
) -> list[dict[str, Any]]:
    """Return the ``User``, ``Permission`` and ``TopicPermission`` of each grant's user.

    And the audit stream, as a ``Queue``: agents write to it but no service user may
    declare it (in a definitions document it is one of the queues). It is kept if the
    resource is deleted (``deletionPolicy: retain``): it is the record.

    Args:
        grants: The team's users (``team_grants``).
        cluster: The ``RabbitmqCluster`` the resources are for (its name).
        exchange: The bus's exchange name.
        vhost: The virtual host.
        prefix: The resources' and Secrets' name prefix: ``<prefix>-user-<user>``.
        peers: The peer sites requests may cross to, each with the user its link logs in
            here as (None: one the operator adds), as in ``definitions``.

    Raises:
        ConfigurationError: a peer site or link user is not valid.
    """
    topology = Topology(exchange)
    entries = user_definitions(grants, topology, vhost, peers or {})
    reference = {"name": cluster}
    resources: list[dict[str, Any]] = []
    for user in entries["users"]:
        resources += _user_resources(user, entries, topology, reference, prefix)
    audit = {
        "name": topology.audit_stream,
        "vhost": vhost,
        "type": "stream",
        "durable": True,
        "autoDelete": False,
        "deletionPolicy": "retain",
        "rabbitmqClusterReference": reference,
    }
    return [*resources, _queue(f"{prefix}-audit", audit)]


def _user_resources(
    user: Mapping[str, Any],
    entries: Mapping[str, Sequence[Mapping[str, Any]]],
    topology: Topology,
    reference: dict[str, str],
    prefix: str,
) -> list[dict[str, Any]]:
    """``user``'s ``User``, and its entries' ``Permission`` and ``TopicPermission``s."""
    login = user["name"]
    name = _resource_name(prefix, login)
    spec: dict[str, Any] = {
        "rabbitmqClusterReference": reference,
        "importCredentialsSecret": {"name": name},
    }
    if user["tags"]:
        spec["tags"] = list(user["tags"])
    found = [_resource("User", name, login, spec)]
    for entry in entries["permissions"]:
        if entry["user"] == login:
            found.append(_permission("Permission", name, name, entry, reference))
    for entry in entries["topic_permissions"]:
        if entry["user"] == login:
            # The team's exchange under the user's name; a peer's outbox under both.
            own = entry["exchange"] == topology.exchange
            named = name if own else dns_name(f"{name}-{entry['exchange']}")
            found.append(_permission("TopicPermission", named, name, entry, reference))
    return found


def _permission(
    kind: str, name: str, user: str, entry: Mapping[str, Any], reference: dict[str, str]
) -> dict[str, Any]:
    """``entry`` (a definitions document's) as ``kind``, for the ``User`` named ``user``."""
    spec = {
        "vhost": entry["vhost"],
        "userReference": {"name": user},
        "permissions": _permission_fields(entry),
        "rabbitmqClusterReference": reference,
    }
    return _resource(kind, name, entry["user"], spec)


def _queue(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Queue",
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "spec": spec,
    }


def _permission_fields(entry: Mapping[str, Any]) -> dict[str, str]:
    return {key: value for key, value in entry.items() if key not in ("user", "vhost")}


def credential_secrets(
    grants: Sequence[Grant],
    *,
    prefix: str = "agentbus",
    password_bytes: int = 24,
    peers: Mapping[str, str | None] | None = None,
) -> list[dict[str, Any]]:
    """Return a Secret per grant's user, and per peer's link user: its name and a new
    random password.

    Apply them once (``kubectl apply``); applying again rotates every password, which the
    topology operator syncs to the broker (the Deployments pick it up on their next start;
    a link user's password is in the peer site's upstream URI, to change there too).

    Raises:
        ConfigurationError: a peer site or link user is not valid.
    """
    users = [grant.user for grant in grants]
    check_peers(peers or {}, users)
    users += [user for user in (peers or {}).values() if user is not None]
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret_name(user, prefix=prefix), "labels": dict(PART_OF)},
            "type": "Opaque",
            "stringData": {
                "username": user,
                # Hex: safe in a URL as it is, and never a leading "-" for rabbitmqctl.
                "password": secrets.token_hex(password_bytes),
            },
        }
        for user in users
    ]

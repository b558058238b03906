"""A team's broker users as Kubernetes resources of the RabbitMQ messaging topology operator.

The same grants as ``definitions`` (``team_grants``), written as the operator's ``User``,
``Permission`` and ``TopicPermission`` resources: one of each per user, and the user's
credentials in a Secret of its own that the ``User`` imports (``importCredentialsSecret``)
and the user's Deployment reads. The Secret holds the broker user's name, so it is the
service's name, as the permissions' patterns expect; ``credential_secrets`` makes those
Secrets with random passwords, for an operator to apply once (they are not kept in git).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from typing import Any, Final

from agentbus._topology import Topology
from agentbus.security._definitions import Grant, permissions_of, topic_permissions_of

__all__ = ["credential_secrets", "secret_name", "topology_resources"]

_API: Final = "rabbitmq.com/v1beta1"
_PART_OF: Final = {"app.kubernetes.io/part-of": "agentbus"}
_NOT_DNS: Final = re.compile(r"[^a-z0-9-]+")


def _resource_name(prefix: str, user: str) -> str:
    """A DNS-1123 name for ``user``'s resources (ids may hold ``_`` and capitals)."""
    return _NOT_DNS.sub("-", f"{prefix}-user-{user}".lower()).strip("-")


def secret_name(user: str, *, prefix: str = "agentbus") -> str:
    """The name of the Secret that holds ``user``'s broker credentials."""
    return _resource_name(prefix, user)


def _resource(kind: str, name: str, user: str, spec: dict[str, Any]) -> dict[str, Any]:
    labels = {**_PART_OF, "agentbus.dev/broker-user": _NOT_DNS.sub("-", user.lower())}
    return {
        "apiVersion": _API,
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
    """
    topology = Topology(exchange)
    reference = {"name": cluster}
    resources: list[dict[str, Any]] = []
    for grant in grants:
        name = _resource_name(prefix, grant.user)
        own = _permission_fields(permissions_of(grant, topology, vhost))
        topic = _permission_fields(topic_permissions_of(grant, topology, vhost, grants))
        resources += [
            _resource(
                "User",
                name,
                grant.user,
                {"rabbitmqClusterReference": reference, "importCredentialsSecret": {"name": name}},
            ),
            _resource(
                "Permission",
                name,
                grant.user,
                {
                    "vhost": vhost,
                    "userReference": {"name": name},
                    "permissions": own,
                    "rabbitmqClusterReference": reference,
                },
            ),
            _resource(
                "TopicPermission",
                name,
                grant.user,
                {
                    "vhost": vhost,
                    "userReference": {"name": name},
                    "permissions": topic,
                    "rabbitmqClusterReference": reference,
                },
            ),
        ]
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


def _queue(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": _API,
        "kind": "Queue",
        "metadata": {"name": name, "labels": dict(_PART_OF)},
        "spec": spec,
    }


def _permission_fields(entry: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in entry.items() if key not in ("user", "vhost")}


def credential_secrets(
    grants: Sequence[Grant], *, prefix: str = "agentbus", password_bytes: int = 24
) -> list[dict[str, Any]]:
    """Return a Secret per grant's user: its name and a new random password.

    Apply them once (``kubectl apply``); applying again rotates every password, which the
    topology operator syncs to the broker (the Deployments pick it up on their next start).
    """
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret_name(grant.user, prefix=prefix), "labels": dict(_PART_OF)},
            "type": "Opaque",
            "stringData": {
                "username": grant.user,
                # Hex: safe in a URL as it is, and never a leading "-" for rabbitmqctl.
                "password": secrets.token_hex(password_bytes),
            },
        }
        for grant in grants
    ]

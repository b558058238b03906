"""A site's federation links as resources of the RabbitMQ messaging topology operator.

``federation_resources`` writes the document ``link_definitions`` (or
``federation_definitions``) builds as the operator's kinds, entry by entry and field by
field, so the two formats cannot say different things:

- ``exchanges``: ``Exchange`` (``name``, ``vhost``, ``type``, ``durable``,
  ``auto_delete`` as ``autoDelete``, ``arguments``);
- ``queues``: ``Queue`` (the same, and the ``x-queue-type`` argument as ``type``);
- ``bindings``: ``Binding`` (``source``, ``destination``, ``destination_type`` as
  ``destinationType``, ``routing_key`` as ``routingKey``, ``arguments``);
- a ``federation-upstream`` parameter: ``Federation`` (``exchange``, ``max-hops`` as
  ``maxHops``, ``expires``, ``message-ttl`` as ``messageTTL``, ``ack-mode`` as
  ``ackMode``, ``trust-user-id`` as ``trustUserId``, ``reconnect-delay`` as
  ``reconnectDelay``, ``prefetch-count``, ``queue``, ``queue-type`` as ``queueType``,
  ``resource-cleanup-mode`` as ``resourceCleanupMode``); its ``uri`` is in a Secret (key
  ``uri``, ``uri_secrets``) that the ``Federation`` names (``uriSecret``);
- ``policies``: ``Policy`` (``name``, ``vhost``, ``pattern``, ``apply-to`` as
  ``applyTo``, ``priority``, ``definition``).

Without a field in the operator's kinds: an exchange's ``internal`` (the operator declares
none internal, and the document's are not: an internal one is refused), and the
``federation-upstream-set`` parameter (no kind makes one). The policy that names the set
names instead its one upstream (``federation-upstream``) when the site has one peer, and
RabbitMQ's implicit set ``all`` (every upstream in the vhost) when it has several: keep
other federation upstreams out of that vhost. A key not listed here is refused
(``ConfigurationError``) rather than left out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from agentbus._exceptions import ConfigurationError
from agentbus.definitions._k8s import API_VERSION, PART_OF, dns_name

__all__ = ["federation_resources", "uri_secret_name", "uri_secrets"]

_EXCHANGE: Final = {
    "name": "name",
    "vhost": "vhost",
    "type": "type",
    "durable": "durable",
    "auto_delete": "autoDelete",
    "arguments": "arguments",
}
_QUEUE: Final = {
    "name": "name",
    "vhost": "vhost",
    "durable": "durable",
    "auto_delete": "autoDelete",
    "arguments": "arguments",
}
_BINDING: Final = {
    "vhost": "vhost",
    "source": "source",
    "destination": "destination",
    "destination_type": "destinationType",
    "routing_key": "routingKey",
    "arguments": "arguments",
}
_UPSTREAM: Final = {
    "exchange": "exchange",
    "max-hops": "maxHops",
    "expires": "expires",
    "message-ttl": "messageTTL",
    "ack-mode": "ackMode",
    "trust-user-id": "trustUserId",
    "reconnect-delay": "reconnectDelay",
    "prefetch-count": "prefetch-count",  # the operator's own name for it keeps the hyphen
    "queue": "queue",
    "queue-type": "queueType",
    "resource-cleanup-mode": "resourceCleanupMode",
}
_POLICY: Final = {
    "name": "name",
    "vhost": "vhost",
    "pattern": "pattern",
    "apply-to": "applyTo",
    "priority": "priority",
    "definition": "definition",
}
_UPSTREAM_COMPONENT: Final = "federation-upstream"
_SET_COMPONENT: Final = "federation-upstream-set"
_KNOWN: Final = frozenset({"exchanges", "queues", "bindings", "parameters", "policies"})


def uri_secret_name(upstream: str) -> str:
    """The Secret that holds the URI of the federation upstream ``upstream``."""
    return dns_name(f"{upstream}-uri")


def federation_resources(document: Mapping[str, Any], *, cluster: str) -> list[dict[str, Any]]:
    """Return the operator's ``Exchange``, ``Queue``, ``Binding``, ``Federation`` and
    ``Policy`` resources of a site's links (``link_definitions``), for ``cluster``.

    Each ``Federation`` reads its upstream's URI from the Secret ``uri_secret_name``
    names (``uri_secrets`` makes them). A URI in ``document`` is left out of the resources.

    Raises:
        ConfigurationError: ``document`` has what no resource field carries.
    """
    unknown = sorted(set(document) - _KNOWN)
    if unknown:
        raise ConfigurationError(f"the operator has no resource for {unknown}")
    reference = {"name": cluster}
    parameters = list(document.get("parameters", ()))
    upstreams = [p for p in parameters if p.get("component") == _UPSTREAM_COMPONENT]
    sets = {p["name"]: p for p in parameters if p.get("component") == _SET_COMPONENT}
    if len(upstreams) + len(sets) != len(parameters):
        raise ConfigurationError("only federation upstreams and their sets can be resources")
    resources = [
        *_each("Exchange", document.get("exchanges", ()), _exchange_spec, _object_name),
        *_each("Queue", document.get("queues", ()), _queue_spec, _object_name),
        *_each("Binding", document.get("bindings", ()), _binding_spec, _binding_name),
        *_each("Federation", upstreams, _federation_spec, _object_name),
        *_each("Policy", document.get("policies", ()), _policy_maker(sets), _object_name),
    ]
    _check_names(resources)
    return [_with_cluster(resource, reference) for resource in resources]


def uri_secrets(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return a Secret per federation upstream of ``document``: its URI (key ``uri``).

    Raises:
        ConfigurationError: an upstream has no URI (``link_definitions`` leaves them out).
    """
    found = []
    for parameter in document.get("parameters", ()):
        if parameter.get("component") != _UPSTREAM_COMPONENT:
            continue
        uri = parameter["value"].get("uri")
        if not uri:
            raise ConfigurationError(f"the upstream {parameter['name']!r} has no URI")
        found.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": uri_secret_name(parameter["name"]), "labels": dict(PART_OF)},
                "type": "Opaque",
                # Several URIs: the operator splits the value at commas.
                "stringData": {"uri": uri if isinstance(uri, str) else ",".join(uri)},
            }
        )
    return found


_Spec = Callable[[Mapping[str, Any]], dict[str, Any]]
_Name = Callable[[Mapping[str, Any]], str]


def _each(
    kind: str, entries: Sequence[Mapping[str, Any]], spec: _Spec, name: _Name
) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": name(entry), "labels": dict(PART_OF)},
            "spec": spec(entry),
        }
        for entry in entries
    ]


def _with_cluster(resource: dict[str, Any], reference: dict[str, str]) -> dict[str, Any]:
    resource["spec"]["rabbitmqClusterReference"] = dict(reference)
    return resource


def _fields(entry: Mapping[str, Any], fields: Mapping[str, str], what: str) -> dict[str, Any]:
    """``entry``'s keys under the resource's names; an empty ``arguments`` left out (the
    operator makes an empty one); a key without a field refused."""
    unknown = sorted(set(entry) - set(fields))
    if unknown:
        raise ConfigurationError(f"the operator's {what} has no field for {unknown}")
    return {
        fields[key]: copy.deepcopy(value)
        for key, value in entry.items()
        if not (key == "arguments" and not value)
    }


def _exchange_spec(entry: Mapping[str, Any]) -> dict[str, Any]:
    rest = dict(entry)
    if rest.pop("internal", False):
        raise ConfigurationError(f"the operator's Exchange cannot be internal: {entry['name']!r}")
    return _fields(rest, _EXCHANGE, "Exchange")


def _queue_spec(entry: Mapping[str, Any]) -> dict[str, Any]:
    arguments = dict(entry.get("arguments", {}))
    kind = arguments.pop("x-queue-type", None)
    spec = _fields({**entry, "arguments": arguments}, _QUEUE, "Queue")
    return spec if kind is None else {**spec, "type": kind}


def _binding_spec(entry: Mapping[str, Any]) -> dict[str, Any]:
    return _fields(entry, _BINDING, "Binding")


def _federation_spec(parameter: Mapping[str, Any]) -> dict[str, Any]:
    value = {key: v for key, v in parameter["value"].items() if key != "uri"}
    return {
        "name": parameter["name"],
        "vhost": parameter["vhost"],
        **_fields(value, _UPSTREAM, "Federation"),
        "uriSecret": {"name": uri_secret_name(parameter["name"])},
    }


def _policy_maker(sets: Mapping[str, Mapping[str, Any]]) -> _Spec:
    def spec(entry: Mapping[str, Any]) -> dict[str, Any]:
        fields = _fields(entry, _POLICY, "Policy")
        fields["definition"] = _without_sets(fields["definition"], sets)
        return fields

    return spec


def _without_sets(
    definition: Mapping[str, Any], sets: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """``definition`` naming no upstream set of the document's (no kind makes one): its one
    upstream, or RabbitMQ's implicit set of every upstream in the vhost."""
    named = definition.get(_SET_COMPONENT)
    if named is None or named == "all":
        return dict(definition)
    if named not in sets:
        raise ConfigurationError(f"the upstream set {named!r} is not in the document")
    rest = {key: value for key, value in definition.items() if key != _SET_COMPONENT}
    members = [member["upstream"] for member in sets[named]["value"]]
    if len(members) == 1:
        return {**rest, _UPSTREAM_COMPONENT: members[0]}
    return {**rest, _SET_COMPONENT: "all"}


def _object_name(entry: Mapping[str, Any]) -> str:
    return dns_name(str(entry["name"]))


def _binding_name(entry: Mapping[str, Any]) -> str:
    return dns_name(f"{entry['destination']}-{entry['routing_key']}")


def _check_names(resources: Sequence[Mapping[str, Any]]) -> None:
    """Refuse two resources of a kind under one name (names that differ only in case or
    in characters DNS names lack: ``a_b`` and ``a-b``)."""
    seen: set[tuple[str, str]] = set()
    for resource in resources:
        key = (resource["kind"], resource["metadata"]["name"])
        if key in seen or not key[1]:
            raise ConfigurationError(f"two {key[0]} resources would be named {key[1]!r}")
        seen.add(key)

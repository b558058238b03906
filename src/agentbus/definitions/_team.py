"""RabbitMQ definitions for a team: its topology, and a user per service allowed only its part.

The document is the one ``rabbitmqctl import_definitions`` and the management plugin
load. Besides the exchanges, service queues, bindings and policies the bus declares, it
has one broker user per agent service (the service's name; instances are ``<service>-<n>``)
and, for each user, what the wire contract lets it do and nothing else:

- configure / write / read on the vhost: the exchanges, its own service queue, its own
  instance and feed queues (``<exchange>.instance.<user>-*``), the dead-letter queue it
  declares, the artifact streams it stores to or is stored for
  (``<exchange>.artifacts.<writer>.<reader>``, itself one of the two); ``amq.default``
  for replies to ``reply_to`` queues and chunks of artifacts (write only);
- topic write on the exchange: requests to the services it may call (and their
  instances), the broadcast requests of its role, replies and events to its callers,
  broadcast events;
- topic read (what it may bind): its own service's and instances' keys and broadcasts.

So a user cannot publish a request to a service it may not call, nor consume another's
queue: the broker refuses both. Users get no password (``password_hash`` empty): they
log in with a client certificate (EXTERNAL) until an operator sets one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from agentbus._exceptions import ConfigurationError
from agentbus._topology import SCHEDULES_LEASE, Topology, lease_arguments
from agentbus.definitions._site_grants import (
    check_peers,
    link_users,
    outbox_names,
    outbox_topic_permissions,
)
from agentbus.envelopes import is_valid_id

__all__ = [
    "Grant",
    "definitions",
    "permissions_of",
    "team_grants",
    "topic_permissions_of",
]

REGISTRY: Final = "registry"
LEADER: Final = "leader"
_HASHING: Final = "rabbit_password_hashing_sha256"
_DEFAULT_EXCHANGE: Final = r"amq\.default"  # replies go to reply_to queues through it
_DEAD_LETTER_MAX_LENGTH: Final = 100_000
_AUDIT_MAX_BYTES: Final = 10_000_000_000  # besides the age: a bound on the disk it takes


@dataclass(frozen=True, slots=True)
class Grant:
    """One broker user and what it may do on the bus.

    Attributes:
        user: The broker user (a service's name, or a client's).
        service: The service it serves, if any (its queue and keys are its own).
        calls: The services whose queues and instances it may send requests to.
        broadcasts: The actions it may broadcast as requests (``announce``, ``cancel``).
        calls_instances: Whether it may request any team instance directly (the
            registry's ``describe``).
        audits: Whether it may read the audit stream.
        keeps_plans: Whether it keeps plan journals and their durable reply queues (the
            leader's durable plans: ``<exchange>.journal.*``, ``<exchange>.replies.*``),
            and the leases the leaders take turns under (schedules: ``<exchange>.lease.*``).
        watches: Whether it watches the whole team, as ``agentbus dashboard`` does: it
            broadcasts ``announce`` (and ``cancel``, its action on plans), asks any
            instance to ``describe`` itself, browses the dead-letter queue, reads the
            team's artifact streams (the files plans return, downloaded), and sends
            ``answer_question`` to any service (the leader too): a person answers the
            team's questions from the page. The broker tells requests apart by service,
            not by action: it may send any request to the team's services.
    """

    user: str
    service: str | None = None
    calls: frozenset[str] = field(default_factory=frozenset)
    broadcasts: frozenset[str] = field(default_factory=frozenset)
    calls_instances: bool = False
    audits: bool = False
    keeps_plans: bool = False
    watches: bool = False


def team_grants(
    services: Iterable[str],
    *,
    calls: Mapping[str, Iterable[str]] | None = None,
    clients: Mapping[str, Iterable[str]] | None = None,
    auditors: Iterable[str] = (),
    dashboards: Iterable[str] = (),
    across_sites: bool = False,
) -> list[Grant]:
    """Return the grants of a team: one per service, one per client.

    The roles of the built-in services: the ``registry`` broadcasts ``announce`` and asks
    any instance to ``describe`` itself; the ``leader`` calls every service and
    broadcasts ``cancel``. Other services call what ``calls`` gives them; a client (a user
    that serves nothing, such as the CLI of an operator) calls what ``clients`` gives it.
    ``auditors`` may read the audit stream, ``dashboards`` watch the team (``Grant.watches``);
    a client of that name is added if needed. ``across_sites``: calls may name services
    that run at a peer site only (docs/sites.md), not among ``services``.

    Raises:
        ConfigurationError: a name is not a valid id, is given twice, or a call names
            a service outside the team.
    """
    team = list(dict.fromkeys(services))
    extra = {name: set(targets) for name, targets in (calls or {}).items()}
    asked = dict(clients or {})
    users = [*team, *asked]
    _check_users(users)
    known = None if across_sites else team
    _check_calls([*extra.items(), *((c, set(t)) for c, t in asked.items())], known, users)
    grants = [_service_grant(service, team, extra.get(service, ())) for service in team]
    grants += [Grant(user=client, calls=frozenset(wanted)) for client, wanted in asked.items()]
    readers, watchers = set(auditors), set(dashboards)
    grants += _reader_grants((readers | watchers) - set(users))
    grants = [replace(g, audits=True) if g.user in readers else g for g in grants]
    return [_watching(g, team) if g.user in watchers else g for g in grants]


def _watching(grant: Grant, team: Sequence[str]) -> Grant:
    """``grant`` with the dashboard's rights added (``Grant.watches``)."""
    return replace(
        grant,
        watches=True,
        calls=grant.calls | frozenset(team),  # the answers to the team's questions
        broadcasts=grant.broadcasts | {"announce", "cancel"},
        calls_instances=True,
    )


def _check_users(users: Sequence[str]) -> None:
    for name in users:
        if not is_valid_id(name):
            raise ConfigurationError(f"{name!r} is not a valid service or user name")
    if len(set(users)) != len(users):
        raise ConfigurationError("a client has the name of a service")


def _check_calls(
    calls: Iterable[tuple[str, set[str]]], team: Sequence[str] | None, users: Sequence[str]
) -> None:
    # team None: any valid service name may be called (one served at a peer site).
    for name, targets in calls:
        if team is None:
            _check_users(sorted(targets))
            continue
        unknown = sorted(targets - set(team))
        if unknown:
            raise ConfigurationError(f"{name!r} calls {unknown}, which the team does not have")
        if name not in users:
            raise ConfigurationError(f"calls are given for {name!r}, which the team does not have")


@dataclass(frozen=True, slots=True)
class _Role:
    """What a built-in service may do besides the calls it is given."""

    calls_team: bool = False
    broadcasts: frozenset[str] = frozenset()
    calls_instances: bool = False
    keeps_plans: bool = False


_ROLES: Final = {
    LEADER: _Role(calls_team=True, broadcasts=frozenset({"cancel"}), keeps_plans=True),
    REGISTRY: _Role(broadcasts=frozenset({"announce"}), calls_instances=True),
}


def _service_grant(service: str, team: Sequence[str], callees: Iterable[str]) -> Grant:
    role = _ROLES.get(service, _Role())
    calls = set(callees) | (set(team) if role.calls_team else set())
    return Grant(
        user=service,
        service=service,
        calls=frozenset(calls - {service}),
        broadcasts=role.broadcasts,
        calls_instances=role.calls_instances,
        keeps_plans=role.keeps_plans,
    )


def _reader_grants(names: Iterable[str]) -> list[Grant]:
    """The grants of auditors and dashboards that are no user of the team: an auditor calls
    nothing; a dashboard's calls are its role's (``_watching``)."""
    grants = []
    for name in sorted(names):
        if not is_valid_id(name):
            raise ConfigurationError(f"{name!r} is not a valid user name")
        grants.append(Grant(user=name))
    return grants


def definitions(
    grants: Sequence[Grant],
    *,
    exchange: str = "agentbus",
    vhost: str = "/",
    queue_type: str = "quorum",
    delivery_limit: int = 5,
    plan_delivery_limit: int = 20,
    users: bool = True,
    audit_max_age: str = "7D",
    extra: Mapping[str, Any] | None = None,
    peers: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """Build the definitions document of the team ``grants`` describe.

    Args:
        grants: The team's users (``team_grants``).
        exchange: The bus's exchange name.
        vhost: The virtual host.
        queue_type: The service queues' type (``quorum`` or ``classic``).
        delivery_limit: The redeliveries a quorum service queue allows.
        plan_delivery_limit: The redeliveries the leader's quorum queue allows (its
            policy allows the larger of the two: a queue keeps the lower of its own and
            its policy's).
        users: Whether to add the users and their permissions (else the topology only).
        audit_max_age: How long the audit stream keeps records (its retention policy).
        extra: Definitions an operator adds (users, permissions, topic permissions of
            clients that are not agents, ...): each list is appended to the document's.
        peers: The peer sites this site's requests may cross to (docs/sites.md), each
            with the user its link logs in here as (None: one the operator adds): each
            requester may publish its requests on their outboxes, each link user read
            its site's outbox.

    Raises:
        ConfigurationError: a peer site or link user is not valid.
    """
    topology = Topology(exchange)
    services = [grant.service for grant in grants if grant.service is not None]
    document: dict[str, Any] = {
        "vhosts": [{"name": vhost}],
        "policies": _policies(
            topology, vhost, max(delivery_limit, plan_delivery_limit), audit_max_age
        ),
        "exchanges": [
            _exchange(vhost, topology.exchange, "topic"),
            _exchange(vhost, topology.dead_letter_exchange, "fanout"),
        ],
        "queues": [
            {
                "vhost": vhost,
                "name": topology.dead_letter_queue,
                "durable": True,
                "auto_delete": False,
                "arguments": _dead_letter_arguments(queue_type),
            },
            {
                "vhost": vhost,
                "name": topology.audit_stream,
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-queue-type": "stream"},
            },
            *(
                _service_queue(
                    topology,
                    vhost,
                    s,
                    queue_type,
                    plan_delivery_limit if s == LEADER else delivery_limit,
                )
                for s in services
            ),
            *_lease_queues(topology, vhost, queue_type, services),
        ],
        "bindings": [
            _binding(vhost, topology.dead_letter_exchange, topology.dead_letter_queue, ""),
            *(
                _binding(vhost, topology.exchange, topology.service_queue(s), f"agent.{s}.{kind}")
                for s in services
                for kind in ("request", "event")
            ),
        ],
    }
    if users:
        document.update(user_definitions(grants, topology, vhost, peers or {}))
    for key, entries in (extra or {}).items():
        document.setdefault(key, [])
        document[key] = [*document[key], *entries]
    return document


def user_definitions(
    grants: Sequence[Grant],
    topology: Topology,
    vhost: str,
    peers: Mapping[str, str | None],
) -> dict[str, list[dict[str, Any]]]:
    """The ``users``, ``permissions`` and ``topic_permissions`` entries of ``grants`` and of
    ``peers``' link users (``definitions``); the operator's resources are made from them.

    Raises:
        ConfigurationError: a peer site or link user is not valid.
    """
    check_peers(peers, [g.user for g in grants])
    team = frozenset(g.service for g in grants if g.service is not None)
    requests = {g.user: request_writes(g, team) for g in grants}
    outboxes = outbox_names(topology, list(peers))
    links = link_users(topology, vhost, peers, _HASHING)
    return {
        "users": [
            {"name": g.user, "password_hash": "", "hashing_algorithm": _HASHING, "tags": []}
            for g in grants
        ]
        + links["users"],
        "permissions": [
            permissions_of(g, topology, vhost, outboxes if requests[g.user] else ()) for g in grants
        ]
        + links["permissions"],
        "topic_permissions": [topic_permissions_of(g, topology, vhost, grants) for g in grants]
        + outbox_topic_permissions(requests, topology, vhost, list(peers)),
    }


def _dead_letter_arguments(queue_type: str) -> dict[str, Any]:
    """The dead-letter queue as an agent declares it: quorum where its queues are."""
    arguments: dict[str, Any] = {"x-max-length": _DEAD_LETTER_MAX_LENGTH, "x-overflow": "drop-head"}
    if queue_type == "quorum":
        arguments["x-queue-type"] = "quorum"
    return arguments


def _callers(grants: Sequence[Grant]) -> dict[str, set[str]]:
    """For each service's user, the users that may call it."""
    callers: dict[str, set[str]] = {}
    services = {g.service for g in grants if g.service is not None}
    for grant in grants:
        targets = set(grant.calls) | (services if grant.calls_instances else set())
        for target in targets:
            callers.setdefault(target, set()).add(grant.user)
    return callers


def _escape(name: str) -> str:
    """``name`` as a regex (ids and exchange names have no metacharacter but ``.``)."""
    return name.replace(".", r"\.")


def _alternatives(names: Iterable[str]) -> str:
    return "|".join(_escape(name) for name in sorted(names))


def _ids(names: Iterable[str], *, bare: bool = True) -> str:
    """A regex of the agent ids of ``names``' users: ``name-<n>``, or ``name`` itself if
    ``bare`` and it has no ``-`` (the ownership admission checks: ``sent_by``)."""
    forms = []
    for name in sorted(names):
        if bare and "-" not in name:
            forms.append(f"{_escape(name)}(-[^.-]+)?")
        else:
            forms.append(f"{_escape(name)}-[^.-]+")
    return f"({'|'.join(forms)})"


def permissions_of(
    grant: Grant, topology: Topology, vhost: str, outboxes: Sequence[str] = ()
) -> dict[str, str]:
    """The vhost permissions of ``grant``'s user (a definitions document's entry).

    ``outboxes``: the peer sites' outboxes (regexes) it may publish its requests on.
    """
    e = _escape
    own = _ids([grant.user])
    queues = [
        rf"{e(topology.exchange)}\.instance\.{own}",
        rf"{e(topology.exchange)}\.feed\.{own}\.[^.]+",
    ]
    # The artifact streams it is one of the pair of: what it stored for another user
    # (<writer>.<reader>), and what others stored for it. No one else reads them.
    user = e(grant.user)
    queues += [
        rf"{e(topology.exchange)}\.artifacts\.{user}\.[^.]+",
        rf"{e(topology.exchange)}\.artifacts\.[^.]+\.{user}",
    ]
    if grant.service is not None:
        # Its service's queue, and its conversation journal: its alone to read.
        queues += [
            e(topology.service_queue(grant.service)),
            e(topology.conversations(grant.service)),
        ]
    if grant.keeps_plans:
        queues += [
            rf"{e(topology.exchange)}\.journal\.[^.]+",
            rf"{e(topology.exchange)}\.replies\.[^.]+",
            rf"{e(topology.exchange)}\.lease\.[^.]+",
        ]
    exchanges = [e(topology.exchange), e(topology.dead_letter_exchange)]
    declared = [*exchanges, e(topology.dead_letter_queue), *queues]
    readable = [*exchanges, *queues]
    if grant.audits:
        readable.append(e(topology.audit_stream))
    if grant.watches:
        # The dead letters it browses, and the files the team's plans return (a download).
        readable.append(e(topology.dead_letter_queue))
        readable.append(rf"{e(topology.exchange)}\.artifacts\.[^.]+\.[^.]+")
    return {
        "user": grant.user,
        "vhost": vhost,
        "configure": f"^({'|'.join(declared)})$",
        "write": f"^({'|'.join([*declared, _DEFAULT_EXCHANGE, *outboxes])})$",
        "read": f"^({'|'.join(readable)})$",
    }


def topic_permissions_of(
    grant: Grant, topology: Topology, vhost: str, grants: Sequence[Grant]
) -> dict[str, str]:
    """The topic permissions of ``grant``'s user in a team of ``grants``."""
    callers = _callers(grants).get(grant.user, set())
    team = frozenset(g.service for g in grants if g.service is not None)
    return _topic_permissions(grant, topology, vhost, callers, team)


def request_writes(grant: Grant, team: frozenset[str]) -> list[str]:
    """The routing keys of the requests ``grant``'s user may send (regexes, unanchored)."""
    writes = []
    if grant.calls:
        writes.append(rf"agent\.{_ids(grant.calls)}\.request")
    if grant.calls_instances and team:
        writes.append(rf"agent\.{_ids(team, bare=False)}\.request")
    return writes


def _topic_permissions(
    grant: Grant, topology: Topology, vhost: str, callers: set[str], team: frozenset[str]
) -> dict[str, str]:
    writes = []
    if grant.service is not None:
        # A classic service queue's poison count republishes a request to its own key.
        writes.append(rf"agent\.{_escape(grant.service)}\.request")
    writes += request_writes(grant, team)
    if grant.broadcasts:
        writes.append(rf"broadcast\.request\.({_alternatives(grant.broadcasts)})")
    # Its callers, and itself: a broadcaster gets its own broadcast and answers it.
    writes.append(rf"agent\.{_ids(callers | {grant.user})}\.(response|event)")
    writes.append(r"broadcast\.event\.[^.]+")
    own = [grant.user] if grant.service is None else sorted({grant.user, grant.service})
    reads = [
        rf"agent\.{_ids(own)}\.(request|response|event|\*)",
        r"broadcast\.(request|event)\.[^.]+",
    ]
    return {
        "user": grant.user,
        "vhost": vhost,
        "exchange": topology.exchange,
        "write": f"^({'|'.join(writes)})$",
        "read": f"^({'|'.join(reads)})$",
    }


def _exchange(vhost: str, name: str, kind: str) -> dict[str, Any]:
    return {
        "vhost": vhost,
        "name": name,
        "type": kind,
        "durable": True,
        "auto_delete": False,
        "internal": False,
        "arguments": {},
    }


def _service_queue(
    topology: Topology, vhost: str, service: str, queue_type: str, delivery_limit: int
) -> dict[str, Any]:
    arguments: dict[str, Any] = {"x-dead-letter-exchange": topology.dead_letter_exchange}
    if queue_type == "quorum":
        arguments = {"x-queue-type": "quorum", **arguments, "x-delivery-limit": delivery_limit}
    return {
        "vhost": vhost,
        "name": topology.service_queue(service),
        "durable": True,
        "auto_delete": False,
        "arguments": arguments,
    }


def _lease_queues(
    topology: Topology, vhost: str, queue_type: str, services: Sequence[str]
) -> list[dict[str, Any]]:
    # Declared here, so a leader set up with another queue type fails on its first
    # declare and leaves no queue of the wrong type for the next leaders to trip on.
    if LEADER not in services:
        return []
    lease = {
        "vhost": vhost,
        "name": topology.lease_queue(SCHEDULES_LEASE),
        "durable": True,
        "auto_delete": False,
        "arguments": lease_arguments(quorum=queue_type == "quorum"),
    }
    return [lease]


def _binding(vhost: str, source: str, destination: str, key: str) -> dict[str, Any]:
    return {
        "vhost": vhost,
        "source": source,
        "destination": destination,
        "destination_type": "queue",
        "routing_key": key,
        "arguments": {},
    }


def _policies(
    topology: Topology, vhost: str, delivery_limit: int, audit_max_age: str
) -> list[dict[str, Any]]:
    e = _escape
    return [
        {
            "vhost": vhost,
            "name": f"{topology.exchange}-services",
            "pattern": f"^{e(topology.exchange)}\\.service\\.",
            "apply-to": "queues",
            "priority": 1,
            "definition": {
                "dead-letter-exchange": topology.dead_letter_exchange,
                "delivery-limit": delivery_limit,
                "dead-letter-strategy": "at-least-once",
                "overflow": "reject-publish",
                "queue-leader-locator": "balanced",
            },
        },
        {
            "vhost": vhost,
            "name": f"{topology.exchange}-instances",
            "pattern": f"^{e(topology.exchange)}\\.instance\\.",
            "apply-to": "queues",
            "priority": 1,
            "definition": {"dead-letter-exchange": topology.dead_letter_exchange},
        },
        {
            "vhost": vhost,
            "name": f"{topology.exchange}-dead-letter",
            "pattern": f"^{e(topology.dead_letter_queue)}$",
            "apply-to": "queues",
            "priority": 1,
            "definition": {"max-length": _DEAD_LETTER_MAX_LENGTH, "overflow": "drop-head"},
        },
        {
            "vhost": vhost,
            "name": f"{topology.exchange}-audit",
            "pattern": f"^{e(topology.audit_stream)}$",
            "apply-to": "queues",
            "priority": 1,
            "definition": {"max-age": audit_max_age, "max-length-bytes": _AUDIT_MAX_BYTES},
        },
    ]

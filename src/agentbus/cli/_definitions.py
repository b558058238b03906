"""``agentbus definitions``: the RabbitMQ definitions of a team, users and permissions included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson
from pydantic import ValidationError

from agentbus._exceptions import ConfigurationError
from agentbus.agents import AgentCard
from agentbus.cli._context import load_json, print_json, settings_of
from agentbus.cli._output import write_out
from agentbus.cli._serve import _load_agent_class
from agentbus.definitions import (
    credential_secrets,
    definitions,
    federation_definitions,
    federation_resources,
    link_definitions,
    team_grants,
    topology_resources,
    uri_secrets,
)

__all__ = ["definitions_command", "federation_command"]


def _service_name(member: str) -> str:
    """The service of MEMBER: a MODULE:CLASS agent, an agent card's JSON file, or a name."""
    path = Path(member)
    if path.is_file():
        try:
            return AgentCard.model_validate_json(path.read_bytes()).name
        except (OSError, ValidationError) as exc:
            raise click.BadParameter(f"{member!r} is not an agent card: {exc}") from exc
    if ":" in member:
        name = _load_agent_class(member).name
        if not name:
            raise click.BadParameter(f"{member!r} has no service name")
        return name
    return member


def _pairs(values: tuple[str, ...], option: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for value in values:
        name, sep, targets = value.partition("=")
        if not sep or not name:
            raise click.BadParameter(
                f"expected NAME=SERVICE[,SERVICE...], got {value!r}", param_hint=option
            )
        found.setdefault(name, []).extend(t for t in targets.split(",") if t)
    return found


@click.command("definitions")
@click.argument("members", nargs=-1, required=True, metavar="MEMBER...")
@click.option(
    "--calls",
    multiple=True,
    metavar="SERVICE=S1,S2",
    help="Services SERVICE may call besides its role's (repeatable).",
)
@click.option(
    "--client",
    multiple=True,
    metavar="USER=S1,S2",
    help="A user that serves nothing and calls S1, S2 (repeatable): an operator's CLI.",
)
@click.option(
    "--auditor", multiple=True, metavar="USER", help="A user that may read the audit stream."
)
@click.option(
    "--dashboard",
    multiple=True,
    metavar="USER",
    help="A user that may watch the whole team (agentbus dashboard): announce, describe "
    "any instance, browse the dead-letter queue, cancel plans, answer questions (requests "
    "to every service).",
)
@click.option(
    "--peer-site",
    "peer_sites",
    multiple=True,
    metavar="SITE[=LINKUSER]",
    help="A peer site requests may cross to (repeatable; docs/sites.md): requesters may "
    "publish their requests on its outbox; LINKUSER, the user its link logs in here as, "
    "may read that outbox (with k8s-secrets, it gets a Secret). Calls may then name "
    "services that run at peer sites only.",
)
@click.option("--audit-max-age", default="7D", show_default=True, help="Audit retention.")
@click.option(
    "--merge", metavar="JSON", help="Definitions to add (users, permissions...): inline or @file."
)
@click.option("--vhost", default="/", show_default=True, help="The virtual host.")
@click.option(
    "--queue-type", type=click.Choice(["quorum", "classic"]), default="quorum", show_default=True
)
@click.option("--delivery-limit", type=click.IntRange(1), default=5, show_default=True)
@click.option(
    "--plan-delivery-limit",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="The leader's queue's (a plan is returned by every fault under its leader).",
)
@click.option("--topology-only", is_flag=True, help="Leave out the users and their permissions.")
@click.option(
    "--format",
    "output",
    type=click.Choice(["rabbitmq", "k8s", "k8s-secrets"]),
    default="rabbitmq",
    show_default=True,
    help="rabbitmq: a definitions document; k8s: the messaging topology operator's User, "
    "Permission and TopicPermission(s) of each user; k8s-secrets: a Secret per user with "
    "a new random password (apply once, keep out of git).",
)
@click.option(
    "--cluster",
    default="agentbus-rabbitmq",
    show_default=True,
    help="The RabbitmqCluster the k8s resources are for.",
)
@click.pass_context
def definitions_command(
    ctx: click.Context,
    members: tuple[str, ...],
    calls: tuple[str, ...],
    client: tuple[str, ...],
    auditor: tuple[str, ...],
    dashboard: tuple[str, ...],
    peer_sites: tuple[str, ...],
    audit_max_age: str,
    merge: str | None,
    vhost: str,
    queue_type: str,
    delivery_limit: int,
    plan_delivery_limit: int,
    topology_only: bool,
    output: str,
    cluster: str,
) -> None:
    """Print the RabbitMQ definitions of a team whose MEMBERs are services.

    Each MEMBER is an agent class (MODULE:CLASS), an agent card (a JSON file) or a
    service name (registry, leader). Each service gets a broker user of its name that
    may publish only what the wire contract lets it and read only its own queues; load
    the output with 'rabbitmqctl import_definitions' or the management plugin, or
    with --format k8s apply it as the messaging topology operator's resources.
    """
    extra: Any = load_json(merge, "--merge")
    if extra is not None and not isinstance(extra, dict):
        raise click.BadParameter("expected a JSON object of definitions", param_hint="--merge")
    peers = _peers(peer_sites)
    try:
        grants = team_grants(
            [_service_name(m) for m in members],
            calls=_pairs(calls, "--calls"),
            clients=_pairs(client, "--client"),
            auditors=auditor,
            dashboards=dashboard,
            across_sites=bool(peers),
        )
        exchange = settings_of(ctx).exchange
        if output == "k8s":
            _print_documents(
                topology_resources(
                    grants, cluster=cluster, exchange=exchange, vhost=vhost, peers=peers
                )
            )
            return
        if output == "k8s-secrets":
            _print_documents(credential_secrets(grants, peers=peers))
            return
        document = definitions(
            grants,
            exchange=exchange,
            vhost=vhost,
            queue_type=queue_type,
            delivery_limit=delivery_limit,
            plan_delivery_limit=plan_delivery_limit,
            users=not topology_only,
            audit_max_age=audit_max_age,
            extra=extra,
            peers=peers,
        )
    except ConfigurationError as exc:
        raise click.UsageError(exc.message) from exc
    print_json(document)


def _peers(values: tuple[str, ...]) -> dict[str, str | None]:
    """``SITE[=LINKUSER]`` options as {site: link user or None}."""
    found: dict[str, str | None] = {}
    for value in values:
        site, sep, user = value.partition("=")
        if not site or (sep and not user):
            raise click.BadParameter(
                f"expected SITE or SITE=LINKUSER, got {value!r}", param_hint="--peer-site"
            )
        found[site] = user or None
    return found


def _print_documents(documents: list[dict[str, Any]]) -> None:
    """A YAML stream of JSON documents (JSON is YAML): what kubectl and kustomize read."""
    write_out(
        "".join(
            f"---\n{orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()}\n"
            for document in documents
        )
    )


@click.command("federation")
@click.argument("site")
@click.option(
    "--peer",
    "peers",
    multiple=True,
    required=True,
    metavar="SITE=URI",
    help="A peer site and the AMQP URI of its broker, credentials included (repeatable); "
    "with --format k8s, the URI may be left out (SITE): it goes in a Secret.",
)
@click.option("--vhost", default="/", show_default=True, help="The virtual host.")
@click.option(
    "--link-expires",
    type=click.FloatRange(min=1),
    default=3600.0,
    show_default=True,
    help="Seconds a cut link's queue at a peer (and what it holds) is kept.",
)
@click.option(
    "--link-message-ttl",
    type=click.FloatRange(min=0.001),
    default=None,
    help="Seconds anything waits in a link's queue at most (default: each message's own).",
)
@click.option(
    "--format",
    "output",
    type=click.Choice(["rabbitmq", "k8s", "k8s-secrets"]),
    default="rabbitmq",
    show_default=True,
    help="rabbitmq: a definitions document; k8s: the messaging topology operator's "
    "Exchange, Queue, Binding, Federation and Policy resources; k8s-secrets: a Secret per "
    "peer with its URI, which its Federation reads (keep out of git).",
)
@click.option(
    "--cluster",
    default="agentbus-rabbitmq",
    show_default=True,
    help="The RabbitmqCluster the k8s resources are for.",
)
@click.pass_context
def federation_command(
    ctx: click.Context,
    site: str,
    peers: tuple[str, ...],
    vhost: str,
    link_expires: float,
    link_message_ttl: float | None,
    output: str,
    cluster: str,
) -> None:
    """Print the definitions that link SITE's broker with its peers' by federation.

    Load it with 'rabbitmqctl import_definitions' at SITE, and each peer's own at that
    peer (the rabbitmq_federation plugin enabled at each), or with --format k8s apply it
    as the messaging topology operator's resources (and the URIs' Secrets, --format
    k8s-secrets); run SITE's agents with AGENTBUS_SITE=SITE and AGENTBUS_PEER_SITES
    listing the peers (docs/sites.md).
    """
    uris = _peer_uris(peers, needed=output != "k8s")
    exchange = settings_of(ctx).exchange
    try:
        if output == "k8s":
            links = link_definitions(
                site,
                list(uris),
                exchange=exchange,
                vhost=vhost,
                link_expires=link_expires,
                link_message_ttl=link_message_ttl,
            )
            _print_documents(federation_resources(links, cluster=cluster))
            return
        document = federation_definitions(
            site,
            {name: uri for name, uri in uris.items() if uri is not None},
            exchange=exchange,
            vhost=vhost,
            link_expires=link_expires,
            link_message_ttl=link_message_ttl,
        )
    except ConfigurationError as exc:
        raise click.UsageError(exc.message) from exc
    if output == "k8s-secrets":
        _print_documents(uri_secrets(document))
        return
    print_json(document)


def _peer_uris(values: tuple[str, ...], *, needed: bool) -> dict[str, str | None]:
    """``--peer`` options as {site: its URI}; a URI may be left out where not ``needed``."""
    uris: dict[str, str | None] = {}
    for value in values:
        name, sep, uri = value.partition("=")
        if not name or (sep and not uri) or (needed and not uri):
            raise click.BadParameter(f"expected SITE=URI, got {value!r}", param_hint="--peer")
        uris[name] = uri or None
    return uris

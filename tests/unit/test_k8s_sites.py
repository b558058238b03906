"""Sites on Kubernetes: ``agentbus federation --format k8s`` and ``agentbus definitions
--peer-site ... --format k8s`` carry the very values of the definitions documents, field by
field (docs/sites.md, "On Kubernetes"); what the operator has no field for is refused.

The field tables below are the operator's JSON names (rabbitmq/messaging-topology-operator,
``api/v1beta1/*_types.go``), written here apart from the code's: a value the code moves to
the wrong field, or leaves out, is a difference.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
import pytest
import yaml
from click.testing import CliRunner

from agentbus import ConfigurationError
from agentbus.cli import cli
from agentbus.definitions import federation_definitions, federation_resources, secret_name

EXCHANGE = {
    "name": "name",
    "vhost": "vhost",
    "type": "type",
    "durable": "durable",
    "auto_delete": "autoDelete",
    "arguments": "arguments",
}
QUEUE = {k: v for k, v in EXCHANGE.items() if k != "type"}  # the type: x-queue-type
BINDING = {
    "vhost": "vhost",
    "source": "source",
    "destination": "destination",
    "destination_type": "destinationType",
    "routing_key": "routingKey",
    "arguments": "arguments",
}
UPSTREAM = {
    "exchange": "exchange",
    "max-hops": "maxHops",
    "expires": "expires",
    "message-ttl": "messageTTL",
    "ack-mode": "ackMode",
    "trust-user-id": "trustUserId",
    "reconnect-delay": "reconnectDelay",
    "prefetch-count": "prefetch-count",
}
POLICY = {
    "name": "name",
    "vhost": "vhost",
    "pattern": "pattern",
    "apply-to": "applyTo",
    "priority": "priority",
    "definition": "definition",
}
CLUSTER = {"name": "rmq"}
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LINK_FLAGS = ["--vhost", "team", "--link-expires", "600", "--link-message-ttl", "120"]
Stream = list[dict[str, Any]]


def _invoke(*args: str) -> str:
    done = CliRunner().invoke(cli, list(args))
    assert done.exit_code == 0, done.output
    return done.output


def _stream(output: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(output) if doc]


def _federation(peers: Mapping[str, str]) -> tuple[dict[str, Any], Stream, Stream]:
    """Site ``eu``'s links to ``peers`` three ways: the definitions document, the operator's
    resources and the URIs' Secrets, each from the CLI with the same options."""
    with_uris = [f for site, uri in peers.items() for f in ("--peer", f"{site}={uri}")]
    bare = [f for site in peers for f in ("--peer", site)]
    document = orjson.loads(_invoke("federation", "eu", *with_uris, *LINK_FLAGS))
    resources = _stream(
        _invoke("federation", "eu", *bare, *LINK_FLAGS, "--format", "k8s", "--cluster", "rmq")
    )
    secrets = _stream(_invoke("federation", "eu", *with_uris, "--format", "k8s-secrets"))
    return document, resources, secrets


def _of(resources: Iterable[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [r for r in resources if r["kind"] == kind]


def _field_differences(
    what: str, entry: Mapping[str, Any], spec: Mapping[str, Any], table: Mapping[str, str]
) -> list[str]:
    """What ``spec`` says otherwise than ``entry`` under ``table``; fields ``entry`` lacks
    (an empty ``arguments`` is no arguments)."""
    found = [f"{what}: no field for {key!r}" for key in entry if key not in table]
    for key, field in table.items():
        if key not in entry:
            if field in spec:
                found.append(f"{what}: {field} set, {key!r} is not")
            continue
        got = spec.get(field, {} if key == "arguments" else None)
        if got != entry[key]:
            found.append(f"{what}: {field} is {got!r}, {key!r} is {entry[key]!r}")
    return found


def _named(entry: Mapping[str, Any]) -> tuple[str, str]:
    return entry["vhost"], entry["name"]


def _edge(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    """A binding's ends and key, as a document or a resource names them."""
    return entry["source"], entry["destination"], entry.get("routing_key", entry.get("routingKey"))


def _matching(
    resources: Stream,
    kind: str,
    entries: list[Mapping[str, Any]],
    key: Callable[[Mapping[str, Any]], tuple[str, ...]],
) -> list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    """Each entry with the resource of ``kind`` that ``key`` pairs it with (None: none)."""
    specs = {key(r["spec"]): r["spec"] for r in _of(resources, kind)}
    return [(entry, specs.get(key(entry))) for entry in entries]


def _link_differences(document: Mapping[str, Any], resources: Stream, secrets: Stream) -> list[str]:
    """Every difference between a links document and its resources and Secrets."""
    found: list[str] = []
    wanted = {"Exchange": "exchanges", "Queue": "queues", "Binding": "bindings"}
    for kind, key in wanted.items():
        if len(_of(resources, kind)) != len(document[key]):
            found.append(f"{len(_of(resources, kind))} {kind}s for {len(document[key])} {key}")
    for entry, spec in _matching(resources, "Exchange", document["exchanges"], _named):
        if spec is None or entry["internal"]:
            found.append(f"exchange {entry['name']}: no Exchange, or internal")
            continue
        rest = {k: v for k, v in entry.items() if k != "internal"}
        found += _field_differences(f"exchange {entry['name']}", rest, spec, EXCHANGE)
    for entry, spec in _matching(resources, "Queue", document["queues"], _named):
        found += _queue_differences(entry, spec)
    for entry, spec in _matching(resources, "Binding", document["bindings"], _edge):
        what = f"binding {_edge(entry)}"
        found += (
            [f"{what}: none"] if spec is None else _field_differences(what, entry, spec, BINDING)
        )
    found += _upstream_differences(document, resources, secrets)
    found += _policy_differences(document, resources)
    for resource in resources:
        if resource["spec"]["rabbitmqClusterReference"] != CLUSTER:
            found.append(f"{resource['kind']} {resource['metadata']['name']}: another cluster")
    return found


def _queue_differences(entry: Mapping[str, Any], spec: Mapping[str, Any] | None) -> list[str]:
    if spec is None:
        return [f"queue {entry['name']}: no Queue"]
    arguments = dict(entry["arguments"])
    found = []
    if spec.get("type") != arguments.pop("x-queue-type", None):
        found.append(f"queue {entry['name']}: type {spec.get('type')!r}")
    rest = {"arguments": arguments, **{k: v for k, v in entry.items() if k != "arguments"}}
    visible = {k: v for k, v in spec.items() if k != "type"}
    return found + _field_differences(f"queue {entry['name']}", rest, visible, QUEUE)


def _upstream_differences(
    document: Mapping[str, Any], resources: Stream, secrets: Stream
) -> list[str]:
    upstreams = [p for p in document["parameters"] if p["component"] == "federation-upstream"]
    federations = {f["spec"]["name"]: f["spec"] for f in _of(resources, "Federation")}
    uris = {s["metadata"]["name"]: s["stringData"]["uri"] for s in secrets}
    found = []
    if federations.keys() != {p["name"] for p in upstreams} or len(secrets) != len(upstreams):
        found.append(f"Federations {sorted(federations)}, Secrets {sorted(uris)}")
    for parameter in upstreams:
        spec = federations.get(parameter["name"], {})
        what = f"upstream {parameter['name']}"
        value = {k: v for k, v in parameter["value"].items() if k != "uri"}
        fields = {k: v for k, v in spec.items() if k in UPSTREAM.values()}
        found += _field_differences(what, value, fields, UPSTREAM)
        if spec.get("vhost") != parameter["vhost"]:
            found.append(f"{what}: vhost {spec.get('vhost')!r}")
        if uris.get(spec.get("uriSecret", {}).get("name")) != parameter["value"]["uri"]:
            found.append(f"{what}: its Secret does not hold its URI")
    return found


def _policy_differences(document: Mapping[str, Any], resources: Stream) -> list[str]:
    sets = {
        p["name"]: [m["upstream"] for m in p["value"]]
        for p in document["parameters"]
        if p["component"] == "federation-upstream-set"
    }
    policies = {p["spec"]["name"]: p["spec"] for p in _of(resources, "Policy")}
    federations = {f["spec"]["name"] for f in _of(resources, "Federation")}
    found = [] if len(policies) == len(document["policies"]) else ["another count of Policies"]
    for entry in document["policies"]:
        what = f"policy {entry['name']}"
        spec = policies.get(entry["name"], {})
        rest = {k: v for k, v in entry.items() if k != "definition"}
        fields = {k: v for k, v in spec.items() if k != "definition"}
        found += _field_differences(what, rest, fields, POLICY)
        members = sets[entry["definition"]["federation-upstream-set"]]
        # No resource makes an upstream set: the one upstream, or every one in the vhost.
        one = len(members) == 1
        said = {"federation-upstream": members[0]} if one else {"federation-upstream-set": "all"}
        if spec.get("definition") != said:
            found.append(f"{what}: definition {spec.get('definition')!r}, not {said!r}")
        if set(members) != federations:
            found.append(f"{what}: the set is {members}, the Federations {federations}")
    return found


@pytest.mark.parametrize(
    "peers",
    [
        {"us": "amqp://fed-eu:secret@rabbit.us:5672/"},
        {"us": "amqp://fed-eu:a@rabbit.us:5672/", "Asia_1": "amqps://fed-eu:b@rabbit.ap/sites"},
    ],
    ids=["two-sites", "three-sites"],
)
def test_the_operators_resources_carry_the_definitions_values(peers: dict[str, str]) -> None:
    """Every exchange, queue, binding, upstream and policy of the document is a resource
    with the same values; each Federation's Secret holds its upstream's URI."""
    document, resources, secrets = _federation(peers)
    assert _link_differences(document, resources, secrets) == []
    assert {r["kind"] for r in resources} == {
        "Exchange",
        "Queue",
        "Binding",
        "Federation",
        "Policy",
    }
    names = [(r["kind"], r["metadata"]["name"]) for r in [*resources, *secrets]]
    assert len(set(names)) == len(names)
    assert all(DNS_1123.match(name) for _, name in names), names


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("Federation", ("maxHops",), 2),
        ("Federation", ("ackMode",), "on-publish"),
        ("Federation", ("messageTTL",), None),
        ("Federation", ("uriSecret", "name"), "another"),
        ("Queue", ("type",), "quorum"),
        ("Binding", ("routingKey",), "broadcast.*"),
        ("Exchange", ("autoDelete",), True),
        ("Policy", ("definition",), {"federation-upstream-set": "agentbus-sites"}),
        ("Policy", ("applyTo",), "all"),
    ],
)
def test_the_comparison_has_teeth(kind: str, path: tuple[str, ...], value: object) -> None:
    """A value changed, or one left out, in one resource is a difference."""
    document, resources, secrets = _federation({"us": "amqp://fed-eu:secret@rabbit.us:5672/"})
    changed = copy.deepcopy(resources)
    node = next(r for r in changed if r["kind"] == kind)["spec"]
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    assert _link_differences(document, changed, secrets) != []


def test_a_value_the_operator_has_no_field_for_is_refused() -> None:
    """Rather than left out: an upstream setting, an internal exchange, another parameter."""
    document = federation_definitions("eu", {"us": "amqp://rabbit.us"})
    tampered = [copy.deepcopy(document) for _ in range(4)]
    tampered[0]["parameters"][0]["value"]["bind-nowait"] = True
    tampered[1]["exchanges"][0]["internal"] = True
    tampered[2]["parameters"].append({"vhost": "/", "component": "shovel", "name": "x"})
    tampered[3]["users"] = []
    for broken in tampered:
        with pytest.raises(ConfigurationError):
            federation_resources(broken, cluster="rmq")
    assert federation_resources(document, cluster="rmq")


def test_the_k8s_links_need_no_uri_and_the_others_do() -> None:
    """--format k8s takes a bare SITE (the URI is in the Secret); the URI's formats need one."""
    runner = CliRunner()
    for flags in (["--peer", "us"], ["--peer", "us", "--format", "k8s-secrets"]):
        result = runner.invoke(cli, ["federation", "eu", *flags])
        assert result.exit_code == 2, result.output
        assert "expected SITE=URI" in result.output
    result = runner.invoke(cli, ["federation", "eu", "--peer", "eu", "--format", "k8s"])
    assert result.exit_code == 2
    assert "is not its own" in result.output
    clash = ["--peer", "a_b", "--peer", "a-b", "--format", "k8s"]
    result = runner.invoke(cli, ["federation", "eu", *clash])
    assert result.exit_code == 2
    assert "would be named" in result.output


def _grant_differences(
    document: Mapping[str, Any], resources: Stream, secrets: Stream
) -> list[str]:
    """Every difference between the users and permissions of a definitions document and
    the operator's User, Permission and TopicPermission resources (and their Secrets)."""
    found = []
    logins = {s["metadata"]["name"]: s["stringData"]["username"] for s in secrets}
    users = [r["spec"]["importCredentialsSecret"]["name"] for r in _of(resources, "User")]
    if sorted(logins.get(u, "?") for u in users) != sorted(u["name"] for u in document["users"]):
        found.append(f"users {users}, Secrets {logins}")
    permissions = [
        (p["spec"]["userReference"]["name"], p["spec"]["vhost"], p["spec"]["permissions"])
        for p in _of(resources, "Permission") + _of(resources, "TopicPermission")
    ]
    wanted = [
        (
            secret_name(p["user"]),
            p["vhost"],
            {k: v for k, v in p.items() if k not in ("user", "vhost")},
        )
        for p in [*document["permissions"], *document["topic_permissions"]]
    ]
    key = orjson.dumps
    if sorted(map(key, permissions)) != sorted(map(key, wanted)):
        found.append(f"permissions differ:\n{permissions}\n{wanted}")
    if any(r["spec"]["rabbitmqClusterReference"] != CLUSTER for r in _of(resources, "User")):
        found.append("a User of another cluster")
    return found


TEAM = ["registry", "leader", "--client", "ops=billing,registry", "--dashboard", "ops"]


@pytest.mark.parametrize(
    "options",
    [
        ["--peer-site", "us=fed-us"],
        ["--peer-site", "us=fed-us", "--peer-site", "ap"],
        ["--peer-site", "us=fed-us", "--peer-site", "ap=fed-ap", "--vhost", "team"],
    ],
    ids=["one-link-user", "a-peer-without-one", "two-in-a-vhost"],
)
def test_peer_sites_grant_the_same_as_operator_resources(options: list[str]) -> None:
    """--peer-site with --format k8s: each requester's write on each outbox, its request
    keys there, each link user and what it may read: the document's grants, and no more."""
    team = [*TEAM, *options]
    document = orjson.loads(_invoke("definitions", *team))
    resources = _stream(_invoke("definitions", *team, "--format", "k8s", "--cluster", "rmq"))
    secrets = _stream(_invoke("definitions", *team, "--format", "k8s-secrets"))
    assert _grant_differences(document, resources, secrets) == []
    outboxes = {
        r["spec"]["permissions"]["exchange"]
        for r in _of(resources, "TopicPermission")
        if ".outbox." in r["spec"]["permissions"]["exchange"]
    }
    assert outboxes
    assert outboxes == {e["exchange"] for e in document["topic_permissions"]} - {"agentbus"}


def test_the_grant_comparison_has_teeth() -> None:
    """An outbox permission left out, or a link user's read widened, is a difference."""
    options = [*TEAM, "--peer-site", "us=fed-us"]
    document = orjson.loads(_invoke("definitions", *options))
    resources = _stream(_invoke("definitions", *options, "--format", "k8s", "--cluster", "rmq"))
    secrets = _stream(_invoke("definitions", *options, "--format", "k8s-secrets"))
    outbox = next(r for r in resources if r["metadata"]["name"].endswith("-agentbus-outbox-us"))
    assert _grant_differences(document, [r for r in resources if r is not outbox], secrets)
    widened = copy.deepcopy(resources)
    link = next(
        r
        for r in widened
        if r["metadata"]["name"] == "agentbus-user-fed-us" and r["kind"] == "Permission"
    )
    link["spec"]["permissions"]["read"] = ".*"
    assert _grant_differences(document, widened, secrets)
    assert _grant_differences(document, resources, secrets[:-1])  # the link user's Secret

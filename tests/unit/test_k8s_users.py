"""The team's users as the messaging topology operator's resources, and their Secrets."""

from __future__ import annotations

import re

import orjson
from click.testing import CliRunner

from agentbus._topology import Topology
from agentbus.cli import cli
from agentbus.definitions import credential_secrets, team_grants, topology_resources
from agentbus.definitions._team import permissions_of, topic_permissions_of


def test_each_user_gets_a_user_a_permission_and_a_topic_permission() -> None:
    grants = team_grants(["leader", "my_agent"], clients={"Ops": ["leader"]})
    resources = topology_resources(grants, cluster="rmq", exchange="bus")
    by_kind = {(r["kind"], r["metadata"]["name"]): r for r in resources}
    audit = by_kind.pop(("Queue", "agentbus-audit"))["spec"]
    assert (audit["name"], audit["type"], audit["durable"]) == ("bus.audit", "stream", True)
    names = {"agentbus-user-leader", "agentbus-user-my-agent", "agentbus-user-ops"}
    for kind in ("User", "Permission", "TopicPermission"):
        assert {n for k, n in by_kind if k == kind} == names
    user = by_kind[("User", "agentbus-user-my-agent")]
    assert user["spec"] == {
        "rabbitmqClusterReference": {"name": "rmq"},
        "importCredentialsSecret": {"name": "agentbus-user-my-agent"},
    }
    topology = Topology("bus")
    [mine] = [g for g in grants if g.user == "my_agent"]
    permission = by_kind[("Permission", "agentbus-user-my-agent")]["spec"]
    expected = permissions_of(mine, topology, "/")
    assert permission["permissions"] == {k: expected[k] for k in ("configure", "write", "read")}
    topic = by_kind[("TopicPermission", "agentbus-user-my-agent")]["spec"]
    expected = topic_permissions_of(mine, topology, "/", grants)
    assert topic["permissions"] == {k: expected[k] for k in ("exchange", "write", "read")}
    assert topic["userReference"] == {"name": "agentbus-user-my-agent"}


def test_secrets_hold_the_user_name_and_a_fresh_password_each() -> None:
    grants = team_grants(["registry", "code"])
    first, second = credential_secrets(grants), credential_secrets(grants)
    assert [s["stringData"]["username"] for s in first] == ["registry", "code"]
    assert [s["metadata"]["name"] for s in first] == [
        "agentbus-user-registry",
        "agentbus-user-code",
    ]
    passwords = {s["stringData"]["password"] for s in [*first, *second]}
    assert len(passwords) == 4
    assert all(len(p) >= 32 for p in passwords)


def _documents(output: str) -> list[dict[str, object]]:
    return [orjson.loads(part) for part in output.split("---\n") if part.strip()]


def test_the_cli_prints_a_yaml_stream_of_the_resources() -> None:
    done = CliRunner().invoke(
        cli, ["definitions", "registry", "code", "--format", "k8s", "--cluster", "rmq"]
    )
    assert done.exit_code == 0, done.output
    docs = _documents(done.output)
    kinds = ["User", "Permission", "TopicPermission"] * 2
    assert [d["kind"] for d in docs] == [*kinds, "Queue"]
    assert all(d["spec"]["rabbitmqClusterReference"] == {"name": "rmq"} for d in docs)
    secrets = CliRunner().invoke(cli, ["definitions", "registry", "--format", "k8s-secrets"])
    [secret] = _documents(secrets.output)
    assert secret["kind"] == "Secret"
    assert secret["stringData"]["username"] == "registry"


def test_a_broadcaster_may_answer_its_own_broadcast() -> None:
    """The leader gets its own ``cancel`` broadcast, the registry its ``announce``: each may
    answer itself; a service that broadcasts nothing may still not answer a stranger."""

    grants = team_grants(["registry", "leader", "code"])
    topology = Topology("agentbus")
    writes = {g.user: topic_permissions_of(g, topology, "/", grants)["write"] for g in grants}
    assert re.fullmatch(writes["leader"], "agent.leader-1a2b3c4d.response")
    assert re.fullmatch(writes["registry"], "agent.registry-1a2b3c4d.response")
    assert not re.fullmatch(writes["code"], "agent.billing-1.response")

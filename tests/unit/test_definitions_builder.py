"""The definitions document of a team: roles, permissions, and names that cannot work."""

from __future__ import annotations

import re

import pytest

from agentbus import ConfigurationError
from agentbus.bus import Topology
from agentbus.definitions import definitions, team_grants


def _topics(document: dict[str, object], user: str) -> dict[str, str]:
    rows = document["topic_permissions"]
    assert isinstance(rows, list)
    found: dict[str, str] = next(row for row in rows if row["user"] == user)
    return found


def _may(pattern: str, key: str) -> bool:
    return re.fullmatch(pattern, key) is not None


def test_each_role_may_publish_exactly_its_contract_keys() -> None:
    """leader calls every service; registry describes instances; a worker only answers."""
    grants = team_grants(
        ["registry", "leader", "text", "code"],
        calls={"code": ["text"]},
        clients={"ops": ["leader"]},
    )
    document = definitions(grants)
    leader, registry = _topics(document, "leader"), _topics(document, "registry")
    text, code, ops = _topics(document, "text"), _topics(document, "code"), _topics(document, "ops")
    assert _may(leader["write"], "agent.text.request")
    assert _may(leader["write"], "agent.text-1.request")
    assert _may(leader["write"], "broadcast.request.cancel")
    assert not _may(leader["write"], "broadcast.request.announce")
    assert _may(registry["write"], "broadcast.request.announce")
    assert _may(registry["write"], "agent.code-ab12.request")
    assert not _may(registry["write"], "agent.code.request")
    assert _may(code["write"], "agent.text.request")
    assert not _may(text["write"], "agent.code.request")
    assert _may(text["write"], "agent.leader-1.response")
    assert _may(text["write"], "agent.code-1.event"), "code calls text: text may answer it"
    assert not _may(text["write"], "agent.ops-1.response"), "ops never calls text"
    assert _may(ops["write"], "agent.leader.request")
    assert not _may(ops["write"], "agent.text.request")
    assert _may(text["read"], "agent.text-9.*")
    assert not _may(text["read"], "agent.code.request")


def test_users_read_only_their_own_queues() -> None:
    """text reads its service and instance queues, never code's; auditors read the stream."""
    document = definitions(
        team_grants(["text", "code"], clients={"ops": []}, auditors=["ops", "audit"])
    )
    rows = document["permissions"]
    by_user = {row["user"]: row for row in rows}
    topology = Topology("agentbus")
    text = by_user["text"]
    assert _may(text["read"], topology.service_queue("text"))
    assert _may(text["read"], topology.instance_queue("text-1"))
    assert not _may(text["read"], topology.service_queue("code"))
    assert not _may(text["read"], topology.instance_queue("code-1"))
    assert not _may(text["read"], topology.audit_stream)
    assert _may(by_user["ops"]["read"], topology.audit_stream)
    assert _may(by_user["audit"]["read"], topology.audit_stream)
    assert [u["password_hash"] for u in document["users"]] == ["", "", "", ""]


def test_a_dashed_user_owns_only_its_suffixed_ids() -> None:
    """caller-eu's ids are caller-eu-<n>; the bare caller-eu is caller's instance eu."""
    document = definitions(team_grants(["w"], clients={"caller": ["w"], "caller-eu": ["w"]}))
    by_user = {row["user"]: row for row in document["permissions"]}
    topology = Topology("agentbus")
    assert _may(by_user["caller"]["configure"], topology.instance_queue("caller-eu"))
    assert not _may(by_user["caller"]["configure"], topology.instance_queue("caller-eu-1"))
    assert _may(by_user["caller-eu"]["configure"], topology.instance_queue("caller-eu-1"))
    assert not _may(by_user["caller-eu"]["configure"], topology.instance_queue("caller-eu"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"services": ["a"], "calls": {"a": ["b"]}}, "does not have"),
        ({"services": ["a"], "calls": {"z": ["a"]}}, "does not have"),
        ({"services": ["a b"]}, "not a valid"),
        ({"services": ["a"], "clients": {"a": []}}, "name of a service"),
    ],
)
def test_a_team_that_cannot_be_granted_is_refused(kwargs: dict[str, object], message: str) -> None:
    """Unknown callees, unknown callers, bad names, clashes: a ConfigurationError."""
    with pytest.raises(ConfigurationError, match=message):
        team_grants(**kwargs)  # type: ignore[arg-type]


def test_operators_rules_are_appended() -> None:
    """--merge: an operator's users and permissions join the generated ones."""
    extra = {"users": [{"name": "backup", "password_hash": "x", "tags": []}]}
    document = definitions(team_grants(["a"]), extra=extra)
    assert [u["name"] for u in document["users"]] == ["a", "backup"]


def test_artifact_streams_are_read_by_their_pair_of_users_alone() -> None:
    """A user reads (and declares) the artifact streams it stores to or is stored for;
    a third user reads neither side's, even of a service it calls."""
    document = definitions(team_grants(["text", "code"], clients={"ops": ["text"]}))
    by_user = {row["user"]: row for row in document["permissions"]}
    topology = Topology("agentbus")
    text_for_ops = topology.artifact_stream("text", "ops")
    ops_for_text = topology.artifact_stream("ops", "text")
    for user, stream in (("text", text_for_ops), ("ops", text_for_ops), ("text", ops_for_text)):
        assert _may(by_user[user]["read"], stream), (user, stream)
        assert _may(by_user[user]["configure"], stream), (user, stream)
    assert not _may(by_user["code"]["read"], text_for_ops)
    assert not _may(by_user["code"]["read"], ops_for_text)
    assert not _may(by_user["ops"]["read"], topology.artifact_stream("text", "code"))
    assert not _may(by_user["text"]["read"], topology.artifact_stream("code", "ops"))

"""``agentbus definitions --dashboard USER``: a user that may watch the whole team.

``agentbus dashboard`` broadcasts ``announce`` as it starts, asks each instance to
``describe`` itself for its card, browses the dead-letter queue, may broadcast
``cancel`` for a plan, and sends ``answer_question`` to the service whose skill asked
(or to the leader, for a plan's question). Under generated permissions a user needs
this role for each of those; without it the broker refuses them (the dashboard could
not even start).
"""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from agentbus.bus import Topology
from agentbus.cli._main import cli
from agentbus.definitions import definitions, team_grants


def _may(pattern: str, key: str) -> bool:
    return re.fullmatch(pattern, key) is not None


def _rows(document: dict[str, object], key: str) -> dict[str, dict[str, str]]:
    rows = document[key]
    assert isinstance(rows, list)
    return {row["user"]: row for row in rows}


def test_a_dashboard_user_watches_the_team_and_answers_its_questions() -> None:
    """announce, cancel, describe any instance, browse dead letters, read the team's
    artifacts, send answers to every service of the team (the leader's too); nothing more."""
    team = ["registry", "leader", "text"]
    watching = definitions(team_grants(team, clients={"ops": ["leader"]}, dashboards=["ops"]))
    plain = definitions(team_grants(team, clients={"ops": ["leader"]}))
    topology = Topology("agentbus")
    ops = _rows(watching, "topic_permissions")["ops"]
    assert _may(ops["write"], "broadcast.request.announce")
    assert _may(ops["write"], "broadcast.request.cancel")
    assert _may(ops["write"], "agent.text-1f2e.request")  # describe, to an instance
    # answer_question, to the service whose skill asked; a plan's question to the leader.
    # The broker tells requests apart by service, not action: these are calls.
    for service in team:
        assert _may(ops["write"], f"agent.{service}.request")
    assert not _may(ops["write"], "agent.other.request"), "only the team's services"
    assert not _may(ops["write"], "broadcast.request.shutdown")
    text = _rows(watching, "topic_permissions")["text"]
    assert _may(text["write"], "agent.ops-1.response"), "text may answer the answer"
    read = _rows(watching, "permissions")["ops"]["read"]
    assert _may(read, topology.dead_letter_queue)
    assert not _may(read, topology.service_queue("text"))
    # The files plans return, downloaded from the page: any pair's artifact stream.
    assert _may(read, "agentbus.artifacts.text.leader")
    assert not _may(read, "agentbus.artifacts.text")
    # Without the role: none of it.
    plain_read = _rows(plain, "permissions")["ops"]["read"]
    assert not _may(plain_read, topology.dead_letter_queue)
    assert not _may(plain_read, "agentbus.artifacts.text.leader")
    assert _may(plain_read, "agentbus.artifacts.text.ops"), "what is stored for it"
    plain_ops = _rows(plain, "topic_permissions")["ops"]
    assert not _may(plain_ops["write"], "broadcast.request.announce")
    assert not _may(plain_ops["write"], "agent.text-1f2e.request")
    assert not _may(plain_ops["write"], "agent.text.request")
    assert _may(plain_ops["write"], "agent.leader.request"), "its --client calls"


def test_a_dashboard_user_outside_the_team_is_added() -> None:
    """--dashboard names a user no member or client has: it gets a user of its own."""
    result = CliRunner().invoke(cli, ["definitions", "text", "--dashboard", "watch"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert [u["name"] for u in document["users"]] == ["text", "watch"]
    watch = _rows(document, "topic_permissions")["watch"]
    assert _may(watch["write"], "broadcast.request.announce")
    assert _may(watch["write"], "agent.text.request"), "its answers to text's questions"
    assert not _may(watch["write"], "agent.other.request")
    text = _rows(document, "topic_permissions")["text"]
    assert _may(text["write"], "agent.watch-1.response"), "text may answer its describe"

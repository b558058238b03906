"""``agentbus definitions`` from classes, cards and names; bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from agentbus.agents.builtin import TextAgent
from agentbus.cli._main import cli


def test_members_are_classes_cards_and_names(tmp_path: Path) -> None:
    """A class's name, a card's name, a plain name: three services, their users, a client."""
    card = tmp_path / "billing.json"
    card.write_text(json.dumps({"id": "billing-1", "name": "billing", "skills": []}))
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"users": [{"name": "backup", "password_hash": "", "tags": []}]}))
    result = CliRunner().invoke(
        cli,
        [
            "--exchange", "shop", "definitions", "agentbus.agents.builtin:TextAgent", str(card),
            "leader", "--calls", "billing=text", "--client", "ops=leader", "--merge", f"@{extra}",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    users = [u["name"] for u in document["users"]]
    assert users == [TextAgent.name, "billing", "leader", "ops", "backup"]
    assert {q["name"] for q in document["queues"]} >= {"shop.service.billing", "shop.audit"}
    topics = {p["user"]: p for p in document["topic_permissions"]}
    assert "agent\\.(text(-[^.-]+)?)\\.request" in topics["billing"]["write"]


def test_a_call_to_a_service_outside_the_team_is_one_line() -> None:
    """The CLI says which call cannot be granted, on one line, exit status 2."""
    done = subprocess.run(
        [sys.executable, "-m", "agentbus", "definitions", "text", "--calls", "text=ghost"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "'text' calls ['ghost'], which the team does not have" in done.stderr
    assert done.stdout == ""


def test_peer_sites_grant_requests_on_their_outboxes_and_a_link_user() -> None:
    """With --peer-site, a requester may publish its requests (only) on the peer's outbox,
    may call a service served at the peer only, and the peer's link user reads its outbox."""
    result = CliRunner().invoke(
        cli,
        ["definitions", "registry", "--client", "ops=billing", "--peer-site", "us=fed-us"],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert [u["name"] for u in document["users"]] == ["registry", "ops", "fed-us"]
    permissions = {p["user"]: p for p in document["permissions"]}
    assert permissions["ops"]["write"].endswith("|agentbus\\.outbox\\.us)$")
    assert permissions["fed-us"]["read"] == "^(agentbus\\.outbox\\.us|federation: .*)$"
    assert "outbox" not in permissions["fed-us"]["write"]
    outbox = {
        p["user"]: p["write"]
        for p in document["topic_permissions"]
        if p["exchange"] == "agentbus.outbox.us"
    }
    assert outbox["ops"] == "^(agent\\.(billing(-[^.-]+)?)\\.request)$"
    assert set(outbox) == {"registry", "ops"}  # the registry's describe of any instance


def test_a_bad_peer_site_is_one_line() -> None:
    runner = CliRunner()
    for flags, says in (
        (["--peer-site", "us="], "expected SITE or SITE=LINKUSER"),
        (["--peer-site", "us=registry"], "cannot be the link user"),
        (["--peer-site", "us=registry", "--format", "k8s"], "cannot be the link user"),
        (["--peer-site", "us=reg istry", "--format", "k8s-secrets"], "cannot be the link user"),
    ):
        result = runner.invoke(cli, ["definitions", "registry", *flags])
        assert result.exit_code == 2, result.output
        assert says in result.output

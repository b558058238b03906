"""``agentbus schema asyncapi``: the team's wire contract, checked by the official AsyncAPI parser.

The documents are written by the CLI, from agent classes and from a live team's registry,
and validated by ``@asyncapi/parser`` run by node (tests/clients/asyncapi/check.mjs). The
schemas in them are also held against real envelopes with jsonschema.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import sample_agents
from clients_support import ASYNCAPI_CHECK, LEADER, REGISTRY, WORKER, node_package, started
from processes import AGENTBUS, HERE, Processes

from agentbus.leader import Plan

pytestmark = [pytest.mark.clients]

TEAM = ("agentbus.registry:Registry", "agentbus.leader:Leader", "sample_agents:Worker")


def check(*documents: Path) -> list[dict[str, Any]]:
    """What the official parser says of each document (check.mjs: one JSON line each)."""
    done = subprocess.run(
        [*node_package(ASYNCAPI_CHECK, "@asyncapi/parser"), *map(str, documents)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def schema_cli(*args: str, url: str = "amqp://guest:guest@localhost:5672/") -> dict[str, Any]:
    """Run ``agentbus schema asyncapi ARGS`` and return the document it prints."""
    done = subprocess.run(
        [str(AGENTBUS), "--url", url, "--exchange", "team-x", "schema", "asyncapi", *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=HERE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def validator(document: dict[str, Any], pointer: str) -> jsonschema.Draft202012Validator:
    """A validator of the schema at ``pointer`` in ``document`` (refs resolve in it)."""
    return jsonschema.Draft202012Validator({**document, "$ref": pointer})


def request(service: str, action: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "protocol_version": "1.0",
        "sender_id": "node-client-1",
        "receiver_id": service,
        "message_type": "request",
        "payload": {"action": action, "parameters": parameters},
    }


def test_the_document_of_agent_classes_is_valid_asyncapi(tmp_path: Path) -> None:
    """From classes: valid AsyncAPI 3.0; skills as operations with replies, cards' schemas."""
    document = schema_cli(*TEAM)
    path = tmp_path / "team.json"
    path.write_text(json.dumps(document))

    [verdict] = check(path)

    assert verdict["valid"], verdict["errors"]
    assert verdict["version"] == "3.0.0"
    assert verdict["warnings"] == []
    assert {
        "agent.worker.request",
        "agent.leader.request",
        "agent.registry.request",
        "broadcast.event.heartbeat",
        "broadcast.event.plan_progress",
        "agent.{client_id}.event",
        None,  # the reply queue: the request's reply_to
    } <= set(verdict["channels"])
    assert {"worker.square", "leader.run_plan", "registry.list_agents", "worker.ping"} <= set(
        verdict["operations"]
    )
    binding = document["channels"]["worker.request"]["bindings"]["amqp"]
    assert binding["exchange"] == {
        "name": "team-x", "type": "topic", "durable": True, "autoDelete": False,
    }  # fmt: skip
    assert document["servers"]["rabbitmq"]["host"] == "localhost:5672"
    assert "guest" not in json.dumps(document["servers"])
    square = document["operations"]["worker.square"]
    assert square["action"] == "send"
    assert square["reply"]["address"]["location"] == "$message.header#/reply_to"

    # The parameters are the card's schema; the Plan's $defs moved to components.schemas.
    card = sample_agents.Worker(agent_id="worker-x").card
    message = document["components"]["messages"]["worker.square.request"]
    parameters = message["payload"]["properties"]["payload"]["properties"]["parameters"]
    assert parameters == next(s.parameters for s in card.skills if s.name == "square")
    assert document["components"]["schemas"]["Plan"]["required"] == ["subtasks"]

    # The schemas accept what agentbus clients send, and refuse what agents refuse.
    square_request = validator(document, "#/components/messages/worker.square.request/payload")
    assert square_request.is_valid(request("worker", "square", {"n": 7}))
    assert not square_request.is_valid(request("worker", "square", {"n": "seven"}))
    assert not square_request.is_valid(request("worker", "total", {"values": [1]}))
    plan = Plan.model_validate({"subtasks": [{"id": "a", "skill": "square"}]})
    run_plan = validator(document, "#/components/messages/leader.run_plan.request/payload")
    assert run_plan.is_valid(request("leader", "run_plan", {"plan": plan.model_dump(mode="json")}))
    assert not run_plan.is_valid(request("leader", "run_plan", {"plan": {"subtasks": []}}))


def test_the_parser_refuses_a_broken_document(tmp_path: Path) -> None:
    """The check can fail: an operation whose message is not on its channel is refused."""
    document = schema_cli("sample_agents:Worker", "sample_agents:Alpha")
    document["operations"]["alpha.double"]["messages"] = [
        {"$ref": "#/channels/worker.request/messages/square"}
    ]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(document))

    [verdict] = check(path)

    assert not verdict["valid"]
    assert [error["path"] for error in verdict["errors"]] == ["operations.alpha.double.messages.0"]


async def test_the_document_of_a_live_team_matches_its_classes(
    procs: Processes, tmp_path: Path
) -> None:
    """From the registry of a running team: valid, and the same contract as from its classes."""
    team = (procs.registry(REGISTRY), procs.leader(LEADER), procs.agent("Worker", WORKER))
    await started(procs, *team)

    done = await procs.cli("schema", "asyncapi")

    assert done.returncode == 0, done.stderr
    live = json.loads(done.stdout)
    path = tmp_path / "live.json"
    path.write_text(done.stdout)
    [verdict] = await asyncio.to_thread(check, path)
    assert verdict["valid"], verdict["errors"]
    static = await asyncio.to_thread(schema_cli, *TEAM, url=procs.url)
    assert live["info"]["title"] == f"agentbus team on exchange {procs.exchange}"
    binding = live["channels"]["worker.request"]["bindings"]["amqp"]
    assert binding["exchange"]["name"] == procs.exchange
    # The same channels, operations and schemas as the classes give, bar the exchange name.
    for part in ("operations", "components"):
        assert live[part] == static[part]
    assert json.dumps(live["channels"]).replace(procs.exchange, "team-x") == json.dumps(
        static["channels"]
    )


async def test_a_document_needs_a_registry_or_classes(procs: Processes) -> None:
    """No registry on the exchange, or a class that is no agent: one line, exit status 2."""
    await started(procs, procs.agent("Worker", WORKER))

    no_registry = await procs.cli("schema", "asyncapi")
    not_an_agent = await procs.cli("schema", "asyncapi", "sample_agents:asyncio")

    assert no_registry.returncode == 2
    assert no_registry.stdout == ""
    assert no_registry.stderr.strip().splitlines() == [
        "agentbus: error: Unroutable [agent_unavailable]: no queue is bound for routing key "
        "'agent.registry.request': nobody serves it"
    ]
    assert not_an_agent.returncode == 2
    assert "is not an agentbus Agent class" in not_an_agent.stderr

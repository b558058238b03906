"""Unit tests of the AsyncAPI document generator and ``agentbus schema asyncapi`` (no broker).

The official parser validates the documents in tests/clients; these check the generator's
own rules: one card per service, ``$defs`` hoisted with every reference resolving, the server
without credentials, plan progress only for a team that runs plans.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from agentbus.agents import AgentCard, SkillCard
from agentbus.cli import cli
from agentbus.cli._asyncapi_document import asyncapi_document


def card(agent_id: str, service: str, *skills: SkillCard, description: str = "") -> AgentCard:
    return AgentCard(id=agent_id, name=service, description=description, skills=list(skills))


def item_skill(name: str, item: dict[str, Any]) -> SkillCard:
    """A skill whose parameters hold a list of ``Item``, defined in ``$defs``."""
    return SkillCard(
        name=name,
        parameters={
            "$defs": {"Item": item},
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
        },
        result={"$ref": "#/$defs/Item", "$defs": {"Item": item}},
    )


def refs(node: Any) -> list[str]:
    """Every ``$ref`` in ``node``."""
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [ref for value in node.values() for ref in refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in refs(value)]
    return []


def resolve(document: dict[str, Any], ref: str) -> Any:
    """The node at the local JSON pointer ``ref``; KeyError when there is none."""
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_every_reference_resolves_and_no_defs_are_left() -> None:
    """Definitions move to components.schemas; same content shares a name, other gets its own."""
    text = {"type": "object", "properties": {"text": {"type": "string"}}}
    number = {"type": "object", "properties": {"n": {"type": "integer"}}}
    document = asyncapi_document(
        [
            card("a-1", "a", item_skill("one", text), item_skill("two", text)),
            card("b-1", "b", item_skill("three", number)),
        ]
    )

    assert "$defs" not in orjson.dumps(document).decode()
    found = refs(document)
    assert found
    for ref in found:
        resolve(document, ref)  # raises KeyError when dangling
    schemas = document["components"]["schemas"]
    assert schemas["Item"] == text
    assert schemas["b.three.Item"] == number
    three = document["components"]["messages"]["b.three.request"]["payload"]
    parameters = three["properties"]["payload"]["properties"]["parameters"]
    assert parameters["properties"]["items"]["items"] == {
        "$ref": "#/components/schemas/b.three.Item"
    }


def test_one_card_per_service_the_first_by_id() -> None:
    """Instances of a service share one channel; the card of the lowest agent id is used."""
    document = asyncapi_document(
        [
            card("w-2", "w", SkillCard(name="late"), description="second"),
            card("w-1", "w", SkillCard(name="early"), description="first"),
        ]
    )

    channel = document["channels"]["w.request"]
    assert channel["address"] == "agent.w.request"
    assert channel["description"] == "first"
    assert set(channel["messages"]) == {"early", "ping", "describe", "answer_question", "cancel"}
    assert "w.late" not in document["operations"]
    reply = document["operations"]["w.early"]["reply"]
    assert [m["$ref"] for m in reply["messages"]] == [
        "#/channels/replies/messages/w.early.response",
        "#/channels/replies/messages/error",
    ]


@pytest.mark.parametrize(
    ("url", "server"),
    [
        pytest.param(
            "amqp://user:secret@rabbit.example:5673/prod",
            {"host": "rabbit.example:5673", "protocol": "amqp"},
            id="amqp-vhost",
        ),
        pytest.param(
            "amqps://user:secret@rabbit.example/",
            {"host": "rabbit.example:5671", "protocol": "amqps"},
            id="amqps-default-port",
        ),
        pytest.param(
            "amqp://u:secret@node-1:5672/;amqp://u:secret@node-2:5672/",
            {"host": "node-1:5672", "protocol": "amqp"},
            id="cluster-first-node",
        ),
    ],
)
def test_the_server_has_no_credentials(url: str, server: dict[str, str]) -> None:
    document = asyncapi_document([], url=url)

    described = document["servers"]["rabbitmq"]
    assert {key: described[key] for key in server} == server
    assert described["protocolVersion"] == "0-9-1"
    assert "secret" not in orjson.dumps(document).decode()


def test_plan_progress_only_for_a_team_that_runs_plans() -> None:
    runs_plans = asyncapi_document([card("l-1", "lead", SkillCard(name="run_plan"))])
    no_plans = asyncapi_document([card("w-1", "w", SkillCard(name="work"))])

    assert runs_plans["channels"]["client.events"]["address"] == "agent.{client_id}.event"
    assert "plan_progress" in runs_plans["operations"]
    assert "client.events" not in no_plans["channels"]
    assert "plan_progress" not in no_plans["operations"]
    assert {"heartbeat", "agent_online", "agent_offline"} <= set(no_plans["operations"])


def test_the_cli_writes_the_document_of_classes() -> None:
    result = CliRunner().invoke(
        cli, ["--exchange", "team", "schema", "asyncapi", "agentbus.leader:Leader"]
    )

    assert result.exit_code == 0, result.output
    document = orjson.loads(result.output)
    assert document["asyncapi"] == "3.0.0"
    assert document["info"]["title"] == "agentbus team on exchange team"
    plan = document["operations"]["leader.run_plan"]
    assert plan["messages"] == [{"$ref": "#/channels/leader.request/messages/run_plan"}]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            ["asyncapi", "agentbus.leader:Plan"], "is not an agentbus Agent", id="no-agent"
        ),
        pytest.param(["asyncapi", "no_such_module:X"], "cannot import", id="no-module"),
        pytest.param(["plan", "agentbus.leader:Leader"], "with asyncapi only", id="not-asyncapi"),
    ],
)
def test_the_cli_refuses_what_is_no_agent_class(args: list[str], says: str) -> None:
    result = CliRunner().invoke(cli, ["schema", *args])

    assert result.exit_code == 2
    assert says in result.output


def test_definitions_with_references_are_shared_and_draft_07_ones_move_too() -> None:
    """A definition that refers to another is shared, not copied; ``definitions`` move too."""
    nested = {
        "$defs": {
            "Outer": {"type": "object", "properties": {"inner": {"$ref": "#/$defs/Inner"}}},
            "Inner": {"type": "string"},
        },
        "$ref": "#/$defs/Outer",
    }
    draft_07 = {
        "definitions": {"Point": {"type": "array", "items": {"type": "number"}}},
        "type": "object",
        "properties": {"at": {"$ref": "#/definitions/Point"}, "odd": {"$ref": "#/nowhere"}},
    }
    document = asyncapi_document(
        [
            card("a-1", "a", SkillCard(name="one", result=nested)),
            card("b-1", "b", SkillCard(name="two", result=nested, parameters=draft_07)),
        ]
    )

    schemas = document["components"]["schemas"]
    assert {"Outer", "Inner", "Point"} <= set(schemas)
    assert not [name for name in schemas if name.startswith(("a.", "b."))]
    assert schemas["Outer"]["properties"]["inner"] == {"$ref": "#/components/schemas/Inner"}
    two = document["components"]["messages"]["b.two.request"]["payload"]
    parameters = two["properties"]["payload"]["properties"]["parameters"]
    assert parameters["properties"]["at"] == {"$ref": "#/components/schemas/Point"}
    assert parameters["properties"]["odd"] == {"$ref": "#/nowhere"}  # left for the parser

"""How skills become tools and tools skills: names, schemas, results and errors (no broker)."""

from __future__ import annotations

import mcp_types as types
import pytest

from agentbus import InvalidParameters
from agentbus.agents import AgentCard, SkillCard
from agentbus.mcp import ERROR_META, McpTarget, RemoteMcpAgent, tool_name
from agentbus.mcp._schemas import unwrap, wrap
from agentbus.mcp._tools import Route, team_tools, tool_error, tool_result

STRING = {"type": "string"}
OBJECT = {"type": "object", "properties": {"words": {"type": "integer"}}, "required": ["words"]}


def card(service: str, *skills: SkillCard) -> AgentCard:
    return AgentCard(id=f"{service}-1", name=service, skills=list(skills))


def text_skill(name: str, result: dict[str, object] | None = None) -> SkillCard:
    parameters = {"type": "object", "properties": {"text": STRING}, "required": ["text"]}
    return SkillCard(
        name=name, description=f"{name} a text", parameters=parameters, result=result or STRING
    )


def test_a_skill_is_a_tool_named_after_its_service_and_action() -> None:
    """greeter's greet is greeter__greet, with the card's schemas; run_plan keeps its name."""
    cards = {
        "greeter": card("greeter", text_skill("greet")),
        "leader": card("leader", SkillCard(name="run_plan"), SkillCard(name="plan_status")),
    }
    tools = team_tools(cards, leader="leader")
    assert list(tools) == ["greeter__greet", "run_plan", "leader__plan_status"]
    greet = tools[tool_name("greeter", "greet")]
    assert greet.listing.input_schema == text_skill("greet").parameters
    assert greet.listing.output_schema == {
        "type": "object",
        "properties": {"result": STRING},
        "required": ["result"],
    }
    assert greet.listing.description == "greet a text"
    assert (greet.route.service, greet.route.action, greet.route.wrapped) == (
        "greeter",
        "greet",
        True,
    )
    assert tools["run_plan"].route.plans
    assert not tools["leader__plan_status"].route.plans


def test_a_name_two_skills_would_share_is_left_out() -> None:
    """a__b's c and a's b__c would both be a__b__c: the first (by service) keeps it."""
    cards = {"a__b": card("a__b", text_skill("c")), "a": card("a", text_skill("b__c"))}
    tools = team_tools(cards, leader="leader")
    assert list(tools) == ["a__b__c"]
    assert tools["a__b__c"].route.service == "a"


def test_an_object_result_is_the_structured_content_itself() -> None:
    """An object schema stays; anything else is wrapped as {"result": ...}, $defs at the root."""
    assert wrap(OBJECT) is OBJECT
    listed = {"$defs": {"X": OBJECT}, "type": "array", "items": {"$ref": "#/$defs/X"}}
    wrapped = wrap(listed)
    assert wrapped == {
        "type": "object",
        "properties": {"result": {"type": "array", "items": {"$ref": "#/$defs/X"}}},
        "required": ["result"],
        "$defs": {"X": OBJECT},
    }
    assert unwrap(wrapped) == (listed, True)
    assert unwrap(OBJECT) == (OBJECT, False)
    assert unwrap(None) == ({}, False)


def test_results_are_structured_and_text() -> None:
    """A wrapped result's structured content is {"result": value}; the text is the value."""
    wrapped = tool_result(Route("s", "a", wrapped=True), "hello")
    assert wrapped.structured_content == {"result": "hello"}
    assert wrapped.content == [types.TextContent(type="text", text="hello")]
    whole = tool_result(Route("s", "a", wrapped=False), {"words": 2})
    assert whole.structured_content == {"words": 2}
    assert whole.content == [types.TextContent(type="text", text='{"words":2}')]
    assert not whole.is_error


def test_an_error_carries_its_wire_code() -> None:
    """Text ``code: message`` for the model, the whole wire error in _meta for programs."""
    failed = tool_error("timeout", "no answer", {"after": 5})
    assert failed.is_error
    assert failed.content == [types.TextContent(type="text", text="timeout: no answer")]
    assert failed.meta == {
        ERROR_META: {"code": "timeout", "message": "no answer", "details": {"after": 5}}
    }


def test_a_target_is_a_url_or_a_command() -> None:
    """One http(s) word is a URL; anything else a command with its arguments."""
    assert McpTarget.of(["https://example.org/mcp"]).url == "https://example.org/mcp"
    assert McpTarget.of(["uvx", "mcp-server-time"]).command == ["uvx", "mcp-server-time"]
    with pytest.raises(ValueError, match="not both or neither"):
        McpTarget(command=["x"], url="http://x")


def mcp_tool(name: str, output: dict[str, object] | None = None) -> types.Tool:
    parameters = {"type": "object", "properties": {"text": STRING}, "required": ["text"]}
    return types.Tool(
        name=name, description=f"the {name} tool", input_schema=parameters, output_schema=output
    )


def test_tools_are_skills_with_their_schemas() -> None:
    """Input schema as parameters, output schema (unwrapped) as result; names made ids."""
    wrapped_string = {"type": "object", "properties": {"result": STRING}, "required": ["result"]}
    agent_class = RemoteMcpAgent.for_tools(
        [mcp_tool("reverse", wrapped_string), mcp_tool("stats", OBJECT), mcp_tool("slow.wait")],
        service="words",
        version="3.1.0",
    )
    assert agent_class.name == "words"
    skills = agent_class.skills
    assert sorted(skills) == ["reverse", "slow-wait", "stats"]
    assert skills["reverse"].result_schema == STRING
    assert skills["stats"].result_schema == OBJECT
    assert skills["slow-wait"].result_schema == {}
    assert skills["reverse"].parameters_schema == mcp_tool("x").input_schema
    assert skills["reverse"].description == "the reverse tool"


def test_parameters_are_checked_against_the_input_schema() -> None:
    """A call that does not fit the tool's input schema is refused before it is sent."""
    skills = RemoteMcpAgent.for_tools([mcp_tool("reverse")], service="words").skills
    assert skills["reverse"].bind({"text": "a b"}) == {"text": "a b"}
    with pytest.raises(InvalidParameters, match="'text' is a required property"):
        skills["reverse"].bind({"txt": "a b"})

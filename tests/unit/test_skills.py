"""Skills: parameters validated from type hints, results dumped to JSON, cards generated."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from agentbus import Agent, ConfigurationError, InvalidParameters, skill
from agentbus.testing import MemoryBroker, MemoryBus


class Point(BaseModel):
    x: int
    y: int


class Geometry(Agent):
    name = "geometry"
    description = "Shapes and points"
    version = "2.1.0"
    tags = ("math",)
    concurrency = 3

    @skill
    async def move(self, point: Point, dx: int = 0, dy: int = 0) -> Point:
        """Move a point.

        A longer description that is not part of the summary.
        """
        return Point(x=point.x + dx, y=point.y + dy)

    @skill(name="area", description="Area of a rectangle")
    async def rectangle_area(self, width: float, height: float) -> float:
        return width * height

    @skill
    async def names(self) -> list[str]:
        return ["a", "b"]


def test_skills_are_collected_with_names_and_descriptions() -> None:
    """@skill methods become skills; name and description come from the method or the mark."""
    skills = Geometry.skills
    assert sorted(skills) == ["area", "move", "names"]
    assert skills["move"].description == "Move a point."
    assert skills["area"].description == "Area of a rectangle"


def test_bind_validates_and_converts_parameters() -> None:
    """Parameters are validated into typed arguments, defaults filled."""
    arguments = Geometry.skills["move"].bind({"point": {"x": 1, "y": 2}, "dx": 3})
    assert arguments == {"point": Point(x=1, y=2), "dx": 3, "dy": 0}


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        pytest.param({"point": {"x": "one", "y": 2}}, "point.x", id="nested-type"),
        pytest.param({}, "point", id="missing"),
        pytest.param({"point": {"x": 1, "y": 2}, "dz": 1}, "dz", id="unknown-field"),
        pytest.param({"point": {"x": 1, "y": 2}, "dx": "far"}, "dx", id="wrong-type"),
    ],
)
def test_bad_parameters_raise_invalid_parameters_naming_the_field(
    parameters: dict[str, Any], field: str
) -> None:
    """A mismatch is InvalidParameters whose message and details name the field."""
    with pytest.raises(InvalidParameters) as caught:
        Geometry.skills["move"].bind(parameters)
    assert caught.value.code == "invalid_parameters"
    assert field in caught.value.message
    assert field in [error["field"] for error in caught.value.details["errors"]]


async def test_results_are_dumped_as_json_data() -> None:
    """Models, floats and lists are written as the JSON an envelope carries."""
    agent = Geometry(agent_id="geometry-1")
    moved = await agent.move(Point(x=1, y=1), dx=1)

    def dumped(skill: str, result: Any) -> Any:
        fragment = Geometry.skills[skill].dump(result)
        assert isinstance(fragment, orjson.Fragment)  # not copied into dicts first
        return orjson.loads(orjson.dumps(fragment))

    assert dumped("move", moved) == {"x": 2, "y": 1}
    assert dumped("area", await agent.rectangle_area(2, 3.5)) == 7.0
    assert dumped("names", await agent.names()) == ["a", "b"]


def test_a_result_that_may_hold_a_huge_integer_is_dumped_as_data_for_the_encoder_to_check() -> None:
    """Twenty digits in a row may be an integer over 64 bits: such a result goes as data."""
    names = Geometry.skills["names"]
    assert names.dump(["1" * 20, "b"]) == ["1" * 20, "b"]
    assert isinstance(names.dump(["1" * 19]), orjson.Fragment)


def test_card_describes_the_agent_with_json_schemas() -> None:
    """The card carries identity, capacity, tags and a parameters/result schema per skill."""
    card = Geometry(agent_id="geometry-1").card
    assert (card.id, card.name, card.version, card.capacity) == (
        "geometry-1",
        "geometry",
        "2.1.0",
        3,
    )
    assert card.tags == ["math"]
    move = next(s for s in card.skills if s.name == "move")
    assert move.parameters["required"] == ["point"]
    assert move.parameters["properties"]["dx"]["default"] == 0
    assert set(move.result["properties"]) == {"x", "y"}
    area = next(s for s in card.skills if s.name == "area")
    assert area.result == {"type": "number"}


def test_card_digest_is_stable_and_tracks_content() -> None:
    """The same card has the same digest; another capacity changes it."""
    one = Geometry(agent_id="geometry-1").card
    same = Geometry(agent_id="geometry-1").card
    other = Geometry(agent_id="geometry-1", concurrency=5).card
    assert one.digest() == same.digest()
    assert one.digest() != other.digest()


def test_default_instance_id_is_name_plus_suffix() -> None:
    """Without --id an instance is named after its service plus a random suffix."""
    first, second = Geometry(), Geometry()
    assert first.id.startswith("geometry-")
    assert first.id != second.id


def test_an_agent_on_a_given_bus_answers_to_the_bus_id() -> None:
    """Agent(bus=...) takes its bus's id; an explicit id that differs is refused."""
    bus = MemoryBus(MemoryBroker(), agent_id="geometry-7")
    assert Geometry(bus=bus).id == "geometry-7"
    assert Geometry(bus=bus, agent_id="geometry-7").id == "geometry-7"
    with pytest.raises(ConfigurationError, match="differs from its bus's 'geometry-7'"):
        Geometry(bus=bus, agent_id="geometry-8")


def test_sync_skill_is_refused() -> None:
    """A skill must be an async method."""
    with pytest.raises(ConfigurationError):

        class Broken(Agent):
            name = "broken"

            @skill  # type: ignore[type-var]
            def sync(self) -> int:
                return 1


def test_builtin_names_cannot_be_skills() -> None:
    """ping, describe, cancel and announce are reserved."""
    with pytest.raises(ConfigurationError):

        class Clash(Agent):
            name = "clash"

            @skill
            async def ping(self) -> str:
                return "mine"


def test_agent_needs_a_valid_service_name() -> None:
    """An agent without a valid name cannot be created."""

    class Nameless(Agent):
        pass

    with pytest.raises(ConfigurationError):
        Nameless()

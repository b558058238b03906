"""The form-mode rules: which answer schemas an MCP form can ask for, and how.

A form is one flat object of primitive properties (MCP form mode): each answer type a
skill may ask for is either such a form (an object of primitives), the one property
``answer`` of one (a primitive), or refused with the reason.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from agentbus.mcp._forms import answer_type, form_of


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Booking(BaseModel):
    city: str = Field(max_length=40, pattern="^[A-Z]")
    nights: int = Field(ge=1)
    colour: Colour = Colour.RED
    note: str | None = None
    extras: list[Literal["bike", "boat"]] = []
    on: str = Field(json_schema_extra={"format": "date"})


class Stop(BaseModel):
    city: str


class Route(BaseModel):
    stops: list[Stop]


class Nested(BaseModel):
    stop: Stop


def schema(answer: Any) -> dict[str, Any]:
    """The answer schema ``agentbus.ask`` sends for ``answer``."""
    return TypeAdapter(answer).json_schema(mode="serialization")


def answered(field: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"answer": field}, "required": ["answer"]}


@pytest.mark.parametrize(
    ("answer", "form"),
    [
        (str, answered({"type": "string", "title": "Answer"})),
        (bool, answered({"type": "boolean", "title": "Answer"})),
        (float, answered({"type": "number", "title": "Answer"})),
        (
            Annotated[int, Field(ge=0, le=5)],
            answered({"type": "integer", "minimum": 0, "maximum": 5, "title": "Answer"}),
        ),
        (
            Literal["red", "blue"],
            answered({"type": "string", "enum": ["red", "blue"], "title": "Answer"}),
        ),
        (str | None, answered({"type": "string", "title": "Answer"})),
        (
            list[Literal["a", "b"]],
            answered({"type": "array", "items": {"type": "string", "enum": ["a", "b"]},
                      "title": "Answer"}),
        ),
    ],
)  # fmt: skip
def test_a_primitive_is_the_forms_one_property_answer(answer: Any, form: dict[str, Any]) -> None:
    asked = form_of(schema(answer))
    assert (asked.schema, asked.field) == (form, "answer")
    assert asked.answer({"answer": 3}) == 3


def test_an_object_of_primitives_is_the_form_itself() -> None:
    """Each property as form mode has it: what a form has no room for (a pattern) is left
    out, an enum's ``$ref`` inlined, ``X | None`` optional, a list of choices multi-select."""
    asked = form_of(schema(Booking))
    assert asked.field is None
    assert asked.schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "title": "City", "maxLength": 40},
            "nights": {"type": "integer", "title": "Nights", "minimum": 1},
            "colour": {"type": "string", "enum": ["red", "blue"], "title": "Colour",
                       "default": "red"},
            "note": {"type": "string", "title": "Note"},
            "extras": {"type": "array", "items": {"type": "string", "enum": ["bike", "boat"]},
                       "title": "Extras", "default": []},
            "on": {"type": "string", "title": "On", "format": "date"},
        },
        "required": ["city", "nights", "on"],
    }  # fmt: skip
    assert asked.answer({"city": "Oslo", "nights": 2}) == {"city": "Oslo", "nights": 2}


def test_titled_choices_keep_their_titles() -> None:
    titled = {"oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]}
    multiple = {"type": "array", "items": {"anyOf": titled["oneOf"]}, "maxItems": 2}
    asked = form_of({"type": "object", "properties": {"size": titled, "sizes": multiple}})
    assert asked.schema["properties"] == {
        "size": {"type": "string", "oneOf": titled["oneOf"]},
        "sizes": {"type": "array", "items": {"anyOf": titled["oneOf"]}, "maxItems": 2},
    }


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (list[str], "the answer is a list of free values (a form lists choices only)"),
        (Route, "its property 'stops' is a list of free values (a form lists choices only)"),
        (Nested, "its property 'stop' is an object"),
        (dict[str, int], "the answer is an object without named properties"),
        (str | int, "the answer is a value of several kinds"),
        (Literal[1, 2], "the answer is a choice of values that are not all strings"),
        (Any, "the answer is a value of any kind"),
        (None, "the answer is always null"),
    ],
)
def test_what_no_form_can_ask_is_refused_with_the_reason(answer: Any, why: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(why)}") as refused:
        form_of(schema(answer))
    assert str(refused.value).endswith(
        "a form takes strings, numbers, booleans and choices of strings, "
        "alone or as the properties of one object"
    )


def test_a_form_is_asked_on_the_bus_as_an_object_of_its_schema() -> None:
    """run-mcp: the question's answer schema is the server's form, and the answer is
    checked against it."""
    form = {"type": "object", "properties": {"name": {"type": "string", "minLength": 2}},
            "required": ["name"]}  # fmt: skip
    answer = TypeAdapter(answer_type(form))
    assert answer.json_schema(mode="serialization") == form
    assert answer.validate_python({"name": "Al"}) == {"name": "Al"}
    with pytest.raises(ValidationError, match="'A' is too short"):
        answer.validate_python({"name": "A"})
    with pytest.raises(ValidationError, match="'name' is a required property"):
        answer.validate_python({})

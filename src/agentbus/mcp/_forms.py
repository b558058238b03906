"""Questions and MCP forms, both ways: a bus question's answer schema as a form-mode
elicitation's ``requestedSchema``, and an elicitation's schema as a bus answer type.

A form (MCP 2025-06-18 and later, "form mode") is one flat object whose properties are
primitives: a string (``minLength``, ``maxLength``, ``format`` one of ``date``,
``date-time``, ``email``, ``uri``), a number or an integer (``minimum``, ``maximum``), a
boolean, a choice of strings (``enum``, or ``oneOf`` of ``{"const", "title"}``), or several
choices of strings (an array whose ``items`` are such a choice; ``minItems``,
``maxItems``); each with ``title``, ``description`` and ``default``. ``form_of`` makes a
form of an answer schema that fits: an object of such properties as it is, any one such
value as the object's one property ``answer``. Keywords a form has no room for
(``pattern``, ``multipleOf``, ``exclusiveMinimum``...) are left out of it: the agent checks
the answer against its whole schema, and asks again, with the reason, when it does not fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final

from jsonschema import Draft202012Validator
from pydantic import AfterValidator, WithJsonSchema

__all__ = ["ANSWER_FIELD", "Form", "answer_type", "form_of"]

ANSWER_FIELD: Final = "answer"
"""The one property of the form that asks for a value that is not an object."""

_COMMON: Final = ("title", "description", "default")
_KEPT: Final[dict[str, tuple[str, ...]]] = {
    "string": (*_COMMON, "minLength", "maxLength", "format"),
    "number": (*_COMMON, "minimum", "maximum"),
    "integer": (*_COMMON, "minimum", "maximum"),
    "boolean": _COMMON,
}
_FORMATS: Final = frozenset({"date", "date-time", "email", "uri"})
_TAKES: Final = (
    "a form takes strings, numbers, booleans and choices of strings, "
    "alone or as the properties of one object"
)
_MAX_REPORTED: Final = 5


@dataclass(frozen=True, slots=True)
class Form:
    """A form-mode ``requestedSchema``, and where the answer is in what the form returns."""

    schema: dict[str, Any]
    field: str | None = None
    """The one property that holds the answer; None: the answer is the whole object."""

    def answer(self, content: Mapping[str, Any] | None) -> Any:
        """The answer a filled form (``ElicitResult.content``) gives."""
        filled = dict(content or {})
        return filled if self.field is None else filled.get(self.field)


def form_of(schema: Mapping[str, Any]) -> Form:
    """Return the form that asks for a value of ``schema`` (a question's answer schema).

    Raises:
        ValueError: no form can ask for it; the message says why.
    """
    definitions = schema.get("$defs") or {}
    root = _optional(_inline(schema, definitions))
    properties = root.get("properties")
    if root.get("type") == "object" and isinstance(properties, dict) and properties:
        fields: dict[str, Any] = {}
        for name, value in properties.items():
            try:
                fields[name] = _field(value, definitions)
            except ValueError as exc:
                raise ValueError(f"its property {name!r} is {exc}; {_TAKES}") from None
        required = [name for name in root.get("required", ()) if name in fields]
        # Nothing else at the root: the 2026-07-28 wire keeps only these (the message
        # says what the form is for).
        return Form({"type": "object", "properties": fields, "required": required})
    if root.get("type") == "object":
        raise ValueError(f"the answer is an object without named properties; {_TAKES}")
    try:
        field = _field(root, definitions)
    except ValueError as exc:
        raise ValueError(f"the answer is {exc}; {_TAKES}") from None
    field.setdefault("title", "Answer")
    shape = {"type": "object", "properties": {ANSWER_FIELD: field}, "required": [ANSWER_FIELD]}
    return Form(shape, ANSWER_FIELD)


def _inline(schema: Any, definitions: Mapping[str, Any]) -> dict[str, Any]:
    # A local reference (pydantic's ``$defs`` for an enum or a model) as what it names.
    if not isinstance(schema, dict):
        return {}
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/$defs/"):
        named = definitions.get(reference.removeprefix("#/$defs/"))
        rest = {key: value for key, value in schema.items() if key != "$ref"}
        return {**_inline(named, definitions), **rest}
    return schema


def _optional(schema: dict[str, Any]) -> dict[str, Any]:
    # ``X | None`` is X, left out of ``required`` (pydantic does, for a field with a default).
    variants = schema.get("anyOf")
    if not isinstance(variants, list):
        return schema
    kept = [variant for variant in variants if variant != {"type": "null"}]
    if len(kept) != 1 or len(kept) == len(variants):
        return schema
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    if rest.get("default", ...) is None:
        del rest["default"]
    return {**kept[0], **rest}


def _field(schema: Any, definitions: Mapping[str, Any]) -> dict[str, Any]:
    schema = _optional(_inline(schema, definitions))
    kind = schema.get("type")
    if kind == "array":
        return _choices(schema, _inline(schema.get("items"), definitions))
    if "enum" in schema or "const" in schema or "oneOf" in schema:
        return _choice(schema)
    if isinstance(kind, str) and kind in _KEPT:
        field = {key: schema[key] for key in _KEPT[kind] if key in schema}
        if field.get("format") not in _FORMATS:
            field.pop("format", None)
        return {"type": kind, **field}
    raise ValueError(_kind(schema))


def _kind(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if kind == "object":
        return "an object"
    if kind == "null":
        return "always null"
    if isinstance(kind, list) or "anyOf" in schema or "allOf" in schema:
        return "a value of several kinds"
    return "a value of any kind"


def _choice(schema: Mapping[str, Any]) -> dict[str, Any]:
    field = {key: schema[key] for key in _COMMON if key in schema}
    titled = _titled(schema.get("oneOf"))
    if titled is not None:
        return {"type": "string", "oneOf": titled, **field}
    values = schema["enum"] if "enum" in schema else [schema.get("const")]
    choice = {"type": "string", "enum": _strings(values, "a choice of values"), **field}
    if schema.get("enumNames"):
        choice["enumNames"] = schema["enumNames"]
    return choice


def _choices(schema: Mapping[str, Any], items: dict[str, Any]) -> dict[str, Any]:
    if not ("enum" in items or "anyOf" in items or "oneOf" in items):
        raise ValueError("a list of free values (a form lists choices only)")
    titled = _titled(items.get("anyOf") or items.get("oneOf"))
    shown: dict[str, Any] = (
        {"anyOf": titled}
        if titled is not None
        else {"type": "string", "enum": _strings(items.get("enum"), "a list of values")}
    )
    kept = (*_COMMON, "minItems", "maxItems")
    return {"type": "array", "items": shown, **{k: schema[k] for k in kept if k in schema}}


def _titled(options: Any) -> list[dict[str, Any]] | None:
    # Options with titles: ``{"const": value, "title": shown}``, every value a string.
    if not isinstance(options, list) or not options:
        return None
    if not all(isinstance(o, dict) and isinstance(o.get("const"), str) for o in options):
        return None
    return [{"const": o["const"], "title": o.get("title", o["const"])} for o in options]


def _strings(values: Any, what: str) -> list[str]:
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{what} that are not all strings")
    return values


def answer_type(schema: dict[str, Any]) -> Any:
    """The type of a bus question's answer that fills the form ``schema``: an object its
    JSON Schema is ``schema`` itself (what the caller sees), checked against it."""
    checker = Draft202012Validator(schema)

    def fits(value: dict[str, Any]) -> dict[str, Any]:
        errors = sorted(checker.iter_errors(value), key=lambda error: list(error.path))
        if errors:
            raise ValueError("; ".join(error.message for error in errors[:_MAX_REPORTED]))
        return value

    return Annotated[dict[str, Any], WithJsonSchema(schema), AfterValidator(fits)]

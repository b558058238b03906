"""Result schemas between the bus and MCP: an MCP output schema is always an object.

A skill whose result is not an object (a string, a list, ``X | None``) is given the
output schema ``{"result": <its schema>}``, and its structured content is
``{"result": value}``: the convention the MCP SDKs use for a function's non-object
return, so an MCP client of either reads it the same way, and ``unwrap`` reads it back.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["RESULT_KEY", "is_object_schema", "unwrap", "wrap"]

RESULT_KEY: Final = "result"


def is_object_schema(schema: dict[str, Any]) -> bool:
    """Whether every value ``schema`` allows is a JSON object (its ``type`` says so)."""
    return schema.get("type") == "object"


def wrap(schema: dict[str, Any]) -> dict[str, Any]:
    """Return the output schema of a result of ``schema``: the schema itself if an object,
    else an object with the one required property ``result`` (``$defs`` kept at the root)."""
    if is_object_schema(schema):
        return schema
    inner = {key: value for key, value in schema.items() if key != "$defs"}
    wrapped: dict[str, Any] = {
        "type": "object",
        "properties": {RESULT_KEY: inner},
        "required": [RESULT_KEY],
    }
    if "$defs" in schema:
        wrapped["$defs"] = schema["$defs"]
    return wrapped


def unwrap(schema: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """Return the result schema an output schema stands for, and whether it was wrapped.

    An object whose one property is the required ``result`` is a wrapped result (the
    SDKs' convention, and ``wrap``'s): its ``result`` schema, the root's ``$defs`` with it.
    """
    if not schema:
        return {}, False
    properties = schema.get("properties")
    if (
        not is_object_schema(schema)
        or not isinstance(properties, dict)
        or set(properties) != {RESULT_KEY}
        or schema.get("required") != [RESULT_KEY]
    ):
        return schema, False
    inner = dict(properties[RESULT_KEY])
    if "$defs" in schema:
        inner["$defs"] = schema["$defs"]
    return inner, True

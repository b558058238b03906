"""The JSON Schema (Draft 2020-12) of the envelope."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from agentbus.envelopes._codes import PROTOCOL_VERSION
from agentbus.envelopes._models import Envelope

__all__ = ["envelope_schema"]

_DRAFT = "https://json-schema.org/draft/2020-12/schema"
# The models default these for Python callers, but decode refuses an envelope without them.
_WIRE_REQUIRED = ("protocol_version", "message_type")


def envelope_schema() -> dict[str, Any]:
    """Return the JSON Schema of an envelope, with its four payload variants."""
    schema = TypeAdapter(Envelope).json_schema(mode="validation")
    for variant in schema["oneOf"]:
        definition = schema["$defs"][variant["$ref"].rsplit("/", 1)[-1]]
        definition["required"] = [*_WIRE_REQUIRED, *definition["required"]]
    return {
        "$schema": _DRAFT,
        "$id": f"https://agentbus.dev/schema/envelope/{PROTOCOL_VERSION}",
        "title": "agentbus envelope",
        "description": (
            f"An agentbus message, wire contract {PROTOCOL_VERSION}. Unknown fields are allowed "
            "and kept; message_id and timestamp may be left out by foreign clients."
        ),
        **schema,
    }

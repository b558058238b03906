"""Agent cards: a bus service's card as an A2A agent card, and an A2A card as a bus card."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct

from agentbus.agents import AgentCard, SkillCard

__all__ = [
    "BEARER",
    "REST_PREFIX",
    "SCHEMAS_EXTENSION",
    "SITES_EXTENSION",
    "a2a_card",
    "skill_schemas",
]

SCHEMAS_EXTENSION = "urn:agentbus:a2a:skill-schemas:v1"
"""An A2A card extension whose params hold each skill's parameter and result JSON Schemas."""
SITES_EXTENSION = "urn:agentbus:a2a:sites:v1"
"""An A2A card extension whose params list the sites the service's live instances run at."""
BEARER = "bearer"
REST_PREFIX = "/rest"
"""Where, under an agent's URL, the HTTP+JSON (REST) binding is served."""


def a2a_card(
    card: AgentCard,
    url: str,
    *,
    streaming: bool = True,
    secured: bool = True,
    rest_url: str | None = None,
    sites: Sequence[str] = (),
) -> a2a.AgentCard:
    """Return the A2A card of the bus service ``card`` describes, served at ``url``.

    The card names two interfaces: JSON-RPC at ``url``, HTTP+JSON at ``rest_url`` (by default
    ``url`` + ``/rest``).
    ``secured``: it declares the bearer scheme and requires it; else (a gateway without
    keys) it declares no scheme and no requirement. ``sites``: where its live instances
    run, for a team across sites (docs/sites.md), in the extension ``SITES_EXTENSION``.
    """
    schemas = Struct()
    schemas.update(
        {
            skill.name: {"parameters": skill.parameters, "result": skill.result}
            for skill in card.skills
        }
    )
    found = a2a.AgentCard(
        name=card.name,
        description=card.description or f"the {card.name} agent on the bus",
        version=card.version,
        supported_interfaces=[
            a2a.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            a2a.AgentInterface(
                url=rest_url if rest_url is not None else url.rstrip("/") + REST_PREFIX,
                protocol_binding="HTTP+JSON",
                protocol_version="1.0",
            ),
        ],
        capabilities=a2a.AgentCapabilities(
            streaming=streaming,
            push_notifications=True,
            extensions=[
                a2a.AgentExtension(
                    uri=SCHEMAS_EXTENSION,
                    description="JSON Schemas of each skill's parameters and result",
                    params=schemas,
                )
            ],
        ),
        default_input_modes=["application/json", "text/plain"],
        default_output_modes=["application/json", "text/plain"],
        skills=[_skill(card.name, skill) for skill in card.skills],
    )
    if sites:
        where = Struct()
        where.update({"sites": list(sites)})
        found.capabilities.extensions.append(
            a2a.AgentExtension(
                uri=SITES_EXTENSION,
                description="the sites the service's live instances run at",
                params=where,
            )
        )
    if secured:
        found.security_schemes[BEARER].CopyFrom(
            a2a.SecurityScheme(
                http_auth_security_scheme=a2a.HTTPAuthSecurityScheme(
                    scheme="Bearer", description="an API key given by the gateway's operator"
                )
            )
        )
        found.security_requirements.append(
            ParseDict({"schemes": {BEARER: {}}}, a2a.SecurityRequirement())
        )
    return found


def _skill(service: str, skill: SkillCard) -> a2a.AgentSkill:
    return a2a.AgentSkill(
        id=skill.name,
        name=skill.name,
        description=skill.description or skill.name,
        tags=[service],
        input_modes=["application/json", "text/plain"],
        output_modes=["application/json", "text/plain"],
    )


def skill_schemas(card: a2a.AgentCard) -> dict[str, dict[str, Any]]:
    """Return ``{skill: {"parameters": schema, "result": schema}}`` from a card's extension."""
    for extension in card.capabilities.extensions:
        if extension.uri == SCHEMAS_EXTENSION:
            found: dict[str, dict[str, Any]] = MessageToDict(extension.params)
            return found
    return {}

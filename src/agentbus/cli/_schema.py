"""``agentbus schema``: the JSON Schemas of the envelope, a plan and a schedule, and a
team's AsyncAPI document."""

from __future__ import annotations

from typing import Any

import click

from agentbus.cli._asyncapi import team_asyncapi
from agentbus.cli._context import client_id, client_id_option, client_settings, print_json
from agentbus.envelopes import envelope_schema
from agentbus.leader import Plan, Schedule

__all__ = ["plan_schema", "schedule_schema", "schema"]


def plan_schema() -> dict[str, Any]:
    """Return the JSON Schema of a plan."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **Plan.model_json_schema()}


def schedule_schema() -> dict[str, Any]:
    """Return the JSON Schema of a schedule (``schedule_add``'s ``schedule``)."""
    schema = Schedule.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


@click.command()
@click.argument(
    "what", type=click.Choice(["envelope", "plan", "schedule", "asyncapi"]), default="envelope"
)
@click.argument("agents", nargs=-1, metavar="[MODULE:CLASS]...")
@click.option("--registry", "registry_service", default="registry", show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0.1), default=5.0, show_default=True)
@client_id_option
@click.pass_context
def schema(
    ctx: click.Context, what: str, agents: tuple[str, ...], registry_service: str, timeout: float
) -> None:
    """Print the JSON Schema (Draft 2020-12) of WHAT: the envelope (default), a plan, or a
    schedule.

    WHAT asyncapi prints the AsyncAPI 3.0 document of a team's wire contract: of the agent
    classes MODULE:CLASS given, or else of the team the registry knows on the broker (--url).
    """
    if what == "asyncapi":
        settings = client_settings(ctx)
        print_json(team_asyncapi(settings, agents, registry_service, timeout, client_id(ctx)))
        return
    if agents:
        raise click.UsageError("MODULE:CLASS arguments go with asyncapi only")
    schemas = {"envelope": envelope_schema, "plan": plan_schema, "schedule": schedule_schema}
    print_json(schemas[what]())

"""Entry point of the ``agentbus`` CLI: the command group, its options, and main."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from agentbus import __version__
from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus._logging import configure_logging
from agentbus.cli._answers import answer
from agentbus.cli._asyncapi import team_asyncapi
from agentbus.cli._audit import audit_command
from agentbus.cli._calls import agents, plan, publish, request
from agentbus.cli._context import (
    client_id,
    client_id_option,
    client_settings,
    error_text,
    print_json,
    settings_of,
)
from agentbus.cli._dashboard import dashboard
from agentbus.cli._definitions import definitions_command, federation_command
from agentbus.cli._demo import demo_command
from agentbus.cli._gateway import gateway, run_a2a
from agentbus.cli._mcp import mcp, run_mcp
from agentbus.cli._schedule import schedule as schedule_group
from agentbus.cli._security import security_options, security_overrides
from agentbus.cli._serve import leader, registry, run
from agentbus.envelopes import envelope_schema
from agentbus.leader import Plan, Schedule

__all__ = ["cli", "main"]

_SERVING_COMMANDS = frozenset(
    {"run", "registry", "leader", "demo", "gateway", "run-a2a", "mcp", "run-mcp"}
)


def plan_schema() -> dict[str, Any]:
    """Return the JSON Schema of a plan."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **Plan.model_json_schema()}


def schedule_schema() -> dict[str, Any]:
    """Return the JSON Schema of a schedule (``schedule_add``'s ``schedule``)."""
    schema = Schedule.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": None})
@click.version_option(__version__, prog_name="agentbus")
@click.option("--url", metavar="URL", help="Broker URL [env AGENTBUS_URL; default: local guest].")
@click.option(
    "--exchange", metavar="NAME", help="Topic exchange [env AGENTBUS_EXCHANGE; agentbus]."
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default=lambda: os.environ.get("AGENTBUS_LOG_LEVEL", "info"),
    show_default="info",
    help="Lowest level logged [env AGENTBUS_LOG_LEVEL].",
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default=lambda: os.environ.get("AGENTBUS_LOG_FORMAT", "auto"),
    show_default="auto",
    help="Log lines as JSON, readable console text, or auto (console on a terminal) "
    "[env AGENTBUS_LOG_FORMAT].",
)
@security_options
@click.pass_context
def cli(
    ctx: click.Context, url: str | None, exchange: str | None, log_level: str, log_format: str
) -> None:
    """Run, call and inspect agents on a RabbitMQ agent bus."""
    # One-shot commands say what failed in one line; only agent processes log the transport.
    serving = ctx.invoked_subcommand in _SERVING_COMMANDS
    configure_logging(
        log_level,
        log_format,  # type: ignore[arg-type]
        transport_level=logging.WARNING if serving else logging.CRITICAL,
    )
    try:
        settings = Settings()
        overrides = {k: v for k, v in (("url", url), ("exchange", exchange)) if v is not None}
        overrides.update(security_overrides(ctx))
        ctx.obj = Settings.model_validate({**settings.model_dump(), **overrides})
    except ValidationError as exc:
        raise click.UsageError(f"invalid setting: {exc.errors()[0]['msg']}") from exc


@cli.command()
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


@cli.command()
@click.argument(
    "path",
    required=False,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option("--keep", is_flag=True, help="Keep the team running afterwards, to explore.")
@click.option(
    "--code-instances", type=click.IntRange(1, 8), default=2, show_default=True,
    help="Instances of the code agent.",
)  # fmt: skip
@click.option(
    "--in-memory", is_flag=True,
    help="Run the team in this process on the in-memory bus (no broker).",
)  # fmt: skip
@click.pass_context
def demo(
    ctx: click.Context, path: Path | None, keep: bool, code_instances: int, in_memory: bool
) -> None:
    """Start a team of agents, analyse the Python tree at PATH, and print the report.

    PATH defaults to agentbus's own source. The team (registry, leader, files, two
    code, text and report agents) runs as separate processes on the broker and is
    stopped at the end, also on Ctrl-C. With no broker to be had (or --in-memory),
    the team runs in this process on the in-memory bus.
    """
    if keep and in_memory:
        raise click.UsageError("--keep needs a broker: the in-memory team ends with the demo")
    root = path if path is not None else Path(__file__).resolve().parents[1]
    ctx.exit(demo_command(settings_of(ctx), root, keep, code_instances, in_memory))


for _command in (run, registry, leader, plan, agents, request, publish):
    cli.add_command(_command)
cli.add_command(answer)
cli.add_command(schedule_group)
cli.add_command(definitions_command)
cli.add_command(federation_command)
cli.add_command(audit_command)
cli.add_command(gateway)
cli.add_command(run_a2a)
cli.add_command(mcp)
cli.add_command(run_mcp)
cli.add_command(dashboard)


def main() -> None:
    """Run the ``agentbus`` command line; an agentbus error becomes one clear line that
    names its class and its wire code (``agentbus: error: Unroutable [agent_unavailable]:
    ...``)."""
    try:
        status = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("agentbus: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except AgentBusError as exc:
        click.echo(f"agentbus: error: {error_text(exc)}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    if isinstance(status, int):
        sys.exit(status)

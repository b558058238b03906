"""Entry point of the ``agentbus`` CLI: the command group, its options, and main."""

from __future__ import annotations

import logging
import os
import sys

import click
from pydantic import ValidationError

from agentbus import __version__
from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus._logging import configure_logging
from agentbus.cli._context import error_text
from agentbus.cli._lazy import LazyGroup
from agentbus.cli._security import security_options, security_overrides

__all__ = ["cli", "main"]

_SERVING_COMMANDS = frozenset(
    {"run", "registry", "leader", "demo", "gateway", "run-a2a", "mcp", "run-mcp"}
)


# Each command's module is imported when the command runs (an agent process loads its own
# command only): the name, and the module and attribute of the click command.
_COMMANDS: dict[str, str] = {
    "agents": "agentbus.cli._calls:agents",
    "answer": "agentbus.cli._answers:answer",
    "audit": "agentbus.cli._audit:audit_command",
    "dashboard": "agentbus.cli._dashboard:dashboard",
    "definitions": "agentbus.cli._definitions:definitions_command",
    "demo": "agentbus.cli._demo:demo",
    "federation": "agentbus.cli._definitions:federation_command",
    "gateway": "agentbus.cli._gateway:gateway",
    "leader": "agentbus.cli._serve:leader",
    "mcp": "agentbus.cli._mcp:mcp",
    "plan": "agentbus.cli._calls:plan",
    "publish": "agentbus.cli._calls:publish",
    "registry": "agentbus.cli._serve:registry",
    "request": "agentbus.cli._calls:request",
    "run": "agentbus.cli._serve:run",
    "run-a2a": "agentbus.cli._gateway:run_a2a",
    "run-mcp": "agentbus.cli._mcp:run_mcp",
    "schedule": "agentbus.cli._schedule:schedule",
    "schema": "agentbus.cli._schema:schema",
}


@click.group(
    cls=LazyGroup,
    lazy=_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": None},
)
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

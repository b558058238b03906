"""Entry point and commands of the ``agentbus`` CLI."""

from __future__ import annotations

import sys

import click
import orjson

from agentbus import __version__
from agentbus.envelopes import envelope_schema

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentbus")
def cli() -> None:
    """Run, call and inspect agents on a RabbitMQ agent bus."""


@cli.command()
@click.argument("what", type=click.Choice(["envelope"]), default="envelope")
def schema(what: str) -> None:
    """Print the JSON Schema (Draft 2020-12) of WHAT (default: the envelope)."""
    document = envelope_schema()
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


def main() -> None:
    """Run the ``agentbus`` command line."""
    cli()

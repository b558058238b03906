"""``agentbus audit``: print the audit stream's records, from an offset or a time."""

from __future__ import annotations

from datetime import datetime

import click
import orjson

from agentbus.bus import read_audit
from agentbus.cli._context import run_async, settings_of
from agentbus.cli._output import write_out
from agentbus.security import StreamOffset

__all__ = ["audit_command"]


def _start(value: str) -> StreamOffset:
    if value in ("first", "last", "next"):
        return value  # type: ignore[return-value]
    if value.isdigit():
        return int(value)
    try:
        return datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(
            "expected first, last, next, an offset or an ISO time", param_hint="--from"
        ) from exc


@click.command("audit")
@click.option(
    "--from", "start", default="first", show_default=True, metavar="WHERE",
    help="first, last, next, an offset (a number) or an ISO time (2026-01-31T12:00:00+00:00).",
)  # fmt: skip
@click.option("--count", type=click.IntRange(1), help="Stop after this many records.")
@click.option("--follow", is_flag=True, help="Wait for new records (until Ctrl-C).")
@click.option(
    "--idle", type=click.FloatRange(0.1), default=2.0, show_default=True,
    help="Without --follow: stop when no record came for this many seconds.",
)  # fmt: skip
@click.pass_context
@run_async
async def audit_command(
    ctx: click.Context, start: str, count: int | None, follow: bool, idle: float
) -> None:
    """Print the audit trail, one JSON record a line, with its offset and writer."""
    async for entry in read_audit(
        settings_of(ctx), start=_start(start), limit=count, idle=None if follow else idle
    ):
        line = {
            "offset": entry.offset,
            "index": entry.index,
            "written_by": entry.written_by,
            **entry.record,
        }
        write_out(orjson.dumps(line).decode() + "\n")

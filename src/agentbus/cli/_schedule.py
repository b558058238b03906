"""``agentbus schedule add|list|rm``: plans and requests the leaders run on a schedule."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

import click
from pydantic import ValidationError

from agentbus._exceptions import AgentBusError, RemoteError
from agentbus.cli._context import client_bus, client_id_option, load_json, print_json, run_async
from agentbus.cli._output import write_out
from agentbus.leader import PlanClient, Schedule, ScheduleListing, ScheduleState

__all__ = ["parse_duration", "schedule"]

_UNITS: Final = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION: Final = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``30s``, ``5m``, ``1.5h``, ``2d`` or a plain number of seconds.

    Raises:
        click.BadParameter: not a duration.
    """
    match = _DURATION.match(text)
    if match is None:
        raise click.BadParameter(f"{text!r} is not a duration (30s, 5m, 1.5h, 2d)")
    return float(match.group(1)) * _UNITS[match.group(2)]


@click.group()
def schedule() -> None:
    """Run plans and requests on a schedule (the leaders keep and run them)."""


@schedule.command("add")
@click.argument("name")
@click.option("--every", metavar="DURATION", help="Run every DURATION (30s, 5m, 1h, 1d).")
@click.option("--cron", metavar="EXPR", help="Run on a cron expression ('*/5 * * * *').")
@click.option("--at", "at", metavar="TIME", help="Run once at an ISO time (in --tz if bare).")
@click.option("--in", "delay", metavar="DURATION", help="Run once, DURATION from now.")
@click.option("--tz", default="UTC", show_default=True, help="The IANA time zone of --cron, --at.")
@click.option(
    "--missed",
    type=click.Choice(["skip", "once", "all"]),
    default="once",
    show_default=True,
    help="Ticks missed while no leader ran: drop them, run the latest, or run each.",
)
@click.option(
    "--grace", metavar="DURATION", default="5s", show_default=True,
    help="How late a tick may be and still run as on time.",
)  # fmt: skip
@click.option("--plan", "plan_file", metavar="FILE", help="The plan each tick runs (JSON).")
@click.option(
    "--request",
    "target",
    nargs=2,
    metavar="SERVICE ACTION",
    help="The request each tick sends.",
)
@click.option("--params", "-p", metavar="JSON", help="The request's parameters (JSON, @file).")
@click.option("--task", is_flag=True, help="Send the request as a task (it has a status).")
@click.option("--replace", is_flag=True, help="Replace a schedule of that name.")
@click.option("--leader", "leader_service", default="leader", show_default=True)
@client_id_option
@click.pass_context
@run_async
async def schedule_add(ctx: click.Context, /, name: str, **options: Any) -> None:
    """Add the schedule NAME: --plan FILE or --request SERVICE ACTION, run --every,
    on --cron, or once --at a time or --in a while. Prints the schedule's state."""
    document = _document(name, options)
    try:
        parsed = Schedule.model_validate(document)
    except ValidationError as exc:
        raise click.UsageError(f"invalid schedule: {exc.errors()[0]['msg']}") from exc
    async with client_bus(ctx) as bus:
        client = PlanClient(bus, leader=options["leader_service"])
        state = await _call(client.add_schedule(parsed, replace=options["replace"]))
    click.echo(_line(state))


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the listing as JSON.")
@click.option("--leader", "leader_service", default="leader", show_default=True)
@client_id_option
@click.pass_context
@run_async
async def schedule_list(ctx: click.Context, as_json: bool, leader_service: str) -> None:
    """List the schedules: when each runs, its next tick, its last runs."""
    async with client_bus(ctx) as bus:
        listing = await _call(PlanClient(bus, leader=leader_service).schedules())
    if as_json:
        print_json(listing.model_dump(mode="json", by_alias=True))
        return
    write_out(_table(listing) + "\n")


@schedule.command("rm")
@click.argument("name")
@click.option("--leader", "leader_service", default="leader", show_default=True)
@client_id_option
@click.pass_context
@run_async
async def schedule_rm(ctx: click.Context, name: str, leader_service: str) -> None:
    """Remove the schedule NAME (exit 1 when there is none)."""
    async with client_bus(ctx) as bus:
        removed = await _call(PlanClient(bus, leader=leader_service).remove_schedule(name))
    click.echo(f"{name}: {'removed' if removed else 'no such schedule'}")
    ctx.exit(0 if removed else 1)


def _document(name: str, options: dict[str, Any]) -> dict[str, Any]:
    document: dict[str, Any] = {"name": name, "tz": options["tz"], "missed": options["missed"]}
    document["grace"] = parse_duration(options["grace"])
    if options["every"] is not None:
        document["every"] = parse_duration(options["every"])
    if options["delay"] is not None:
        document["in"] = parse_duration(options["delay"])
    for key in ("cron", "at"):
        if options[key] is not None:
            document[key] = options[key]
    if options["plan_file"] is not None:
        document["plan"] = load_json(f"@{options['plan_file']}", "the plan")
    if options["target"]:
        service, action = options["target"]
        request = {"service": service, "action": action, "task": options["task"]}
        document["request"] = request | {
            "parameters": load_json(options["params"], "--params") or {}
        }
    return document


async def _call(call: Any) -> Any:
    try:
        return await call
    except RemoteError as exc:
        raise click.ClickException(f"{exc.code}: {exc.envelope.payload.message}") from exc
    except AgentBusError as exc:
        raise click.ClickException(str(exc)) from exc


def _when(schedule: Schedule) -> str:
    if schedule.every is not None:
        return f"every {schedule.every:g}s"
    if schedule.cron is not None:
        return f"cron '{schedule.cron}' {schedule.tz}"
    return f"once at {_at(schedule.at)}"


def _at(at: datetime | None) -> str:
    return "-" if at is None else at.isoformat(timespec="milliseconds")


def _line(state: ScheduleState) -> str:
    return f"{state.name}: {_when(state.schedule)}, next {_at(state.next_tick)}"


def _table(listing: ScheduleListing) -> str:
    if not listing.schedules:
        return "no schedules"
    lines = [f"{'NAME':20} {'WHEN':28} {'NEXT':30} LAST RUNS (lag s)"]
    for state in listing.schedules:
        runs = ", ".join(
            f"{run.run_id}"
            + (f" ({run.lag:.3f})" if run.lag is not None else "")
            + (f" ERROR {run.error}" if run.error else "")
            for run in state.runs[-3:]
        )
        lines.append(
            f"{state.name:20} {_when(state.schedule):28} {_at(state.next_tick):30} {runs or '-'}"
        )
    return "\n".join(lines)

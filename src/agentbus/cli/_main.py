"""Entry point and commands of the ``agentbus`` CLI."""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click
import orjson
from pydantic import ValidationError

from agentbus import __version__
from agentbus._config import Settings
from agentbus._exceptions import AgentBusError, RemoteError
from agentbus._logging import configure_logging
from agentbus._metrics import Metrics
from agentbus.agents import Agent, run_until_signalled
from agentbus.agents.leader import Leader, Plan, PlanClient, PlanStatus, Progress
from agentbus.bus import Bus
from agentbus.cli._demo import demo_command
from agentbus.cli._render import agents_table, aggregate_report
from agentbus.envelopes import BROADCAST, EnvelopeError, decode, envelope_schema
from agentbus.registry import Registry

__all__ = ["cli", "main"]

P = ParamSpec("P")
_SERVING_COMMANDS = frozenset({"run", "registry", "leader", "demo"})
_EXPIRES_ENV = "AGENTBUS_INSTANCE_QUEUE_EXPIRES"
_CLIENT_QUEUE_EXPIRES = 5.0
_PLAN_EXIT = {PlanStatus.COMPLETED: 0, PlanStatus.PARTIAL: 1, PlanStatus.FAILED: 2}
T = TypeVar("T")


def plan_schema() -> dict[str, Any]:
    """Return the JSON Schema of a plan."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **Plan.model_json_schema()}


def _settings(ctx: click.Context) -> Settings:
    settings: Settings = ctx.obj
    return settings


def _client_settings(ctx: click.Context) -> Settings:
    # A one-shot command's instance queue needs to outlive a reconnect, not the process
    # by a minute: unless it is set explicitly, it goes a few seconds after we close.
    settings = _settings(ctx)
    if _EXPIRES_ENV in os.environ:
        return settings
    expires = min(settings.instance_queue_expires, _CLIENT_QUEUE_EXPIRES)
    return settings.model_copy(update={"instance_queue_expires": expires})


def _async(func: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return asyncio.run(func(*args, **kwargs))

    return wrapper


def _load_json(value: str | None, what: str) -> Any:
    """Parse JSON given inline, as ``@file``, or ``-`` for standard input."""
    if value is None:
        return None
    try:
        if value == "-":
            text = sys.stdin.read()
        elif value.startswith("@"):
            text = Path(value[1:]).read_text(encoding="utf-8")
        else:
            text = value
        return orjson.loads(text)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value[1:]!r}: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"{what} is not valid JSON: {exc}") from exc


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


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
    help="Log lines as JSON, readable console text, or auto (console on a terminal).",
)
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
        ctx.obj = Settings.model_validate({**settings.model_dump(), **overrides})
    except ValidationError as exc:
        raise click.UsageError(f"invalid setting: {exc.errors()[0]['msg']}") from exc


@cli.command()
@click.argument("what", type=click.Choice(["envelope", "plan"]), default="envelope")
def schema(what: str) -> None:
    """Print the JSON Schema (Draft 2020-12) of WHAT: the envelope (default) or a plan."""
    _print_json(envelope_schema() if what == "envelope" else plan_schema())


def _load_agent_class(target: str) -> type[Agent]:
    module_name, _, class_name = target.partition(":")
    if not module_name or not class_name:
        raise click.BadParameter("expected MODULE:CLASS, e.g. myagents.summarizer:Summarizer")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}") from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise click.BadParameter(f"{target!r} is not an agentbus Agent class")
    return cls


def _agent_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--id", "agent_id", metavar="ID", help="Instance id [name-<random>].")(func)
    func = click.option(
        "--concurrency", type=click.IntRange(min=1), help="Requests worked on at once."
    )(func)
    func = click.option(
        "--heartbeat",
        type=click.FloatRange(min=0.05),
        default=5.0,
        show_default=True,
        help="Heartbeat interval, seconds.",
    )(func)
    func = click.option(
        "--metrics-port",
        type=click.IntRange(min=1, max=65535),
        help="Serve Prometheus metrics on this port (/metrics).",
    )(func)
    return click.option(
        "--grace",
        type=click.FloatRange(min=0),
        help="Seconds in-flight work may take to finish on SIGTERM [AGENTBUS_SHUTDOWN_GRACE].",
    )(func)


def _metrics(port: int | None) -> Metrics | None:
    if port is None:
        return None
    metrics = Metrics()
    try:
        metrics.serve(port)
    except OSError as exc:
        raise click.BadParameter(f"cannot serve metrics on port {port}: {exc.strerror}") from exc
    return metrics


def _serve_agent(
    ctx: click.Context, cls: type[Agent], options: dict[str, Any], **extra: Any
) -> None:
    # The options every agent command shares (see _agent_options), then its own.
    agent = cls(
        agent_id=options["agent_id"],
        concurrency=options["concurrency"],
        heartbeat_interval=options["heartbeat"],
        settings=_settings(ctx),
        metrics=_metrics(options["metrics_port"]),
        **extra,
    )
    asyncio.run(run_until_signalled(agent, grace=options["grace"]))


@cli.command()
@click.argument("target", metavar="MODULE:CLASS")
@_agent_options
@click.pass_context
def run(ctx: click.Context, /, target: str, **options: Any) -> None:
    """Run the agent class MODULE:CLASS until SIGTERM or Ctrl-C, then drain it."""
    _serve_agent(ctx, _load_agent_class(target), options)


@cli.command()
@_agent_options
@click.option(
    "--missed",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Missed heartbeat intervals before an agent is offline.",
)
@click.pass_context
def registry(ctx: click.Context, /, missed: int, **options: Any) -> None:
    """Run a registry agent: tracks live agents, answers discovery requests."""
    _serve_agent(ctx, Registry, options, missed_intervals=missed)


@cli.command()
@_agent_options
@click.option(
    "--registry",
    "registry_service",
    default="registry",
    show_default=True,
    help="The registry service asked who offers a skill.",
)
@click.pass_context
def leader(ctx: click.Context, /, registry_service: str, **options: Any) -> None:
    """Run a leader agent: its run_plan action runs a plan and answers with the aggregate."""
    _serve_agent(ctx, Leader, options, registry=registry_service)


@cli.group()
def plan() -> None:
    """Submit plans to a leader."""


@plan.command("run")
@click.argument("file", metavar="FILE|-")
@click.option("--json", "as_json", is_flag=True, help="Print the aggregate as JSON.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=600.0, show_default=True)
@click.option("--leader", "leader_service", default="leader", show_default=True)
@click.option("--quiet", "-q", is_flag=True, help="No live progress lines.")
@click.pass_context
@_async
async def plan_run(
    ctx: click.Context,
    file: str,
    as_json: bool,
    timeout: float,
    leader_service: str,
    quiet: bool,
) -> None:
    """Run the plan in FILE on a leader, showing live progress; print the aggregate.

    The exit status is 0 when the plan completed, 1 when it was partial, 2 when it failed,
    and 3 when it could not run (an invalid plan, no leader, no broker).
    """
    try:
        document = _load_json(file if file == "-" else f"@{file}", "the plan")
        parsed = Plan.model_validate(document)
    except click.BadParameter as exc:
        raise _CouldNotRun(exc.message) from exc
    except ValidationError as exc:
        raise _CouldNotRun(f"invalid plan: {_first_error(exc)}") from exc
    try:
        async with Bus(_client_settings(ctx)) as bus:
            client = PlanClient(bus, leader=leader_service)
            progress = None if quiet else _show_progress
            aggregate = await client.run(parsed, timeout=timeout, on_progress=progress)
    except AgentBusError as exc:
        raise _CouldNotRun(str(exc)) from exc
    if as_json:
        _print_json(aggregate.model_dump(mode="json"))
    else:
        click.echo(aggregate_report(aggregate))
    ctx.exit(_PLAN_EXIT[aggregate.status])


class _CouldNotRun(click.ClickException):
    exit_code = 3

    def show(self, file: Any = None) -> None:
        click.echo(f"agentbus: error: {self.message}", err=True)


def _show_progress(progress: Progress) -> None:
    agent = f" on {progress.agent_id}" if progress.agent_id else ""
    error = f": {progress.error.get('message')}" if progress.error else ""
    click.echo(
        f"[{progress.done}/{progress.total}] {progress.subtask_id} ({progress.skill}) "
        f"{progress.transition}{agent}{error}",
        err=True,
    )


def _first_error(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


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
@click.pass_context
def demo(ctx: click.Context, path: Path | None, keep: bool, code_instances: int) -> None:
    """Start a team of agents, analyse the Python tree at PATH, and print the report.

    PATH defaults to agentbus's own source. The team (registry, leader, files, two
    code, text and report agents) runs as separate processes on the broker and is
    stopped at the end, also on Ctrl-C.
    """
    root = path if path is not None else Path(__file__).resolve().parents[1]
    ctx.exit(demo_command(_settings(ctx), root, keep, code_instances))


@cli.command()
@click.option("--service", help="Only agents of this service.")
@click.option("--status", type=click.Choice(["ready", "busy", "draining", "offline"]))
@click.option("--skill", help="Only agents offering this skill.")
@click.option("--all", "include_offline", is_flag=True, help="Include agents gone offline.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=5.0, show_default=True)
@click.pass_context
@_async
async def agents(
    ctx: click.Context,
    service: str | None,
    status: str | None,
    skill: str | None,
    include_offline: bool,
    as_json: bool,
    timeout: float,
) -> None:
    """List the agents the registry knows: id, service, status, load, skills, last seen."""
    filters = {"service": service, "status": status, "skill": skill}
    parameters: dict[str, Any] = {k: v for k, v in filters.items() if v is not None}
    if include_offline or status == "offline":
        parameters["include_offline"] = True
    async with Bus(_client_settings(ctx)) as bus:
        reply = await bus.request("registry", "list_agents", parameters, timeout=timeout)
    rows: list[dict[str, Any]] = reply.result
    if as_json:
        _print_json(rows)
    else:
        click.echo(agents_table(rows))


@cli.command()
@click.argument("receiver")
@click.argument("action")
@click.option("--params", "-p", metavar="JSON|@FILE|-", help="Request parameters (an object).")
@click.option("--timeout", type=click.FloatRange(min=0.01), default=30.0, show_default=True)
@click.option("--result", "result_only", is_flag=True, help="Print only the result.")
@click.pass_context
@_async
async def request(
    ctx: click.Context,
    receiver: str,
    action: str,
    params: str | None,
    timeout: float,
    result_only: bool,
) -> None:
    """Send ACTION to RECEIVER (an agent id or service) and print the response as JSON.

    An error envelope is printed too, and the exit status is then 1.
    """
    parameters = _load_json(params, "--params")
    if parameters is not None and not isinstance(parameters, dict):
        raise click.BadParameter("--params must be a JSON object")
    async with Bus(_client_settings(ctx)) as bus:
        try:
            reply = await bus.request(receiver, action, parameters, timeout=timeout)
        except RemoteError as exc:
            _print_json(exc.envelope.model_dump(mode="json"))
            ctx.exit(1)
    _print_json(reply.result if result_only else reply.model_dump(mode="json"))


@cli.command()
@click.argument("event_name", required=False)
@click.option("--data", "-d", metavar="JSON|@FILE|-", help="Event data (an object).")
@click.option("--to", "receiver", default=BROADCAST, show_default=True, help="Receiver id.")
@click.option(
    "--raw",
    metavar="FILE|-",
    help="Publish a whole envelope read from FILE or standard input instead of an event.",
)
@click.pass_context
@_async
async def publish(
    ctx: click.Context, event_name: str | None, data: str | None, receiver: str, raw: str | None
) -> None:
    """Publish the event EVENT_NAME, or a raw envelope with --raw; print what was sent."""
    if (event_name is None) == (raw is None):
        raise click.UsageError("give either EVENT_NAME or --raw FILE")
    async with Bus(_client_settings(ctx)) as bus:
        if raw is not None:
            source = sys.stdin.buffer.read() if raw == "-" else _read_bytes(raw)
            try:
                envelope = decode(source, max_size=bus.settings.max_message_size)
            except EnvelopeError as exc:
                raise click.BadParameter(f"not a valid envelope: {exc.message}") from exc
            await bus.publish(envelope)
        else:
            assert event_name is not None
            event_data = _load_json(data, "--data")
            if event_data is not None and not isinstance(event_data, dict):
                raise click.BadParameter("--data must be a JSON object")
            envelope = await bus.emit(event_name, event_data, receiver=receiver)
    _print_json(envelope.model_dump(mode="json"))


def _read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path!r}: {exc.strerror}") from exc


def main() -> None:
    """Run the ``agentbus`` command line; agentbus errors become one clear line."""
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
        click.echo(f"agentbus: error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    if isinstance(status, int):
        sys.exit(status)

"""The CLI's MCP faces: ``mcp`` (the team as an MCP server) and ``run-mcp`` (an MCP server
as a bus agent)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click
from pydantic import ValidationError

from agentbus._config import Settings
from agentbus._exceptions import ConfigurationError
from agentbus._loop import run as run_loop
from agentbus.agents import run_until_signalled
from agentbus.bus import Bus
from agentbus.cli._context import settings_of
from agentbus.security import default_id

if TYPE_CHECKING:
    from agentbus.mcp import ApiKeys, McpSettings, TeamServer

__all__ = ["mcp", "run_mcp"]


def _extra(command: str) -> click.UsageError:
    return click.UsageError(f"{command} needs the mcp extra: pip install 'agentbus[mcp]'")


@click.command()
@click.option(
    "--transport", type=click.Choice(["stdio", "http"]),
    help="stdio (a desktop client starts it) or http (Streamable HTTP) [stdio].",
)  # fmt: skip
@click.option("--host", help="HTTP: interface to listen on [AGENTBUS_MCP_HOST; 127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), help="HTTP: port [AGENTBUS_MCP_PORT; 8090].")
@click.option("--path", help="HTTP: the endpoint's path [AGENTBUS_MCP_PATH; /mcp].")
@click.option(
    "--keys", "keys_file", metavar="FILE",
    help="HTTP: the gateway's API keys file, key -> bus identity [AGENTBUS_MCP_KEYS_FILE].",
)  # fmt: skip
@click.option(
    "--anonymous", "allow_anonymous", is_flag=True, default=None,
    help="HTTP without keys: every caller is 'anonymous' (local use only).",
)  # fmt: skip
@click.option(
    "--workers", type=click.IntRange(min=1),
    help="HTTP: processes on this address; over 1, no sessions [AGENTBUS_MCP_WORKERS; 1].",
)  # fmt: skip
@click.pass_context
def mcp(ctx: click.Context, /, **options: Any) -> None:
    """Serve the team as one MCP server: every live skill a tool, every card a resource.

    Tools are named SERVICE__ACTION (the leader's plans: run_plan) and follow the registry.
    Over stdio, for a desktop client's config; over HTTP (--transport http), each call
    needs Authorization: Bearer KEY, and goes on the bus as that key's identity.
    """
    try:
        from agentbus.mcp import McpSettings
    except ImportError as exc:
        raise _extra("agentbus mcp") from exc
    try:
        config = McpSettings(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        raise click.UsageError(f"invalid setting: {exc.errors()[0]['msg']}") from exc
    settings = settings_of(ctx)
    if config.transport == "stdio" and config.workers > 1:
        raise click.UsageError("--workers is for --transport http")
    if config.transport == "stdio":
        run_loop(_serve_stdio(settings, config))
        return
    if config.keys_file is None and not config.allow_anonymous:
        raise click.UsageError("over HTTP give --keys FILE (API keys), or --anonymous")
    keys = _keys(config)
    if config.workers > 1:
        from agentbus.mcp import serve_workers

        root = ctx.find_root().params
        serve_workers(settings, config, log=(root["log_level"], root["log_format"]))
        return
    run_loop(_serve_http(settings, config, keys))


def _keys(config: McpSettings) -> ApiKeys:
    from agentbus._http import keys_of

    try:
        return keys_of(config)
    except ConfigurationError as exc:
        raise click.UsageError(exc.message) from exc


def _own_bus(settings: Settings) -> Bus:
    return Bus(settings, agent_id=default_id(settings, "mcp"), app_id="mcp")


async def _serve_stdio(settings: Settings, config: McpSettings) -> None:
    from agentbus.mcp import TeamServer

    async with TeamServer(_own_bus(settings), config) as team:
        with _cancelled_on_sigterm():
            await team.serve_stdio()


async def _serve_http(settings: Settings, config: McpSettings, keys: ApiKeys) -> None:
    from agentbus._http import serve_app
    from agentbus.mcp import Callers, PlanWatch, TeamServer, http_app

    plans = PlanWatch()
    callers = Callers(settings, keys, plans, app_id="mcp")
    team: TeamServer
    async with TeamServer(_own_bus(settings), config, callers=callers, plans=plans) as team:
        click.echo(f"agentbus mcp on http://{config.host}:{config.port}{config.path}", err=True)
        await serve_app(http_app(team, keys), config, lifespan="on")


@contextlib.contextmanager
def _cancelled_on_sigterm() -> Iterator[None]:
    # A client that is done closes our standard input (serving ends); one that is in a
    # hurry sends SIGTERM: the calls still running are cancelled on the bus either way.
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


@click.command("run-mcp", context_settings={"ignore_unknown_options": True})
@click.argument("target", nargs=-1, required=True)
@click.option("--service", help="Service name on the bus [from the server's name].")
@click.option(
    "--id", "agent_id", metavar="ID",
    help="Instance id [one its broker user owns, with the service in it].",
)  # fmt: skip
@click.option(
    "--header", "headers", multiple=True, metavar="'NAME: VALUE'",
    help="URL: an HTTP header for every request (repeatable).",
)  # fmt: skip
@click.option(
    "--key", envvar="AGENTBUS_MCP_KEY", metavar="KEY",
    help="URL: a bearer key (Authorization: Bearer KEY) [env AGENTBUS_MCP_KEY].",
)  # fmt: skip
@click.option(
    "--env", "env", multiple=True, metavar="NAME=VALUE",
    help="Command: an environment variable for the server (repeatable).",
)  # fmt: skip
@click.option("--cwd", type=click.Path(exists=True, file_okay=False), help="Command: its folder.")
@click.option("--concurrency", type=click.IntRange(min=1), help="Tool calls forwarded at once.")
@click.option("--heartbeat", type=click.FloatRange(min=0.05), default=5.0, show_default=True)
@click.option("--wait", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to wait at start for the server to answer.")  # fmt: skip
@click.option("--answer-within", type=click.FloatRange(min=1), default=900.0, show_default=True,
              help="Seconds a question the server asks waits for its answer.")  # fmt: skip
@click.pass_context
def run_mcp(
    ctx: click.Context,
    /,
    target: tuple[str, ...],
    service: str | None,
    agent_id: str | None,
    headers: tuple[str, ...],
    key: str | None,
    env: tuple[str, ...],
    cwd: str | None,
    concurrency: int | None,
    heartbeat: float,
    wait: float,
    answer_within: float,
) -> None:
    """Put an MCP server on the bus: its tools as skills, calls forwarded.

    TARGET is the server's Streamable HTTP URL, or the command that starts it over stdio
    (after --, when it has options of its own): agentbus run-mcp -- uvx mcp-server-time.
    The agent heartbeats like any other; plans, the gateway and every client can use it.
    What the server asks during a call (an elicitation) is a question to the caller.
    """
    try:
        from agentbus.mcp import McpTarget, RemoteMcpAgent
    except ImportError as exc:
        raise _extra("run-mcp") from exc
    http_headers = dict(_pair(header, ":", "--header") for header in headers)
    if key is not None:
        http_headers["Authorization"] = f"Bearer {key}"
    where = McpTarget.of(
        target, headers=http_headers, env=dict(_pair(e, "=", "--env") for e in env), cwd=cwd
    )

    async def serve() -> None:
        agent = await RemoteMcpAgent.connect(
            where,
            service=service,
            agent_id=agent_id,
            concurrency=concurrency,
            heartbeat_interval=heartbeat,
            settings=settings_of(ctx),
            wait=wait,
            answer_within=answer_within,
        )
        await run_until_signalled(agent)

    run_loop(serve())


def _pair(text: str, separator: str, option: str) -> tuple[str, str]:
    name, found, value = text.partition(separator)
    if not found or not name.strip():
        raise click.BadParameter(f"{text!r} is not NAME{separator}VALUE", param_hint=option)
    return name.strip(), value.strip()

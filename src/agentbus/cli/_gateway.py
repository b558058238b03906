"""The CLI's HTTP faces of A2A: ``gateway`` (bus agents as A2A agents) and ``run-a2a``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from pydantic import ValidationError

from agentbus._config import Settings
from agentbus._exceptions import ConfigurationError
from agentbus._loop import run as run_loop
from agentbus.agents import run_until_signalled
from agentbus.cli._context import settings_of

if TYPE_CHECKING:
    from agentbus.gateway import ApiKeys, GatewaySettings

__all__ = ["gateway", "run_a2a"]


@click.command()
@click.option("--host", help="Interface to listen on [AGENTBUS_GATEWAY_HOST; 127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), help="Port [AGENTBUS_GATEWAY_PORT; 8080].")
@click.option(
    "--keys", "keys_file", metavar="FILE",
    help="JSON API keys: key -> bus identity [AGENTBUS_GATEWAY_KEYS_FILE].",
)  # fmt: skip
@click.option(
    "--anonymous", "allow_anonymous", is_flag=True, default=None,
    help="No keys: every caller is 'anonymous' (local use only).",
)  # fmt: skip
@click.option("--public-url", metavar="URL", help="Base URL callers use (named in the cards).")
@click.option(
    "--root-service", metavar="NAME",
    help="Serve this service at the root too: its card at /.well-known/agent-card.json, "
    "calls at / (discovery by host) [AGENTBUS_GATEWAY_ROOT_SERVICE].",
)  # fmt: skip
@click.option(
    "--task-store", metavar="URL",
    help="Redis URL for tasks shared by several gateway processes [AGENTBUS_GATEWAY_TASK_STORE; "
    "in memory].",
)  # fmt: skip
@click.option(
    "--workers", type=click.IntRange(min=1),
    help="Gateway processes on this address; over 1 needs --task-store "
    "[AGENTBUS_GATEWAY_WORKERS; 1].",
)  # fmt: skip
@click.option("--max-open-tasks", type=click.IntRange(min=1), help="Tasks running at once [256].")
@click.option("--retention", "task_retention", type=click.FloatRange(min=1), help="Seconds [3600].")
@click.option("--max-body", "max_body_size", type=click.IntRange(min=1), help="Bytes [1 MiB].")
@click.option("--ssl-certfile", type=click.Path(exists=True, dir_okay=False))
@click.option("--ssl-keyfile", type=click.Path(exists=True, dir_okay=False))
@click.pass_context
def gateway(
    ctx: click.Context, /, ssl_certfile: str | None, ssl_keyfile: str | None, **options: Any
) -> None:
    """Serve every live agent on the bus as an A2A agent over HTTP (JSON-RPC, SSE).

    Cards: GET /agents (the list) and /agents/SERVICE/.well-known/agent-card.json;
    calls: POST /agents/SERVICE/ with Authorization: Bearer KEY. With --root-service NAME,
    NAME is served at the root too (/.well-known/agent-card.json, POST /). With
    --task-store redis://..., processes share their tasks: --workers N serves N on this
    address, and gateways on other hosts naming the same store and bus serve the same tasks.
    """
    try:
        from agentbus.gateway import GatewaySettings, keys_of, serve_workers
    except ImportError as exc:
        raise click.UsageError(
            f"the gateway needs the a2a extra: pip install 'agentbus[a2a]' ({exc})"
        ) from exc
    config = _settings(GatewaySettings, options)
    try:
        keys = keys_of(config)
    except ConfigurationError as exc:
        raise click.UsageError(exc.message) from exc
    if config.workers > 1:
        root = ctx.find_root().params
        try:
            serve_workers(
                settings_of(ctx),
                config,
                log=(root["log_level"], root["log_format"]),
                certfile=ssl_certfile,
                keyfile=ssl_keyfile,
            )
        except ConfigurationError as exc:
            raise click.UsageError(exc.message) from exc
        return
    try:
        run_loop(_serve(settings_of(ctx), config, keys, ssl_certfile, ssl_keyfile))
    except ConfigurationError as exc:
        raise click.UsageError(exc.message) from exc


def _settings(kind: type[GatewaySettings], options: dict[str, Any]) -> GatewaySettings:
    try:
        config = kind(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        raise click.UsageError(f"invalid setting: {exc.errors()[0]['msg']}") from exc
    if config.keys_file is None and not config.allow_anonymous:
        raise click.UsageError("give --keys FILE (API keys), or --anonymous for local use")
    if config.workers > 1 and config.task_store is None:
        raise click.UsageError("--workers over 1 needs --task-store: the processes share tasks")
    return config


async def _serve(
    settings: Settings,
    config: GatewaySettings,
    keys: ApiKeys,
    certfile: str | None,
    keyfile: str | None,
) -> None:
    from agentbus._http import serve_app
    from agentbus.gateway import Gateway

    async with Gateway(settings, config, keys) as served:
        click.echo(f"agentbus gateway on {served.public_url}/agents", err=True)
        if config.root_service is not None:
            click.echo(f"{config.root_service} served at {served.public_url}/", err=True)
        await serve_app(served.app, config, lifespan="off", certfile=certfile, keyfile=keyfile)


@click.command("run-a2a")
@click.argument("url")
@click.option("--service", help="Service name on the bus [from the card's name].")
@click.option(
    "--id",
    "agent_id",
    metavar="ID",
    help="Instance id [one its broker user owns, with the service in it].",
)
@click.option(
    "--key", envvar="AGENTBUS_A2A_KEY", metavar="KEY",
    help="Bearer key for the A2A agent [env AGENTBUS_A2A_KEY].",
)  # fmt: skip
@click.option("--concurrency", type=click.IntRange(min=1), help="Requests forwarded at once.")
@click.option("--heartbeat", type=click.FloatRange(min=0.05), default=5.0, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Seconds an A2A call may take.")  # fmt: skip
@click.option("--wait", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to wait at start for the A2A server to answer.")  # fmt: skip
@click.pass_context
def run_a2a(
    ctx: click.Context,
    /,
    url: str,
    service: str | None,
    agent_id: str | None,
    key: str | None,
    concurrency: int | None,
    heartbeat: float,
    timeout: float,
    wait: float,
) -> None:
    """Put the A2A agent at URL on the bus: its card's skills, forwarded over HTTP.

    URL is the agent's base URL (its card at URL/.well-known/agent-card.json), or just its
    host for an agent served at the root (a gateway's --root-service).

    The agent heartbeats like any other; requests become A2A messages, their tasks' artifacts
    the results, failed tasks error envelopes, and a bus cancel cancels the A2A task.
    """
    try:
        from agentbus.gateway import RemoteA2AAgent
    except ImportError as exc:
        raise click.UsageError(
            f"run-a2a needs the a2a extra: pip install 'agentbus[a2a]' ({exc})"
        ) from exc

    async def serve() -> None:
        agent = await RemoteA2AAgent.from_url(
            url,
            service=service,
            key=key,
            timeout=timeout,
            agent_id=agent_id,
            concurrency=concurrency,
            heartbeat_interval=heartbeat,
            settings=settings_of(ctx),
            wait=wait,
        )
        await run_until_signalled(agent)

    run_loop(serve())

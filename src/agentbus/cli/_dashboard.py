"""``agentbus dashboard``: the web dashboard as a process of its own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from agentbus._logging import get_logger
from agentbus._loop import run as run_loop
from agentbus.bus import Bus
from agentbus.cli._context import settings_of
from agentbus.dashboard import Dashboard
from agentbus.security import default_id

__all__ = ["dashboard"]

_log = get_logger("agentbus.dashboard")


@click.command()
@click.option(
    "--host", metavar="HOST", help="Address to listen on [AGENTBUS_DASHBOARD_HOST; 127.0.0.1]."
)
@click.option(
    "--port",
    type=click.IntRange(min=0, max=65535),
    help="Port to listen on [AGENTBUS_DASHBOARD_PORT; 8470].",
)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help=(
        "File holding the token: it allows actions and, beyond localhost, reading "
        "[AGENTBUS_DASHBOARD_TOKEN; none: read-only, on localhost only]."
    ),
)
@click.option(
    "--public-read",
    is_flag=True,
    default=None,
    help=(
        "Beyond localhost, show the team to whoever reaches the page, without the token "
        "[AGENTBUS_DASHBOARD_PUBLIC_READ; off]."
    ),
)
@click.option(
    "--id",
    "agent_id",
    metavar="ID",
    help="The dashboard's bus id [one its broker user owns, with dashboard in it].",
)
@click.pass_context
def dashboard(
    ctx: click.Context,
    host: str | None,
    port: int | None,
    token_file: Path | None,
    public_read: bool | None,
    agent_id: str | None,
) -> None:
    """Serve the live web dashboard: agents, questions, plans, traffic and dead letters."""
    try:
        from agentbus.dashboard import DashboardSettings
        from agentbus.dashboard.app import create_app
    except ImportError as exc:
        raise click.UsageError(
            f"the dashboard needs its extra: pip install 'agentbus[dashboard]' ({exc.name} missing)"
        ) from exc
    try:
        overrides: dict[str, object] = {"host": host, "port": port, "public_read": public_read}
        if token_file is not None:
            overrides["token"] = token_file.read_text(encoding="utf-8").strip()
        options = DashboardSettings.model_validate(
            DashboardSettings().model_dump() | {k: v for k, v in overrides.items() if v is not None}
        )
    except (ValidationError, OSError) as exc:
        raise click.UsageError(f"invalid dashboard setting: {exc}") from exc
    options.check_exposure()  # ConfigurationError: one line, exit status 2, before the bus
    settings = settings_of(ctx)
    bus = Bus(settings, agent_id=agent_id or default_id(settings, "dashboard"))
    board = Dashboard(
        bus, dead_letters=bus.dead_letters(), missed_intervals=options.missed_intervals
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        if options.public_read and not options.loopback:
            _log.warning(
                "the dashboard listens beyond this machine with --public-read: "
                "whoever reaches it sees the team",
                host=options.host,
                actions=options.token is not None,
            )
        async with bus, board:
            _log.info(
                "dashboard started",
                url=f"http://{options.host}:{options.port}/",
                exchange=settings.exchange,
                actions=options.token is not None,
                reading="open" if options.reading_open else "token",
            )
            yield
        _log.info("dashboard stopped")

    app = create_app(lambda: board, options, lifespan=lifespan)
    run_loop(_serve(app, options))


async def _serve(app: Any, options: Any) -> None:
    import uvicorn

    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    await uvicorn.Server(config).serve()

"""The CLI commands that run agent processes: ``run``, ``registry`` and ``leader``."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from agentbus._loop import run as run_loop
from agentbus._metrics import Metrics
from agentbus.agents import Agent, run_until_signalled
from agentbus.cli._context import settings_of
from agentbus.registry import Registry

__all__ = ["leader", "registry", "run"]


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
    func = click.option(
        "--id",
        "agent_id",
        metavar="ID",
        help="Instance id [one its broker user owns, with the service in it].",
    )(func)
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
        settings=settings_of(ctx),
        metrics=_metrics(options["metrics_port"]),
        **extra,
    )
    run_loop(run_until_signalled(agent, grace=options["grace"]))


@click.command()
@click.argument("target", metavar="MODULE:CLASS")
@_agent_options
@click.pass_context
def run(ctx: click.Context, /, target: str, **options: Any) -> None:
    """Run the agent class MODULE:CLASS until SIGTERM or Ctrl-C, then drain it."""
    _serve_agent(ctx, _load_agent_class(target), options)


@click.command()
@_agent_options
@click.option(
    "--missed",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Missed heartbeat intervals before an agent is offline.",
)
@click.option(
    "--share",
    is_flag=True,
    help="Share the heartbeats with the other registries run with --share: each takes a "
    "part and tells the others what it heard (one view, the load split).",
)
@click.pass_context
def registry(ctx: click.Context, /, missed: int, share: bool, **options: Any) -> None:
    """Run a registry agent: tracks live agents, answers discovery requests."""
    _serve_agent(ctx, Registry, options, missed_intervals=missed, share=share)


@click.command()
@_agent_options
@click.option(
    "--registry",
    "registry_service",
    default="registry",
    show_default=True,
    help="The registry service asked who offers a skill.",
)
@click.option(
    "--durable/--no-durable",
    default=None,
    help="Journal each plan on the broker: another leader finishes it if this one dies "
    "(needs RabbitMQ 3.9+, streams) [env AGENTBUS_DURABLE_PLANS; on].",
)
@click.pass_context
def leader(
    ctx: click.Context, /, registry_service: str, durable: bool | None, **options: Any
) -> None:
    """Run a leader agent: its run_plan action runs a plan and answers with the aggregate."""
    from agentbus.leader import Leader  # here: an agent process loads no leader

    _serve_agent(ctx, Leader, options, registry=registry_service, durable=durable)

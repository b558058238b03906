"""The main job: a real team of agents analyses a source tree and reports on it."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import aio_pika
import click

from agentbus._config import Settings, mask_url
from agentbus._exceptions import AgentBusError, BrokerUnavailable, ConfigurationError
from agentbus._loop import run as run_loop
from agentbus.bus import Bus, Topology
from agentbus.cli._analysis import analyse, timings
from agentbus.cli._context import settings_of
from agentbus.cli._local_rabbitmq import ensure_broker
from agentbus.cli._team import Team
from agentbus.leader import PlanClient
from agentbus.security import default_id

__all__ = ["demo", "demo_command", "run_demo"]

_BASE_PORT: Final = 9464
_READY_TIMEOUT: Final = 60.0
_BUILTIN: Final = "agentbus.agents.builtin"
_SERVICES: Final = ("registry", "leader", "files", "code", "text", "report")
_PLAN_JOURNAL: Final = "plans"  # the leaders' journal, <exchange>.journal.plans
_SCHEDULES: Final = "schedules"  # the leaders' schedule journal and ticking lease


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports(count: int) -> list[int | None]:
    # The ports deploy/prometheus/prometheus.yml scrapes, when they are free.
    wanted = list(range(_BASE_PORT, _BASE_PORT + count))
    return [port if _free(port) else None for port in wanted]


def _team(settings: Settings, root: Path, log_dir: Path, code_instances: int) -> Team:
    team = Team(settings, log_dir, env={"AGENTBUS_FILES_ROOT": str(root)})
    roles = [
        ("registry", ["registry", "--heartbeat", "2"]),
        ("leader", ["leader", "--heartbeat", "2"]),
        ("files", ["run", f"{_BUILTIN}:FilesAgent", "--heartbeat", "2"]),
        *(
            (f"code-{n}", ["run", f"{_BUILTIN}:CodeAgent", "--heartbeat", "2"])
            for n in range(1, code_instances + 1)
        ),
        ("text", ["run", f"{_BUILTIN}:TextAgent", "--heartbeat", "2"]),
        ("report", ["run", f"{_BUILTIN}:ReportAgent", "--heartbeat", "2"]),
    ]
    for (agent_id, command), port in zip(roles, _ports(len(roles)), strict=True):
        team.add(f"demo-{agent_id}", command, metrics_port=port)
    return team


async def _wait_ready(bus: Bus, team: Team, say: Callable[[str], None]) -> float:
    started = time.monotonic()
    expected = {member.agent_id for member in team.members}
    known: set[str] = set()
    async with asyncio.timeout(_READY_TIMEOUT):
        while known != expected:
            failed = team.failed()
            if failed:
                member = failed[0]
                tail = (
                    member.log_path.read_text(errors="replace")[-1500:] if member.log_path else ""
                )
                raise AgentBusError(f"{member.agent_id} exited while starting:\n{tail}")
            with contextlib.suppress(AgentBusError):
                reply = await bus.request("registry", "list_agents", timeout=2)
                known = {agent["agent_id"] for agent in reply.result} & expected
            if known != expected:
                await asyncio.sleep(0.2)
    return time.monotonic() - started


async def run_demo(
    settings: Settings,
    root: Path,
    *,
    keep: bool = False,
    code_instances: int = 2,
    in_memory: bool = False,
    say: Callable[[str], None] = click.echo,
) -> int:
    """Start the team, run the analysis of ``root``, print the report; return the exit status.

    With ``in_memory``, or when no broker can be had, the team runs in this process on the
    in-memory bus instead, and says so.
    """
    begun = time.monotonic()
    url = None if in_memory else await _broker(settings.url, say)
    if url is None:
        # Loaded only here: the CLI imports the in-memory bus for --in-memory alone.
        from agentbus.cli._demo_memory import run_memory_demo

        return await run_memory_demo(settings, root, code_instances=code_instances, say=say)
    exchange = f"agentbus-demo-{secrets.token_hex(3)}"
    settings = settings.model_copy(update={"url": url, "exchange": exchange})
    log_dir = Path(tempfile.mkdtemp(prefix="agentbus-demo-"))
    team = _team(settings, root, log_dir, code_instances)
    say(f"broker {mask_url(url)}, exchange {exchange}; agent logs in {log_dir}")
    client_id = default_id(settings, "demo-client")
    team.start()
    try:
        async with Bus(settings, agent_id=client_id) as bus:
            ready = await _wait_ready(bus, team, say)
            say(f"team of {len(team.members)} agents ready: "
                + ", ".join(m.agent_id for m in team.members))  # fmt: skip
            code, plans = await analyse(PlanClient(bus), root, say)
            if plans:
                for line in timings(plans, ready, time.monotonic() - begun):
                    say(line)
                if keep:
                    await _explore(team, settings, say)
            return code
    finally:
        ended = await asyncio.to_thread(team.stop)
        codes = ", ".join(f"{agent_id}={code}" for agent_id, code in ended)
        await _remove_topology(settings, [client_id, *(m.agent_id for m in team.members)])
        if all(code == 0 for _, code in ended):
            # A clean run leaves no logs behind; a failed one keeps them to read.
            shutil.rmtree(log_dir, ignore_errors=True)
            say(f"team stopped ({codes})")
        else:
            say(f"team stopped ({codes}); agent logs kept in {log_dir}")


async def _broker(url: str, say: Callable[[str], None]) -> str | None:
    # The broker's URL once one answers; None (said in one line) when none can be had.
    try:
        return await asyncio.to_thread(ensure_broker, url, say=say)
    except BrokerUnavailable as exc:
        say("no broker: the team runs in this process, on the in-memory bus")
        say(f"for the real thing: {exc}")
        return None


async def _remove_topology(settings: Settings, agent_ids: list[str]) -> None:
    # The demo's exchange is its own: leave nothing of it on the broker, its streams
    # included (the leaders' journals and lease; the audit trail and a service's conversations where
    # they are kept). Plans' reply queues and feeds go by themselves (at their plan's end,
    # x-expires, exclusive). tests/integration/test_demo.py lists what is left.
    topology = Topology(settings.exchange)
    queues = [topology.dead_letter_queue, topology.audit_stream]
    queues.append(topology.journal_queue(_PLAN_JOURNAL))
    queues += [topology.journal_queue(_SCHEDULES), topology.lease_queue(_SCHEDULES)]
    for service in _SERVICES:
        queues += [
            topology.service_queue(service),
            topology.conversations(service),
        ]
    queues += [topology.instance_queue(agent_id) for agent_id in agent_ids]
    with contextlib.suppress(Exception):
        connection = await aio_pika.connect(settings.url, timeout=10)
        async with connection:
            for name in queues:
                channel = await connection.channel()
                with contextlib.suppress(Exception):
                    await channel.queue_delete(name)
            for name in (topology.exchange, topology.dead_letter_exchange):
                channel = await connection.channel()
                with contextlib.suppress(Exception):
                    await channel.exchange_delete(name)


async def _explore(team: Team, settings: Settings, say: Callable[[str], None]) -> None:
    ports = [f"{m.agent_id}:{m.metrics_port}" for m in team.members if m.metrics_port]
    prefix = f"{_agentbus_command()} --exchange {settings.exchange}"
    say("")
    say("the team keeps running; try, in another terminal:")
    say(f"  {prefix} agents")
    say(f'  {prefix} request text keywords --params \'{{"text": "bees make honey"}}\'')
    say(f"  {prefix} request demo-code-1 describe")
    say(f"  metrics: {', '.join(ports)} (http://localhost:PORT/metrics)")
    say("Ctrl-C stops the team.")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def _agentbus_command() -> str:
    # The bare name where it finds this very script (an active venv), else its path.
    script = Path(sys.executable).with_name("agentbus")
    found = shutil.which("agentbus")
    return "agentbus" if found is not None and Path(found) == script else str(script)


def demo_command(
    settings: Settings, path: Path, keep: bool, code_instances: int, in_memory: bool = False
) -> int:
    """Run the demo to its end; Ctrl-C stops the team cleanly.

    Raises:
        ConfigurationError: the demo extra (radon, for the code agents) is not installed.
    """
    if importlib.util.find_spec("radon") is None:
        raise ConfigurationError(
            "the demo's code agents need radon: pip install 'agentbus[demo]' "
            "(./scripts/demo installs it)"
        )
    return run_loop(
        run_demo(
            settings, path.resolve(), keep=keep, code_instances=code_instances, in_memory=in_memory
        )
    )


@click.command()
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

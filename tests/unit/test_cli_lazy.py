"""The CLI imports a command's module when the command runs: an agent process stays light."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from agentbus.cli import cli
from agentbus.cli._lazy import LazyGroup

HEAVY = ("agentbus.leader", "agentbus.gateway", "agentbus.mcp", "agentbus.dashboard")


def test_every_command_resolves_to_the_click_command_of_its_name() -> None:
    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert names == sorted(names)
    assert names == [
        "agents", "answer", "audit", "dashboard", "definitions", "demo", "federation",
        "gateway", "leader", "mcp", "plan", "publish", "registry", "request", "run",
        "run-a2a", "run-mcp", "schedule", "schema",
    ]  # fmt: skip
    for name in names:
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command)
        assert command.name == name
    assert cli.get_command(ctx, "no-such-command") is None
    assert cli.commands == {}  # mkdocs-click walks list_commands and get_command then


def test_a_name_bound_to_another_command_is_refused() -> None:
    group = LazyGroup(lazy={"wrong": "agentbus.cli._serve:run"})
    with pytest.raises(TypeError, match="not the click command 'wrong'"):
        group.get_command(click.Context(group), "wrong")


def test_an_agent_process_imports_neither_the_faces_nor_the_leader() -> None:
    code = (
        "import json, sys; import agentbus, agentbus.cli, agentbus.cli._serve; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('agentbus'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(out.stdout)
    assert "agentbus.agents" in loaded
    assert [m for m in loaded if m.startswith(HEAVY)] == []


def test_the_root_names_the_leader_on_first_use() -> None:
    import agentbus
    from agentbus.leader import Leader, Plan

    assert agentbus.Leader is Leader
    assert agentbus.Plan is Plan
    assert {"Leader", "Plan", "PlanClient", "SyncBus", "connect_sync"} <= set(dir(agentbus))
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = agentbus.Nothing  # type: ignore[attr-defined]

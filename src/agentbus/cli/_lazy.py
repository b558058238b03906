"""A click group that imports each command's module when the command is first used."""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["LazyGroup"]


class LazyGroup(click.Group):
    """A group whose commands are named up front and imported on first use.

    ``lazy`` maps each command's name to ``"module:attribute"``. An agent process
    (``agentbus run``) imports its own command's module only, not the gateway's, the
    MCP server's or the dashboard's, nor the leader's models. ``commands`` stays empty,
    so a tool that walks the group (``--help``, mkdocs-click) goes through
    ``list_commands`` and ``get_command``.
    """

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = dict(lazy)
        self._loaded: dict[str, click.Command] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._lazy)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self._loaded.get(cmd_name)
        if command is not None:
            return command
        target = self._lazy.get(cmd_name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise TypeError(f"{target} is not the click command {cmd_name!r}")
        self._loaded[cmd_name] = command
        return command

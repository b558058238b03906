"""The ``agentbus`` command line: ``main`` runs it, ``cli`` is its click group."""

from agentbus.cli._main import cli, main

__all__ = ["cli", "main"]

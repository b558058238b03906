"""The ``agentbus`` command line."""

from agentbus.cli._main import main

__all__ = ["main"]

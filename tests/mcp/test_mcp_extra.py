"""MCP is an extra: without the SDK the CLI still works and names what to install."""

from __future__ import annotations

import subprocess
import sys

_CODE = """
import sys
sys.modules["mcp"] = None
import agentbus, agentbus.bus, agentbus.cli
from click.testing import CliRunner
for command in (["mcp"], ["run-mcp", "http://127.0.0.1:9/mcp"]):
    result = CliRunner().invoke(agentbus.cli.cli, command)
    print(result.exit_code, result.output.strip().splitlines()[-1])
"""


def test_without_the_sdk_the_commands_say_which_extra_to_install() -> None:
    """agentbus and its CLI import without the mcp extra; mcp and run-mcp name it."""
    done = subprocess.run(
        [sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=60, check=True
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        status, message = line.split(" ", 1)
        assert status == "2"
        assert "agentbus[mcp]" in message

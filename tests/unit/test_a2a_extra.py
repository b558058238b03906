"""The A2A gateway is an extra: without a2a-sdk the CLI still works and names what to install."""

from __future__ import annotations

import subprocess
import sys

_CODE = """
import sys
sys.modules["a2a"] = None
sys.modules["uvicorn"] = None
import agentbus, agentbus.bus, agentbus.cli
from click.testing import CliRunner
for command in (["gateway", "--anonymous"], ["run-a2a", "http://127.0.0.1:9/"]):
    result = CliRunner().invoke(agentbus.cli.cli, command)
    print(result.exit_code, result.output.strip().splitlines()[-1])
"""


def test_without_a2a_sdk_the_commands_say_which_extra_to_install() -> None:
    """agentbus and its CLI import without the a2a extra; gateway and run-a2a name it."""
    done = subprocess.run(
        [sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=60, check=True
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        status, message = line.split(" ", 1)
        assert status == "2"
        assert "agentbus[a2a]" in message

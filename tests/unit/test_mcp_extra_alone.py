"""The MCP faces stand without the A2A gateway: the ``mcp`` extra does not need the ``a2a`` one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("mcp")  # the mcp extra

_CODE = """
import json, sys
import agentbus.cli, agentbus.mcp
from click.testing import CliRunner
keys = CliRunner().invoke(
    agentbus.cli.cli, ["mcp", "--transport", "http", "--keys", "/nonexistent/keys.json"]
)
loaded = sorted(
    name for name in sys.modules
    if name == "a2a" or name.startswith(("a2a.", "agentbus.gateway"))
)
print(json.dumps({"status": keys.exit_code, "output": keys.output, "loaded": loaded}))
"""


def test_the_mcp_package_and_commands_load_neither_a2a_nor_the_gateway() -> None:
    """``agentbus.mcp`` and ``agentbus mcp`` (up to reading its keys) import no A2A code."""
    done = subprocess.run(
        [sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["loaded"] == []
    assert seen["status"] == 2  # the keys file is read (and missing): the usage error
    assert "cannot read API keys" in seen["output"]

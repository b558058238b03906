"""The CLI and the dashboard's boards load without the ``dashboard`` extra (its web stack):
the container image and a plain ``pip install agentbus`` have no Starlette."""

from __future__ import annotations

import json
import subprocess
import sys

_CODE = """
import json, sys
sys.modules.update({name: None for name in ("starlette", "sse_starlette", "uvicorn")})
import agentbus.cli, agentbus.dashboard
from click.testing import CliRunner
version = CliRunner().invoke(agentbus.cli.cli, ["--version"])
print(json.dumps({"status": version.exit_code, "output": version.output}))
"""


def test_the_cli_and_the_boards_import_without_the_web_stack() -> None:
    """Starlette, sse-starlette and uvicorn made unimportable: ``agentbus --version`` runs
    and ``agentbus.dashboard`` (the boards) imports."""
    done = subprocess.run(
        [sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == 0, seen["output"]

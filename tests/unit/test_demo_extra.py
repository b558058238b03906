"""The demo's agents are an extra: without radon, `agentbus demo` says what to install."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib.machinery import ModuleSpec

import pytest
from click.testing import CliRunner

from agentbus.cli import cli


def test_demo_without_radon_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """One clear error naming agentbus[demo], before any broker or process is touched."""
    real = importlib.util.find_spec

    def without_radon(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "radon" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_radon)

    result = CliRunner().invoke(cli, ["demo"])

    assert result.exit_code != 0
    assert "agentbus[demo]" in str(result.exception)


def test_the_core_package_imports_without_radon() -> None:
    """agentbus, its bus, registry and leader import with radon unavailable; builtin says why."""
    code = (
        "import sys; sys.modules['radon'] = None\n"
        "import agentbus, agentbus.bus, agentbus.registry, agentbus.cli\n"
        "try:\n"
        "    import agentbus.agents.builtin\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert "pip install 'agentbus[demo]'" in done.stdout

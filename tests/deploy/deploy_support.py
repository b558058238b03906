"""What the deploy tier shares: where the tools are, podman's settings, a timing record."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final, TypeVar

import pytest

from support.required import missing

T = TypeVar("T")
ROOT: Final = Path(__file__).resolve().parents[2]
DEPLOY: Final = ROOT / "deploy"
VENV_BIN: Final = Path(sys.executable).parent
FIGURES: dict[str, str] = {}  # what the tier measured, printed in the terminal summary

# Podman on this kind of host: runc (crun fails on its cgroups), ulimits at or below the
# host's (open files 20000, processes 32768), no systemd.
CONTAINERS_CONF: Final = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def tool(name: str) -> str:
    """The path of ``name``: the venv's, else on PATH (with sbin); else skip or fail."""
    venv = VENV_BIN / name
    if os.access(venv, os.X_OK):
        return str(venv)
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
    found = shutil.which(name, path=path)
    if found is None:
        missing(f"{name} is not installed; ./scripts/ensure-deploy-tools installs it")
    return found


def run(
    command: Sequence[str], *, timeout: float = 120, env: dict[str, str] | None = None,
    cwd: Path = ROOT, check: bool = True,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``command``; with ``check``, fail the test with its output when it fails."""
    done = subprocess.run(
        list(command), capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
        check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if check and done.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    return done


@contextmanager
def timed(what: str) -> Iterator[None]:
    """Record how long the block took under ``what`` (shown after the run)."""
    began = time.monotonic()
    try:
        yield
    finally:
        FIGURES[what] = f"{time.monotonic() - began:.1f} s"

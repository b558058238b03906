"""Run a documented shell block as a user would: the helpers of the doc-block tests.

Lines ending in ``&`` start processes, ``kill`` SIGTERMs them, and every other line must
exit 0, tried again for a while as a user would while the team starts.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RETRY_FOR = 20.0


def readme_commands(mark: str) -> list[str]:
    """The commands of the shell block under ``mark`` (one may span lines), on whichever
    page of the README and docs/ holds it."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    found = re.search(re.escape(mark) + r"\s*```sh\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"no page has a block marked {mark}"
    commands, pending = [], ""
    for line in found[1].replace("\\\n", " ").splitlines():
        pending += line + "\n"
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        commands.append(pending.strip())
        pending = ""
    return commands


async def until_ok(
    line: str, cwd: Path, env: dict[str, str], *, retry_for: float = RETRY_FOR
) -> subprocess.CompletedProcess[str]:
    """Run ``line`` in a shell until it exits 0 (within ``retry_for``); return the run."""
    deadline = time.monotonic() + retry_for
    while True:
        done = await asyncio.to_thread(
            subprocess.run, line, shell=True, cwd=cwd, env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return done
        if time.monotonic() > deadline:
            raise AssertionError(f"{line!r} exited {done.returncode}: {done.stderr[-2000:]}")
        await asyncio.sleep(0.3)

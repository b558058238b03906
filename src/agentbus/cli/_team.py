"""A team of agent processes: started together, watched, and stopped with no orphans."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

from agentbus._config import Settings

__all__ = ["Member", "Team"]

_PR_SET_PDEATHSIG: Final = 1


def _die_with_parent() -> None:
    # Linux: the child gets SIGTERM if the demo itself is killed, so none is orphaned.
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Member:
    """One agent process of the team."""

    agent_id: str
    command: list[str]
    metrics_port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Team:
    """Starts ``agentbus`` processes with shared settings; ``stop`` ends every one of them."""

    def __init__(self, settings: Settings, log_dir: Path, env: dict[str, str] | None = None):
        self.settings = settings
        self.log_dir = log_dir
        self.members: list[Member] = []
        self._env = {**os.environ, **(env or {})}
        self._env["AGENTBUS_URL"] = settings.url
        self._env["AGENTBUS_EXCHANGE"] = settings.exchange

    def add(self, agent_id: str, command: list[str], *, metrics_port: int | None = None) -> Member:
        member = Member(agent_id, command, metrics_port)
        self.members.append(member)
        return member

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for member in self.members:
            argv = [sys.executable, "-m", "agentbus", "--log-format", "json", *member.command]
            argv += ["--id", member.agent_id]
            if member.metrics_port is not None:
                argv += ["--metrics-port", str(member.metrics_port)]
            member.log_path = self.log_dir / f"{member.agent_id}.log"
            member._log = member.log_path.open("wb")
            member.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=member._log,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,  # Ctrl-C reaches the demo, which stops the team in order
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    def failed(self) -> list[Member]:
        """Members whose process has exited."""
        return [m for m in self.members if m.process is not None and not m.running]

    def stop(self, grace: float = 10.0) -> list[tuple[str, int | None]]:
        """SIGTERM every member (they drain), SIGKILL what is left after ``grace`` seconds."""
        for member in self.members:
            if member.running and member.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    member.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for member in self.members:
            if member.process is None:
                continue
            try:
                member.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                member.process.kill()
                member.process.wait(timeout=10)
        for member in self.members:
            if member._log is not None:
                member._log.close()
        return [(m.agent_id, m.process.returncode if m.process else None) for m in self.members]

"""Agents as separate OS processes, for tests that kill, freeze or terminate them.

Each process is ``python -m agentbus run MODULE:CLASS`` with JSON logs, its standard
output and error going to one file::

    launcher = AgentLauncher(broker_url, exchange="chaos-1", workdir=tmp_path)
    worker = launcher.start("myagents:Summarizer", "--id", "summarizer-1")
    await worker.started()  # it logged "agent started"
    worker.pause()  # SIGSTOP: frozen, connections open
    worker.resume()  # SIGCONT
    worker.kill()  # SIGKILL: no drain, no goodbye
    assert await worker.exited(5) == -signal.SIGKILL
    launcher.close()  # SIGTERM (then SIGKILL) whatever still runs
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

__all__ = ["AgentLauncher", "AgentProcess"]

STARTED: Final = "agent started"  # what an agent logs once it serves


class AgentProcess:
    """One agent process: signal it, wait for it, read what it wrote.

    Signals go to the process only (it runs in a session of its own, so a Ctrl-C at
    the terminal reaches the test runner, not the agent).
    """

    def __init__(self, popen: subprocess.Popen[bytes], output: Path, target: str) -> None:
        self.popen = popen
        self.output = output
        self.target = target

    def __repr__(self) -> str:
        status = "running" if self.is_running else f"exited={self.returncode}"
        return f"<AgentProcess {self.target} pid={self.pid} {status}>"

    @property
    def pid(self) -> int:
        """The OS process id."""
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (``-N`` for signal N), or ``None`` while it runs."""
        return self.popen.poll()

    @property
    def is_running(self) -> bool:
        """Tell whether the process has not exited (a paused process is running)."""
        return self.popen.poll() is None

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the process, unless it has exited."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: the agent dies at once; its unacked deliveries go back to their queues."""
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM: the agent drains (finishes short work, requeues the rest) and exits."""
        self.send_signal(signal.SIGTERM)

    def pause(self) -> None:
        """SIGSTOP: the agent freezes; its connection stays open but answers nothing."""
        self.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a paused agent goes on."""
        self.send_signal(signal.SIGCONT)

    def text(self) -> str:
        """Everything the process wrote so far (standard output and error)."""
        return self.output.read_text(encoding="utf-8", errors="replace")

    def tail(self, lines: int = 20) -> str:
        """The last lines the process wrote."""
        return "\n".join(self.text().splitlines()[-lines:])

    def wait(self, timeout: float) -> int:
        """Block until the process exits; return its status.

        Raises:
            TimeoutError: it still runs after ``timeout`` seconds.
        """
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(f"{self!r} still runs after {timeout} s") from exc

    async def exited(self, timeout: float) -> int:
        """Wait until the process exits; return its status.

        Raises:
            TimeoutError: it still runs after ``timeout`` seconds.
        """
        try:
            async with asyncio.timeout(timeout):
                while (code := self.popen.poll()) is None:  # noqa: ASYNC110 - no event to await
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise TimeoutError(f"{self!r} still runs after {timeout} s") from None
        return code

    async def started(self, timeout: float = 30.0, marker: str = STARTED) -> None:
        """Wait until the process has written ``marker`` (by default: it serves).

        Raises:
            TimeoutError: not within ``timeout`` seconds.
            RuntimeError: the process exited first.
        """
        try:
            async with asyncio.timeout(timeout):
                while marker not in self.text():
                    if self.popen.poll() is not None:
                        raise RuntimeError(f"{self!r} exited before {marker!r}:\n{self.tail()}")
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise TimeoutError(f"{self!r}: no {marker!r} in {timeout} s:\n{self.tail()}") from None

    def stop(self, grace: float = 10.0) -> int:
        """End the process however it is: SIGCONT, SIGTERM, then SIGKILL after ``grace``."""
        if self.popen.poll() is None:
            self.resume()  # a stopped process would not act on SIGTERM
            self.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=grace)
        if self.popen.poll() is None:
            self.kill()
            self.popen.wait(timeout=30)
        return self.popen.returncode


class AgentLauncher:
    """Starts ``agentbus run`` processes on one broker and exchange, and stops them all.

    Args:
        url: The broker URL the agents connect to; default the environment's.
        exchange: The topic exchange; default the environment's.
        workdir: Where output files go, and the processes' working directory (which
            ``agentbus run`` puts on ``sys.path``); default the current directory.
        env: Extra environment variables for every process.
        log_level: The agents' log level.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        exchange: str | None = None,
        workdir: Path | None = None,
        env: Mapping[str, str] | None = None,
        log_level: str = "info",
    ) -> None:
        self.url = url
        self.exchange = exchange
        self.workdir = workdir or Path.cwd()
        self.env = dict(env or {})
        self.log_level = log_level
        self.processes: list[AgentProcess] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def command(
        self,
        target: str,
        options: Sequence[str],
        *,
        url: str | None = None,
        exchange: str | None = None,
    ) -> list[str]:
        """The command line that runs ``target`` (``MODULE:CLASS``) with ``options``."""
        common = ["--log-format", "json", "--log-level", self.log_level]
        url = url or self.url
        exchange = exchange or self.exchange
        if url is not None:
            common += ["--url", url]
        if exchange is not None:
            common += ["--exchange", exchange]
        return [sys.executable, "-m", "agentbus", *common, "run", target, *options]

    def start(
        self,
        target: str,
        *options: str,
        url: str | None = None,
        exchange: str | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AgentProcess:
        """Start ``agentbus run TARGET OPTIONS...``, e.g. ``start("mod:Cls", "--id", "a-1")``.

        ``url``, ``exchange``, ``cwd`` and ``env`` override the launcher's for this process.
        """
        name = target.rpartition(":")[2]
        output = self.workdir / f"agent-{len(self.processes)}-{name}-{os.getpid()}.log"
        with output.open("wb") as sink:
            popen = subprocess.Popen(
                self.command(target, options, url=url, exchange=exchange),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env, **(env or {})},
                cwd=cwd or self.workdir,
                start_new_session=True,
            )
        process = AgentProcess(popen, output, target)
        self.processes.append(process)
        return process

    def close(self, grace: float = 10.0) -> None:
        """Stop every process still running (SIGTERM, SIGKILL after ``grace``) and reap it."""
        running = [process for process in self.processes if process.is_running]
        for process in running:
            process.resume()
            process.terminate()
        deadline = time.monotonic() + grace
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=max(deadline - time.monotonic(), 0.01))
        for process in running:
            process.stop(grace=0)

    def report(self, lines: int = 15) -> str:
        """Each process's exit status and last output lines, for a failing test's report."""
        return "\n".join(
            f"--- {process!r} ({process.output})\n{process.tail(lines)}"
            for process in self.processes
        )

"""The one harness every benchmark starts its processes and reads its figures through.

- ``Fleet``: processes started in their own session with their output in a log, waited for
  until they are ready, stopped (bounded, SIGKILL after) and their queues and exchanges
  deleted when the block ends, also on Ctrl-C or SIGTERM (``raise_on_sigterm``);
- CPU and memory from /proc: a process's CPU seconds, the host's busy seconds, the local
  broker's pid, RSS, peak RSS and open fds;
- the broker: ``--url`` (``AGENTBUS_URL``), consumer counts, deleting what a run declared;
- figures: percentiles of samples, quiet logging, JSON output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any
from urllib.parse import urlsplit

import aio_pika
import structlog

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
CLK_TCK = os.sysconf("SC_CLK_TCK")
STOP_WAIT = 15.0
READY_TIMEOUT = 60.0


# -- processes -----------------------------------------------------------------------------


@dataclass(slots=True)
class Proc:
    """One started process; its stderr (and stdout, unless piped) goes to ``log``."""

    role: str
    name: str
    popen: subprocess.Popen[bytes]
    log: IO[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def tail(self, size: int = 2000) -> str:
        with contextlib.suppress(ValueError, OSError):
            self.log.flush()
            self.log.seek(0)
            return self.log.read()[-size:].decode(errors="replace").strip()
        return ""

    def send(self, line: str) -> None:
        """Write a line to the process's stdin (started with ``pipes=True``)."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(line.encode() + b"\n")
        self.popen.stdin.flush()


@dataclass(slots=True)
class Fleet:
    """Processes of one run, and the queues and exchanges to delete when it ends.

    ``with Fleet(url) as fleet:`` stops every process (SIGTERM, SIGKILL after ``stop_wait``)
    and deletes ``fleet.queues`` and ``fleet.exchanges`` on the way out, with Ctrl-C and
    SIGTERM ignored meanwhile; on an error it prints the processes' last log lines first.
    """

    url: str | None = None
    stop_wait: float = STOP_WAIT
    procs: list[Proc] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    exchanges: list[str] = field(default_factory=list)

    def spawn(self, role: str, name: str, argv: list[str], *, pipes: bool = False) -> Proc:
        """Start ``argv`` in its own session (Ctrl-C reaches only us), bench/ on its path
        before our own PYTHONPATH (a worktree's src measures that src, not the venv's).

        With ``pipes``, its stdin and stdout are pipes to talk to it; else stdout goes to
        the log too.
        """
        log = tempfile.TemporaryFile()  # noqa: SIM115 -- closed when the fleet ends
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else log,
            stderr=log if pipes else subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": python_path()},
            start_new_session=True,
        )
        self.procs.append(proc := Proc(role, name, popen, log))
        return proc

    def pids(self, role: str) -> list[int]:
        return [proc.pid for proc in self.procs if proc.role == role]

    def check(self) -> None:
        """Raise if a process has exited."""
        for proc in self.procs:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with status {proc.popen.returncode}")

    async def wait(
        self, ready: Callable[[], Awaitable[bool]], what: str, timeout: float = READY_TIMEOUT
    ) -> None:
        """Poll ``ready`` until it holds; raise if a process exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not await ready():
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready within {timeout:g} s")
            await asyncio.sleep(0.2)

    def dump_logs(self) -> None:
        for proc in self.procs:
            if text := proc.tail():
                print(f"--- {proc.name} (exit {proc.popen.poll()}):\n{text}", file=sys.stderr)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, Exception):
            self.dump_logs()
        with shielded():
            stop(reversed(self.procs), self.stop_wait)  # clients before their servers
            for proc in self.procs:
                proc.log.close()
            if self.url is not None and (self.queues or self.exchanges):
                try:
                    asyncio.run(delete_all(self.url, self.queues, self.exchanges))
                except Exception as error:
                    print(f"cleanup failed: {error!r}", file=sys.stderr)


def stop(procs: Iterable[Proc], timeout: float = STOP_WAIT) -> None:
    """SIGTERM every process, wait a bounded time, SIGKILL whoever is left."""
    procs = list(procs)
    for proc in procs:
        if proc.popen.poll() is None:
            proc.popen.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.popen.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            print(f"{proc.name} did not stop: SIGKILL", file=sys.stderr)
            proc.popen.kill()
            proc.popen.wait()


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Ignore Ctrl-C and SIGTERM for the block: a second Ctrl-C must not stop a cleanup."""
    previous = (
        signal.signal(signal.SIGINT, signal.SIG_IGN),
        signal.signal(signal.SIGTERM, signal.SIG_IGN),
    )
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def raise_on_sigterm() -> None:
    """Clean up on SIGTERM as on Ctrl-C (also when started with SIGINT ignored: ``cmd &``)."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)


def python_path() -> str:
    """bench/, then the PYTHONPATH this process was given."""
    inherited = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([str(BENCH_DIR), *(p for p in inherited.split(os.pathsep) if p)])


def agentbus_cli(url: str, exchange: str) -> list[str]:
    """The venv's ``agentbus`` console script, on ``exchange``, logging warnings only."""
    script = str(Path(sys.executable).with_name("agentbus"))
    return [script, "--url", url, "--exchange", exchange, "--log-level", "warning"]


# -- /proc: CPU and memory -----------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def host_busy_seconds() -> float:
    """CPU time all cores of the host spent busy (not idle nor iowait), from /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK


def cpu_snapshot(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds per role, and ``host``: the host's busy seconds."""
    return {role: sum(map(cpu_seconds, ids)) for role, ids in pids.items()} | {
        "host": host_busy_seconds()
    }


def broker_pid(url: str) -> int | None:
    """The local RabbitMQ node listening on the URL's port, to read its CPU; None if remote."""
    port, sockets = urlsplit(url).port or 5672, set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in (line.split() for line in Path(table).read_text().splitlines()[1:]):
                if row[3] == "0A" and int(row[1].rpartition(":")[2], 16) == port:  # LISTEN
                    sockets.add(f"socket:[{row[9]}]")
    for beam in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if (beam / "comm").read_text().strip() != "beam.smp":
                continue
            if any(os.readlink(fd) in sockets for fd in (beam / "fd").iterdir()):
                return int(beam.name)
    return None


def _status_bytes(pid: int, key: str) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    return None


def rss(pid: int) -> int | None:
    """The process's resident memory (VmRSS) in bytes; None once it is gone."""
    return _status_bytes(pid, "VmRSS")


def reset_peak_rss(pid: int) -> int:
    """Reset the process's peak RSS (VmHWM) to its RSS now, and return that RSS in bytes."""
    with contextlib.suppress(OSError):  # no /proc/PID/clear_refs: the peak stays cumulative
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    return rss(pid) or 0


def peak_rss(pid: int) -> int:
    """The process's peak RSS since the last reset_peak_rss (VmHWM), in bytes."""
    return _status_bytes(pid, "VmHWM") or 0


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


# -- the broker ----------------------------------------------------------------------------


def broker_version(connection: aio_pika.abc.AbstractConnection) -> str:
    """The RabbitMQ version a connection's server announced."""
    props = connection.transport.connection.server_properties if connection.transport else {}
    return str(props.get("version", "?"))


async def consumers(connection: aio_pika.abc.AbstractConnection, queue: str) -> int:
    """Consumers of ``queue`` (0 while it does not exist)."""
    channel = await connection.channel()
    try:
        declared = await channel.declare_queue(queue, passive=True)
    except aio_pika.exceptions.ChannelClosed:
        return 0
    result = declared.declaration_result.consumer_count
    await channel.close()
    return int(result or 0)


async def delete_all(url: str, queues: Iterable[str], exchanges: Iterable[str]) -> list[str]:
    """Delete queues, then exchanges; say what failed and go on. Returns what was deleted."""
    deleted = []
    async with await aio_pika.connect(url, timeout=10) as connection:
        channel = await connection.channel()
        targets = [(q, "queue_delete") for q in queues] + [
            (e, "exchange_delete") for e in exchanges
        ]
        for name, delete in targets:
            try:
                await getattr(channel, delete)(name)
                deleted.append(name)
            except Exception as exc:  # report, reopen the channel it closed, and go on
                print(f"cleanup: {delete} {name}: {exc!r}", file=sys.stderr)
                channel = await connection.channel()
    return deleted


# -- figures and output --------------------------------------------------------------------


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, nearest rank."""
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(samples_ns: list[int]) -> dict[str, float]:
    """p50, p99 and mean of nanosecond samples, in microseconds."""
    s = sorted(samples_ns)
    p50, p99 = (quantile(s, q) / 1000 for q in (0.5, 0.99))
    return {"p50_us": p50, "p99_us": p99, "mean_us": sum(s) / len(s) / 1000}


def parser(doc: str | None, *, json_out: bool = True) -> argparse.ArgumentParser:
    """An argument parser with ``--url`` (default ``AGENTBUS_URL``) and ``--json FILE``."""
    out = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    out.add_argument("--url", default=os.environ.get("AGENTBUS_URL", DEFAULT_URL))
    if json_out:
        out.add_argument("--json", metavar="FILE", type=Path, help="also write figures as JSON")
    return out


def quiet_logging() -> None:
    """Warnings and worse only, from structlog and logging: a benchmark prints figures."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    logging.basicConfig(level=logging.WARNING)


def write_json(path: Path | None, data: Any) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")

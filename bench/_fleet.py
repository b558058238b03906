"""Processes for bench_leader.py: start, stop (bounded), logs, and CPU time from /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

BENCH_DIR = Path(__file__).resolve().parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
STOP_WAIT = 15.0


@dataclass(slots=True)
class Proc:
    role: str  # registry, leader, worker, raw
    name: str
    popen: subprocess.Popen[bytes]
    log: IO[bytes]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_snapshot(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds per role, and ``host``: all cores busy (not idle nor iowait), /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:8]]
    host = (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK
    return {role: sum(map(cpu_seconds, ids)) for role, ids in pids.items()} | {"host": host}


def broker_pid(url: str) -> int | None:
    """The local RabbitMQ node listening on the URL's port, to read its CPU; None if remote."""
    port, sockets = urlsplit(url).port or 5672, set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in (line.split() for line in Path(table).read_text().splitlines()[1:]):
                if row[3] == "0A" and int(row[1].rpartition(":")[2], 16) == port:  # LISTEN
                    sockets.add(f"socket:[{row[9]}]")
    beams = [p for p in Path("/proc").glob("[0-9]*") if _comm(p) == "beam.smp"]
    for beam in beams:
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in sockets for fd in (beam / "fd").iterdir()):
                return int(beam.name)
    return None


def _comm(proc: Path) -> str:
    try:
        return (proc / "comm").read_text().strip()
    except OSError:
        return ""


def spawn(fleet: list[Proc], role: str, name: str, argv: list[str]) -> None:
    log = tempfile.TemporaryFile()  # noqa: SIM115 -- closed by stop_fleet
    env = {**os.environ, "PYTHONPATH": str(BENCH_DIR)}
    popen = subprocess.Popen(  # own session: Ctrl-C reaches only us, and we stop them
        argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    fleet.append(Proc(role, name, popen, log))


def stop_fleet(fleet: list[Proc]) -> None:
    """SIGTERM every process, wait a bounded time, SIGKILL whoever is left."""
    for proc in fleet:
        if proc.popen.poll() is None:
            proc.popen.terminate()
    deadline = time.monotonic() + STOP_WAIT
    for proc in fleet:
        try:
            proc.popen.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            print(f"{proc.name} did not stop: SIGKILL", file=sys.stderr)
            proc.popen.kill()
            proc.popen.wait()
        proc.log.close()


def dump_logs(fleet: list[Proc]) -> None:
    for proc in fleet:
        with contextlib.suppress(ValueError, OSError):
            proc.log.seek(0)
            text = proc.log.read()[-2000:].decode(errors="replace").strip()
            if text:
                print(f"--- {proc.name} (exit {proc.popen.poll()}):\n{text}", file=sys.stderr)


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


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss(pid: int) -> int:
    """Reset the process's peak RSS (VmHWM) to its RSS now, and return that RSS in bytes."""
    with contextlib.suppress(OSError):  # no /proc/PID/clear_refs: the peak stays cumulative
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status_kb(pid, "VmRSS")


def peak_rss(pid: int) -> int:
    """The process's peak RSS since the last reset_peak_rss (VmHWM), in bytes."""
    return _status_kb(pid, "VmHWM")

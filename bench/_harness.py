"""The benchmarks' harness: ``Fleet`` (processes, topology), /proc readings, timing, logging."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import aio_pika
import structlog

from agentbus import AgentBusError
from agentbus.bus import Topology

BENCH_DIR = Path(__file__).resolve().parent
# Same-loop ratios: agentbus processes run on asyncio's loop, as the peers do, unless told.
os.environ.setdefault("AGENTBUS_LOOP", "asyncio")
CLK_TCK = os.sysconf("SC_CLK_TCK")
STOP_WAIT, READY_TIMEOUT = 15.0, 60.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)
Call = Callable[[int], Awaitable[Any]]
Say = Callable[[str], None]  # progress, to stderr


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
        """The log's last ``size`` bytes (read where they lie: the process writes on)."""
        with contextlib.suppress(ValueError, OSError):
            end = os.fstat(fd := self.log.fileno()).st_size
            return os.pread(fd, min(size, end), max(end - size, 0)).decode(errors="replace").strip()
        return ""

    def readline(self, timeout: float) -> str:
        """The next line on the process's stdout (started with ``pipes=True``)."""
        assert self.popen.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.popen.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                raise TimeoutError(f"no word from {self.name} within {timeout:g} s")
        if not (line := self.popen.stdout.readline().decode().strip()):
            raise RuntimeError(f"{self.name} exited with status {self.popen.wait()}")
        return line

    def send(self, line: str) -> None:
        """Write ``line`` to the process's stdin (started with ``pipes=True``)."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(f"{line}\n".encode())
        self.popen.stdin.flush()


@dataclass(slots=True)
class Fleet:
    """Processes and topology of one run, stopped and deleted when the block ends (Ctrl-C too)."""

    url: str | None = None
    procs: list[Proc] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    exchanges: list[str] = field(default_factory=list)

    def spawn(self, role: str, name: str, argv: list[str], *, pipes: bool = False,
              env: dict[str, str] | None = None, **options: Any) -> Proc:  # fmt: skip
        """Start ``argv`` in a session of its own, bench/ on its PYTHONPATH; ``pipes``: stdio."""
        log = tempfile.TemporaryFile()  # noqa: SIM115 -- closed when the fleet ends
        env = {**os.environ, **(env or {})}
        paths = [str(BENCH_DIR), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        popen = subprocess.Popen(argv, **{
            "stdin": subprocess.PIPE if pipes else subprocess.DEVNULL,
            "stdout": subprocess.PIPE if pipes else log,
            "stderr": log if pipes else subprocess.STDOUT, "start_new_session": True,
            "env": {**env, "PYTHONPATH": os.pathsep.join(paths)},
        } | options)  # fmt: skip
        self.procs.append(proc := Proc(role, name, popen, log))
        return proc

    def topology(self, exchange: str, services: Iterable[str] = (), agents: Iterable[str] = (),
                 leaders: bool = False) -> Topology:  # fmt: skip
        """Have ``exchange``, its dead letters, these queues (``leaders``: theirs) deleted."""
        topology = Topology(exchange)
        self.queues += [topology.service_queue(service) for service in services]
        self.queues += [topology.instance_queue(agent_id) for agent_id in agents]
        self.queues.append(topology.dead_letter_queue)
        if leaders:
            self.queues += [topology.journal_queue("plans"), topology.journal_queue("schedules"),
                            topology.lease_queue("schedules")]  # fmt: skip
        self.exchanges += [exchange, topology.dead_letter_exchange]
        return topology

    def agentbus(self, exchange: str, *args: str, role: str | None = None, name: str | None = None,
                 log: str = "warning", **options: Any) -> Proc:  # fmt: skip
        """``agentbus ARGS`` on ``exchange``, its role the command and its name the last arg."""
        script = str(Path(sys.executable).with_name("agentbus"))
        argv = [script, "--url", self.url or "", "--exchange", exchange, "--log-level", log, *args]
        return self.spawn(role or args[0], name or args[-1], argv, **options)

    def retire(self, proc: Proc) -> None:
        """Stop ``proc`` before the fleet ends (its exit is not a failure)."""
        stop([proc])
        self.procs.remove(proc)
        proc.log.close()

    def pids(self, role: str) -> list[int]:
        return [proc.pid for proc in self.procs if proc.role == role]

    async def wait(self, ready: Callable[[], Awaitable[bool] | bool], what: str,
                   timeout: float = READY_TIMEOUT) -> None:  # fmt: skip
        """Poll ``ready`` until it holds; raise if a process exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not (held if isinstance(held := ready(), bool) else await held):
            for proc in self.procs:
                if proc.popen.poll() is not None:
                    raise RuntimeError(f"{proc.name} exited with status {proc.popen.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready within {timeout:g} s")
            await asyncio.sleep(0.2)

    async def consumed(self, queues: list[str], at_least: int = 1) -> None:
        """Wait until each of ``queues`` has ``at_least`` consumers."""
        assert self.url is not None
        async with await aio_pika.connect(self.url) as connection:

            async def ready() -> bool:
                counts = [(await queue_counts(connection, queue))[1] for queue in queues]
                return min(counts) >= at_least

            await self.wait(ready, f"consumers of {', '.join(queues)}")

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if isinstance(exc_info[1], Exception):
            for proc in self.procs:
                if text := proc.tail():
                    print(f"--- {proc.name} (exit {proc.popen.poll()}):\n{text}", file=sys.stderr)
        # Ctrl-C and SIGTERM ignored meanwhile: a second Ctrl-C must not stop a cleanup.
        previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in SIGNALS}
        try:
            stop(reversed(self.procs))  # clients before their servers
            for proc in self.procs:
                proc.log.close()
            if self.url is not None and (self.queues or self.exchanges):
                try:
                    asyncio.run(delete_all(self.url, self.queues, self.exchanges))
                except Exception as error:
                    print(f"cleanup failed: {error!r}", file=sys.stderr)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def stop(procs: Iterable[Proc], timeout: float = STOP_WAIT) -> None:
    """SIGTERM every process, wait a bounded time, SIGKILL whoever is left."""
    procs = [proc for proc in procs if proc.popen.poll() is None]
    for proc in procs:
        proc.popen.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.popen.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            print(f"{proc.name} did not stop: SIGKILL", file=sys.stderr)
            proc.popen.kill()
            proc.popen.wait()


def raise_on_sigterm() -> None:
    """Clean up on SIGTERM as on Ctrl-C (also when started with SIGINT ignored: ``cmd &``)."""
    for signum in SIGNALS:
        signal.signal(signum, signal.default_int_handler)  # raises KeyboardInterrupt


def stop_event() -> asyncio.Event:
    """An event set on SIGTERM or SIGINT: a served process's way to end (call in its loop)."""
    stop = asyncio.Event()
    for signum in SIGNALS:
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    return stop


def exchange_name(kind: str) -> str:
    """A throwaway exchange's name, ``bench-KIND-`` and 8 hex digits."""
    return f"bench-{kind}-{uuid.uuid4().hex[:8]}"


async def answers(bus: Any, service: str) -> bool:
    """Whether ``service`` answers a ``ping`` on ``bus`` within 2 s: a readiness poll."""
    try:
        await bus.request(service, "ping", timeout=2)
    except AgentBusError:
        return False
    return True


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_url() -> str:
    """``$AGENTBUS_DEDUP_URL`` or ``$AGENTBUS_TEST_DEDUP_URL``; else ``scripts/ensure-redis``'s."""
    if url := os.environ.get("AGENTBUS_DEDUP_URL") or os.environ.get("AGENTBUS_TEST_DEDUP_URL"):
        return url
    script = [str(BENCH_DIR.parent / "scripts" / "ensure-redis"), "--print-url"]
    return subprocess.run(script, check=True, capture_output=True, text=True).stdout.strip()


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (0 once it is gone)."""
    with contextlib.suppress(OSError):
        fields = _stat(pid)
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    return 0.0


def cpu_snapshot(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds per role, and ``host``: the host's busy seconds (not idle nor iowait)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:8]]
    host = (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK
    return {role: sum(map(cpu_seconds, ids)) for role, ids in pids.items()} | {"host": host}


def cpu_split(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per role between two snapshots; ``others``: the rest of the host's."""
    cpu = {role: after[role] - before[role] for role in before}
    cpu["others"] = cpu.pop("host") - sum(cpu.values())
    return cpu


def family(pid: int) -> list[int]:
    """``pid`` and its descendants (a server's worker processes), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            children.setdefault(int(_stat(int(stat.parent.name))[1]), []).append(
                int(stat.parent.name))  # fmt: skip
    found, todo = [], [pid]
    while todo:
        found.append(current := todo.pop())
        todo += children.get(current, [])
    return found


def listening(name: bytes, port: int) -> int | None:
    """The local process named ``name`` listening on ``port``, by its sockets; else None."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in (line.split() for line in Path(table).read_text().splitlines()[1:]):
                if row[3] == "0A" and int(row[1].rpartition(":")[2], 16) == port:  # LISTEN
                    sockets.add(f"socket:[{row[9]}]")
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if (proc / "comm").read_bytes().startswith(name) and any(
                os.readlink(fd) in sockets for fd in (proc / "fd").iterdir()
            ):
                return int(proc.name)
    return None


def broker_pid(url: str) -> int | None:
    """The local RabbitMQ node listening on the URL's port, to read its CPU; None if remote."""
    return listening(b"beam.smp", urlsplit(url).port or 5672)


def redis_pid(url: str | None) -> int | None:
    """The local redis-server serving ``url``, to read its CPU; None if none (or no URL)."""
    return listening(b"redis-server", urlsplit(url).port or 6379) if url else None


def rss(pid: int, key: str = "VmRSS") -> int | None:
    """The process's resident memory in bytes (``VmHWM``: its peak); None once it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    return None


def reset_peak_rss(pid: int) -> int:
    """Reset the process's peak RSS (VmHWM) to its RSS now, and return that RSS in bytes."""
    with contextlib.suppress(OSError):  # no /proc/PID/clear_refs: the peak stays cumulative
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    return rss(pid) or 0


async def queue_counts(connection: aio_pika.abc.AbstractConnection, queue: str) -> tuple[int, int]:
    """Ready messages and consumers of ``queue`` (0, 0 while it does not exist)."""
    channel = await connection.channel()
    try:
        declared = (await channel.declare_queue(queue, passive=True)).declaration_result
    except aio_pika.exceptions.ChannelClosed:
        return 0, 0
    await channel.close()
    return int(declared.message_count or 0), int(declared.consumer_count or 0)


async def delete_all(url: str, queues: Iterable[str], exchanges: Iterable[str]) -> None:
    """Delete queues, then exchanges; say what failed and go on."""
    async with await aio_pika.connect(url, timeout=10) as connection:
        channel = await connection.channel()
        targets = [(q, "queue_delete") for q in queues]
        targets += [(e, "exchange_delete") for e in exchanges]
        for name, delete in targets:
            try:
                await getattr(channel, delete)(name)
            except Exception as exc:  # report, reopen the channel it closed, and go on
                print(f"cleanup: {delete} {name}: {exc!r}", file=sys.stderr)
                channel = await connection.channel()


async def sequential(call: Call, n: int, warmup: int = 0) -> list[int]:
    """Nanoseconds of ``n`` calls one after the other, after ``warmup`` untimed ones."""
    for i in range(warmup):
        await call(i)
    samples = []
    for i in range(n):
        start = time.perf_counter_ns()
        await call(i)
        samples.append(time.perf_counter_ns() - start)
    return samples


async def windowed(call: Call, window: int, seconds: float) -> dict[str, Any]:
    """``window`` lanes of back-to-back calls for ``seconds``: calls done, CPU, errors."""
    done = [0]

    async def lane(i: int) -> None:
        while True:
            await call(i)
            done[0] += 1
            i += window

    cpu0, start = time.process_time(), time.perf_counter()
    lanes = [asyncio.create_task(lane(k)) for k in range(window)]
    await asyncio.sleep(seconds)
    count, elapsed, cpu = done[0], time.perf_counter() - start, time.process_time() - cpu0
    errors = [repr(task.exception()) for task in lanes if task.done() and task.exception()]
    for task in lanes:
        task.cancel()
    await asyncio.gather(*lanes, return_exceptions=True)
    return {"count": count, "seconds": elapsed, "per_s": count / elapsed, "cpu_s": cpu,
            "errors": errors[:3]}  # fmt: skip


async def interleaved(
    variants: Mapping[str, Callable[[], Awaitable[dict[str, Any]]]], rounds: int
) -> dict[str, Any]:
    """Each variant once a round, the order reversed every other round; rows and medians."""
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for k in range(rounds):
        for name in list(variants)[:: -1 if k % 2 else 1]:
            rows[name].append(await variants[name]())
    medians = {name: {key: statistics.median(row[key] for row in runs) for key in runs[0]
                      if isinstance(runs[0][key], int | float)}
               for name, runs in rows.items()}  # fmt: skip
    return {"rounds": rows, "figures": medians}


def summary(samples_ns: list[int]) -> dict[str, float]:
    """p50, p99 (nearest rank) and mean of nanosecond samples, in microseconds."""
    s = sorted(samples_ns)
    p50, p99 = (s[min(len(s) - 1, round(q * (len(s) - 1)))] / 1000 for q in (0.5, 0.99))
    return {"p50_us": p50, "p99_us": p99, "mean_us": sum(s) / len(s) / 1000}


def best_median(values: Iterable[float], best: Callable[..., float] = min) -> dict[str, float]:
    """The best (``min`` or ``max``) and the median of rounds' figures."""
    values = list(values)
    return {"best": best(values), "median": statistics.median(values)}


def quiet_logging() -> None:
    """Warnings and worse only, from structlog and logging: a benchmark prints figures."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    logging.basicConfig(level=logging.WARNING)

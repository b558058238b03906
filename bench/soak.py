"""Soak: request/response through the bus for a long time, with a forced reconnect every minute.

A server process (serves ``echo`` on a service queue) and a client process (sends
requests open-loop at a fixed rate) share an exchange of their own on the broker. The
rate is a fifth of saturation, measured first by a short closed-loop ramp (or ``--rate``).
Half-way through every minute, the broker force-closes this run's connections, and
only these (``rabbitmqctl close_connection``, picked by their client-provided name
``agentbus:soak-<token>-...``); aio-pika reconnects them.

Every minute it prints, for each process, RSS (``VmRSS``) and open fds from /proc; the
channels and consumers of this run's connections (``rabbitmqctl list_channels``); the
consumers and messages of this run's queues (``list_queues``); the client's ledger:
requests sent / answered / errors / timeouts, late and unknown replies (``bus.stats``),
latency p50/p99 over the last minute; the server's de-duplication entries. At
the end: whether RSS, fds, channels and consumers are flat (the last minute against the
first one with the de-duplication window full, minute 2 at the earliest: RSS and fds within
10 %, channels and consumers the same), and whether every
request was accounted for. Processes, queues and exchanges are removed on exit and on
Ctrl-C.

    .venv/bin/python bench/soak.py                  # 30 minutes
    .venv/bin/python bench/soak.py --minutes 3 --rate 200

Needs a broker at ``--url`` and ``rabbitmqctl`` on the same machine (run as a user that
may call it). Not part of CI.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
SERVICE = "echo"
STATUS = "STATUS "
STATUS_EVERY = 2.0
RAMP_WINDOWS = (1, 4, 16, 64)
STOP_WAIT = 30.0
RSS_TOLERANCE = 0.10
FD_TOLERANCE = 0.10


# -- the two processes ---------------------------------------------------------------------


def emit(message: dict[str, Any]) -> None:
    """A line for the orchestrator, on stdout (logs go to stderr)."""
    sys.stdout.write(STATUS + json.dumps(message) + "\n")
    sys.stdout.flush()


def settings_of(args: argparse.Namespace) -> Any:
    from agentbus import Settings

    return Settings(url=args.url, exchange=args.token, request_timeout=args.timeout)


async def stop_event() -> asyncio.Event:
    """Set on SIGTERM or SIGINT, or when the orchestrator has gone (our parent changed)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    parent = os.getppid()

    async def orphaned() -> None:
        while os.getppid() == parent:  # noqa: ASYNC110 - no event tells of a parent's death
            await asyncio.sleep(1)
        stop.set()

    _background.add(asyncio.create_task(orphaned()))
    return stop


_background: set[asyncio.Task[None]] = set()


async def report_until(stop: asyncio.Event, status: Callable[[], dict[str, Any]]) -> None:
    while not stop.is_set():
        emit(status())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), STATUS_EVERY)


async def run_server(args: argparse.Namespace) -> None:
    from agentbus import Bus, RequestEnvelope

    stop = await stop_event()
    bus = await Bus(settings_of(args), agent_id=f"{args.token}-server").open()

    async def echo(request: RequestEnvelope) -> dict[str, Any]:
        return request.payload.parameters

    await bus.serve(echo, service=SERVICE, prefetch=args.prefetch)
    emit({"role": "server", "event": "ready"})

    def status(event: str = "status") -> dict[str, Any]:
        # The de-duplication window keeps every reply for dedup_window (600 s): memory
        # grows until it is full, then stays flat. Shown to tell that from a leak.
        dedup = len(bus._dedup)
        return {"role": "server", "event": event, "stats": bus.stats.as_dict(), "dedup": dedup}

    await report_until(stop, status)
    await bus.aclose()
    emit(status("final"))


async def run_ramp(args: argparse.Namespace) -> None:
    """Closed loop with 1, 4, 16, 64 requests in flight: the best throughput is saturation."""
    from agentbus import AgentBusError, Bus

    bus = await Bus(settings_of(args), agent_id=f"{args.token}-ramp").open()
    payload = {"text": "x" * args.payload}
    steps = []
    try:
        for _ in range(50):  # warm up
            await bus.request(SERVICE, "echo", payload, timeout=args.timeout)
        for window in RAMP_WINDOWS:
            done = 0
            deadline = time.monotonic() + args.ramp_step

            async def worker(deadline: float = deadline) -> None:
                nonlocal done
                while time.monotonic() < deadline:
                    with contextlib.suppress(AgentBusError):
                        await bus.request(SERVICE, "echo", payload, timeout=args.timeout)
                        done += 1

            started = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(window)))
            steps.append({"window": window, "per_s": done / (time.monotonic() - started)})
    finally:
        await bus.aclose()
    emit({"role": "ramp", "event": "final", "steps": steps})


@dataclass(slots=True)
class Ledger:
    sent: int = 0
    answered: int = 0
    timeouts: int = 0
    remote_errors: int = 0
    other_errors: int = 0
    shed: int = 0
    errors_by: Counter[str] = field(default_factory=Counter)
    latencies: deque[tuple[float, float]] = field(default_factory=deque)

    def answered_in(self, seconds: float) -> None:
        """Count an answer; keep latencies of the last minute only (our memory stays flat)."""
        self.answered += 1
        now = time.monotonic()
        self.latencies.append((now, seconds))
        while self.latencies and self.latencies[0][0] < now - 60.0:
            self.latencies.popleft()

    def window(self, seconds: float = 60.0) -> dict[str, float | None]:
        cutoff = time.monotonic() - seconds
        recent = sorted(latency for at, latency in self.latencies if at >= cutoff)
        if not recent:
            return {"p50_ms": None, "p99_ms": None}
        p99 = recent[min(len(recent) - 1, int(len(recent) * 0.99))]
        return {"p50_ms": statistics.median(recent) * 1000, "p99_ms": p99 * 1000}


async def run_client(args: argparse.Namespace) -> None:
    from agentbus import AgentBusError, Bus, RemoteError, RequestTimeout

    stop = await stop_event()
    bus = await Bus(settings_of(args), agent_id=f"{args.token}-client").open()
    ledger = Ledger()
    tasks: set[asyncio.Task[None]] = set()
    payload = "x" * args.payload

    async def one(seq: int) -> None:
        started = time.monotonic()
        try:
            await bus.request(SERVICE, "echo", {"seq": seq, "text": payload}, timeout=args.timeout)
        except RequestTimeout:
            ledger.timeouts += 1
        except RemoteError as exc:
            ledger.remote_errors += 1
            ledger.errors_by[exc.code] += 1
        except AgentBusError as exc:
            ledger.other_errors += 1
            ledger.errors_by[type(exc).__name__] += 1
        else:
            ledger.answered_in(time.monotonic() - started)

    def status(event: str = "status") -> dict[str, Any]:
        return {
            "role": "client",
            "event": event,
            "sent": ledger.sent,
            "answered": ledger.answered,
            "timeouts": ledger.timeouts,
            "remote_errors": ledger.remote_errors,
            "other_errors": ledger.other_errors,
            "shed": ledger.shed,
            "in_flight": len(tasks),
            "errors_by": dict(ledger.errors_by),
            "stats": bus.stats.as_dict(),
            **ledger.window(),
        }

    emit({"role": "client", "event": "ready"})
    reporter = asyncio.create_task(report_until(stop, status))
    loop = asyncio.get_running_loop()
    started = loop.time()
    launched = 0
    max_in_flight = max(64, int(args.rate * args.timeout * 2))
    while not stop.is_set():
        due = int((loop.time() - started) * args.rate)
        while launched < due:  # open loop: a stall is caught up, never slows the schedule
            launched += 1
            if len(tasks) >= max_in_flight:
                ledger.shed += 1
                continue
            ledger.sent += 1
            task = asyncio.create_task(one(launched))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.sleep(0.005)
    if tasks:  # every request ends: answered, failed or timed out
        await asyncio.wait(set(tasks), timeout=args.timeout + 5)
    await reporter
    emit(status("final"))
    await bus.aclose()


# -- the orchestrator ----------------------------------------------------------------------


@dataclass(slots=True)
class Child:
    role: str
    popen: subprocess.Popen[str]
    log: IO[str]
    latest: dict[str, Any] = field(default_factory=dict)
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            if not line.startswith(STATUS):
                continue
            message = json.loads(line[len(STATUS) :])
            event = message.get("event", "status")
            if event == "status":
                self.latest = message
            else:
                self.events[event] = message
                if event == "final":
                    self.latest = message

    def wait_event(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while event not in self.events:
            if self.popen.poll() is not None:
                raise SoakError(f"{self.role} exited ({self.popen.returncode}) before {event}")
            if time.monotonic() > deadline:
                raise SoakError(f"{self.role}: no {event} within {timeout:g} s")
            time.sleep(0.05)
        return self.events[event]

    def tail(self, size: int = 3000) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.log.flush()
            self.log.seek(0)
            return self.log.read()[-size:].strip()
        return ""


class SoakError(RuntimeError):
    pass


def spawn(role: str, args: argparse.Namespace, token: str, *extra: str) -> Child:
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 -- closed in stop()
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--role",
        role,
        "--token",
        token,
        "--url",
        args.url,
        "--timeout",
        str(args.timeout),
        "--payload",
        str(args.payload),
        "--prefetch",
        str(args.prefetch),
        "--ramp-step",
        str(args.ramp_step),
        *extra,
    ]
    popen = subprocess.Popen(  # own session: a Ctrl-C reaches only us, and we stop them
        argv, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
    )
    child = Child(role, popen, log)
    child.reader = threading.Thread(target=child.read, daemon=True)
    child.reader.start()
    return child


def stop(child: Child, timeout: float = STOP_WAIT) -> None:
    """SIGTERM, wait a bounded time (the client drains its in-flight requests), SIGKILL."""
    if child.popen.poll() is None:
        child.popen.terminate()
    try:
        child.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"{child.role} did not stop: SIGKILL", file=sys.stderr)
        child.popen.kill()
        child.popen.wait()
    if child.reader is not None:
        child.reader.join(timeout=5)


def proc_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def proc_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def rabbitmqctl(*args: str) -> str:
    exe = shutil.which("rabbitmqctl")
    if exe is None:
        raise SoakError("rabbitmqctl is needed (forced closes, channel and consumer counts)")
    done = subprocess.run(
        [exe, "-q", *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def our_connections(prefix: str) -> list[str]:
    """Pids of the broker connections whose client-provided name starts with ``prefix``."""
    out = rabbitmqctl("list_connections", "--no-table-headers", "pid", "client_properties")
    pids = []
    for line in out.splitlines():
        pid, _, properties = line.partition("\t")
        if f'{{"connection_name","{prefix}' in properties:
            pids.append(pid)
    return pids


def close_connections(prefix: str) -> int:
    """Force-close this run's connections, and no others: the broker is shared."""
    closed = 0
    for pid in our_connections(prefix):
        with contextlib.suppress(subprocess.CalledProcessError):
            rabbitmqctl("close_connection", pid, "agentbus soak: forced reconnect")
            closed += 1
    return closed


def broker_counts(prefix: str, queue_prefix: str) -> dict[str, int]:
    """Connections, channels and their consumers; consumers and messages of our queues."""
    connections = set(our_connections(prefix))
    channels = consumers = 0
    out = rabbitmqctl("list_channels", "--no-table-headers", "connection", "consumer_count")
    for line in out.splitlines():
        connection, _, count = line.partition("\t")
        if connection in connections:
            channels += 1
            consumers += int(count or 0)
    queue_consumers = messages = queues = 0
    out = rabbitmqctl("list_queues", "--no-table-headers", "name", "consumers", "messages")
    for line in out.splitlines():
        name, consumer_count, message_count = [*line.split("\t"), "0", "0"][:3]
        if name.startswith(queue_prefix):
            queues += 1
            queue_consumers += int(consumer_count or 0)
            messages += int(message_count or 0)
    return {
        "connections": len(connections),
        "channels": channels,
        "consumers": consumers,
        "queues": queues,
        "queue_consumers": queue_consumers,
        "queued": messages,
    }


async def delete_topology(url: str, token: str) -> list[str]:
    """Delete this run's queues (found by their prefix) and its two exchanges."""
    import aio_pika

    from agentbus.bus import Topology

    topology = Topology(token)
    names = {
        topology.service_queue(SERVICE),
        topology.dead_letter_queue,
        *(topology.instance_queue(f"{token}-{role}") for role in ("server", "client", "ramp")),
    }
    with contextlib.suppress(SoakError, subprocess.SubprocessError, OSError):
        out = rabbitmqctl("list_queues", "--no-table-headers", "name")
        names |= {name for name in out.split() if name.startswith(f"{token}.")}
    deleted = []
    connection = await aio_pika.connect(url, timeout=10)
    async with connection:
        for name in sorted(names):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)
                deleted.append(name)
        for name in (topology.exchange, topology.dead_letter_exchange):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.exchange_delete(name)
                deleted.append(name)
    return deleted


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Ignore Ctrl-C and SIGTERM for the block: a second Ctrl-C must not stop the cleanup."""
    previous = (
        signal.signal(signal.SIGINT, signal.SIG_IGN),
        signal.signal(signal.SIGTERM, signal.SIG_IGN),
    )
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def sleep_until(deadline: float, children: list[Child]) -> None:
    while (left := deadline - time.monotonic()) > 0:
        for child in children:
            if child.popen.poll() is not None:
                raise SoakError(f"{child.role} exited ({child.popen.returncode}):\n{child.tail()}")
        time.sleep(min(left, 0.5))


def mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f}"


HEADER = (
    f"{'min':>3} {'srvRSS':>7} {'srvFD':>5} {'cliRSS':>7} {'cliFD':>5} {'conn':>4} {'chan':>4} "
    f"{'cons':>4} {'qcons':>5} {'queued':>6} {'sent':>8} {'answered':>8} {'errors':>6} "
    f"{'timeout':>7} {'late':>5} {'unkn':>5} {'inflt':>5} {'p50ms':>6} {'p99ms':>7} {'closed':>6} "
    f"{'dedup':>6}"
)


def row(minute: int, sample: dict[str, Any]) -> str:
    c = sample["client"]
    errors = c.get("remote_errors", 0) + c.get("other_errors", 0)
    late = c.get("stats", {}).get("late_replies", 0)
    unknown = c.get("stats", {}).get("unknown_replies", 0)
    p50 = "-" if c.get("p50_ms") is None else f"{c['p50_ms']:.1f}"
    p99 = "-" if c.get("p99_ms") is None else f"{c['p99_ms']:.1f}"
    b = sample["broker"]
    dedup = "-" if sample["dedup"] is None else sample["dedup"]
    return (
        f"{minute:>3} {mib(sample['server_rss']):>7} {sample['server_fds'] or '-':>5} "
        f"{mib(sample['client_rss']):>7} {sample['client_fds'] or '-':>5} "
        f"{b['connections']:>4} {b['channels']:>4} {b['consumers']:>4} {b['queue_consumers']:>5} "
        f"{b['queued']:>6} {c.get('sent', 0):>8} {c.get('answered', 0):>8} {errors:>6} "
        f"{c.get('timeouts', 0):>7} {late:>5} {unknown:>5} {c.get('in_flight', 0):>5} "
        f"{p50:>6} {p99:>7} {sample['closed']:>6} {dedup:>6}"
    )


def take_sample(
    server: Child, client: Child, prefix: str, queue_prefix: str, closed: int
) -> dict[str, Any]:
    return {
        "server_rss": proc_rss_kib(server.pid),
        "server_fds": proc_fds(server.pid),
        "client_rss": proc_rss_kib(client.pid),
        "client_fds": proc_fds(client.pid),
        "broker": broker_counts(prefix, queue_prefix),
        "client": dict(client.latest),
        "dedup": server.latest.get("dedup"),
        "closed": closed,
    }


def within(first: int | None, last: int | None, tolerance: float) -> bool:
    if first is None or last is None:
        return False
    return abs(last - first) <= max(first * tolerance, 2)


def steady_from(samples: list[dict[str, Any]]) -> int:
    """The first sample (minute 2 at the earliest) once the de-duplication window is full.

    The window keeps every reply for AGENTBUS_DEDUP_WINDOW: the server's memory grows by
    design until it is full, then must stay flat. Judging from minute 2 would call that a
    leak; judging from the full window tells them apart. A run too short to fill the window
    is judged from minute 2, and the growth per reply is printed.
    """
    start = 1 if len(samples) > 1 else 0
    final = samples[-1]["dedup"]
    if final is None:
        return start
    for index in range(start, len(samples) - 1):
        if (samples[index]["dedup"] or 0) >= final * 0.99:
            return index
    return start


def verdict(samples: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    """Steady state against the last minute: RSS, fds within 10 %, channels, consumers equal."""
    first, last = samples[steady_from(samples)], samples[-1]
    checks = []
    for who in ("server", "client"):
        a, b = first[f"{who}_rss"], last[f"{who}_rss"]
        checks.append((f"{who} RSS", within(a, b, RSS_TOLERANCE), f"{mib(a)} -> {mib(b)} MiB"))
        a, b = first[f"{who}_fds"], last[f"{who}_fds"]
        checks.append((f"{who} fds", within(a, b, FD_TOLERANCE), f"{a} -> {b}"))
    for key in ("connections", "channels", "consumers", "queue_consumers"):
        a, b = first["broker"][key], last["broker"][key]
        checks.append((key, a == b, f"{a} -> {b}"))
    return checks


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def orchestrate(args: argparse.Namespace) -> int:
    # Ctrl-C and SIGTERM both clean up, even if started with SIGINT ignored (``cmd &``).
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    token = f"soak-{secrets.token_hex(4)}"
    prefix, queue_prefix = f"agentbus:{token}", f"{token}."
    children: list[Child] = []
    samples: list[dict[str, Any]] = []
    closed_total = 0
    status = 1
    print(f"soak {token}: {args.minutes} min, broker {args.url.rsplit('@', 1)[-1]}", flush=True)
    try:
        server = spawn("server", args, token)
        children.append(server)
        server.wait_event("ready", 60)
        rate = args.rate
        if rate is None:
            ramp = spawn("ramp", args, token)
            children.append(ramp)
            steps = ramp.wait_event("final", 60 + len(RAMP_WINDOWS) * args.ramp_step)["steps"]
            stop(ramp)
            saturation = max(step["per_s"] for step in steps)
            rate = max(1.0, saturation * args.load)
            ramp_text = ", ".join(f"{s['window']} in flight: {s['per_s']:.0f}/s" for s in steps)
            print(f"ramp (closed loop): {ramp_text}", flush=True)
            print(f"saturation ~{saturation:.0f} req/s; soak rate {rate:.0f} req/s", flush=True)
        else:
            print(f"soak rate {rate:g} req/s (given)", flush=True)
        client = spawn("client", args, token, "--rate", str(rate))
        children.append(client)
        client.wait_event("ready", 60)
        print(
            f"reconnect: every minute at :30, rabbitmqctl close_connection on {prefix}* only",
            flush=True,
        )
        print(HEADER, flush=True)
        started = time.monotonic()
        live = [server, client]
        for minute in range(1, args.minutes + 1):
            sleep_until(started + (minute - 0.5) * 60, live)
            closed_total += close_connections(prefix)
            sleep_until(started + minute * 60, live)
            sample = take_sample(server, client, prefix, queue_prefix, closed_total)
            samples.append(sample)
            print(row(minute, sample), flush=True)
        status = report(samples, client, server)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr, flush=True)
        status = 130
    except (SoakError, subprocess.SubprocessError) as exc:
        print(f"soak failed: {exc}", file=sys.stderr, flush=True)
        for child in children:
            print(f"--- {child.role} log:\n{child.tail()}", file=sys.stderr)
    finally:
        with shielded():
            for child in reversed(children):  # the client first: it drains its requests
                stop(child)
            with contextlib.suppress(Exception):
                deleted = asyncio.run(delete_topology(args.url, token))
                print(
                    f"cleanup: {len(children)} processes stopped, deleted {len(deleted)} "
                    "queues/exchanges",
                    flush=True,
                )
            for child in children:
                child.log.close()
    return status


def report(samples: list[dict[str, Any]], client: Child, server: Child) -> int:
    ok = True
    steady = steady_from(samples)
    print(
        f"\nflat? (minute {steady + 1}, the de-duplication window full, vs the last minute; "
        "RSS, fds within 10 %, counts equal)"
    )
    for name, good, text in verdict(samples):
        ok &= good
        print(f"  {name:<16} {'flat' if good else 'NOT FLAT':<9} {text}")
    first, last = samples[min(1, len(samples) - 1)], samples[steady if steady > 1 else -1]
    grew = (last["dedup"] or 0) - (first["dedup"] or 0)
    rss = (last["server_rss"] or 0) - (first["server_rss"] or 0)
    if grew > 0:
        print(
            f"  note: the server's de-duplication window grew by {grew} replies meanwhile "
            f"({rss / grew:.2f} KiB of RSS each); it fills for AGENTBUS_DEDUP_WINDOW "
            "(600 s) or AGENTBUS_DEDUP_SIZE (100,000), then stays flat"
        )
    stop(client)  # drain: every request ends, the final ledger comes back
    stop(server)
    final = client.events.get("final", client.latest)
    settled = final.get("answered", 0) + final.get("timeouts", 0)
    settled += final.get("remote_errors", 0) + final.get("other_errors", 0)
    stats = final.get("stats", {})
    server_stats = server.events.get("final", server.latest).get("stats", {})
    print(
        f"\nledger (client, after draining): sent {final.get('sent', 0)}, "
        f"answered {final.get('answered', 0)}, remote errors {final.get('remote_errors', 0)}, "
        f"other errors {final.get('other_errors', 0)} {final.get('errors_by', {})}, "
        f"timeouts {final.get('timeouts', 0)}, shed {final.get('shed', 0)}, "
        f"still in flight {final.get('in_flight', 0)}"
    )
    print(
        f"client bus.stats: late_replies {stats.get('late_replies', 0)}, unknown_replies "
        f"{stats.get('unknown_replies', 0)}, replies_matched {stats.get('replies_matched', 0)}, "
        f"publish_retries {stats.get('publish_retries', 0)}, settle_failures "
        f"{stats.get('settle_failures', 0)}"
    )
    print(
        f"server bus.stats: requests_served {server_stats.get('requests_served', 0)}, "
        f"duplicates {server_stats.get('duplicates', 0)}, replies_dropped "
        f"{server_stats.get('replies_dropped', 0)}, settle_failures "
        f"{server_stats.get('settle_failures', 0)}, handler_errors "
        f"{server_stats.get('handler_errors', 0)}"
    )
    accounted = settled == final.get("sent", -1)
    print(f"every request accounted for: {'yes' if accounted else 'NO'} ({settled} ended)")
    ok &= accounted
    print(f"\nRESULT: {'flat' if ok else 'NOT FLAT (see above)'}")
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=int, default=30, help="soak length (default 30)")
    parser.add_argument("--rate", type=float, help="requests/s (default: load x saturation)")
    parser.add_argument("--load", type=float, default=0.2, help="share of saturation (0.2)")
    parser.add_argument("--url", default=os.environ.get("AGENTBUS_URL", DEFAULT_URL))
    parser.add_argument("--timeout", type=float, default=5.0, help="request timeout, s")
    parser.add_argument("--payload", type=int, default=200, help="request text size, bytes")
    parser.add_argument("--prefetch", type=int, default=64, help="server prefetch")
    parser.add_argument("--ramp-step", type=float, default=4.0, help="seconds per ramp step")
    parser.add_argument("--role", choices=("server", "client", "ramp"), help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role is None:
        if args.minutes < 1:
            parser.error("--minutes must be at least 1")
        sys.exit(orchestrate(args))
    from agentbus._logging import configure_logging

    configure_logging("warning", "json")
    runner = {"server": run_server, "client": run_client, "ramp": run_ramp}[args.role]
    asyncio.run(runner(args))


if __name__ == "__main__":
    main()

"""The processes of soak.py: the echo server, the closed-loop ramp and the open-loop client.

Each runs as ``python bench/soak.py --role ROLE ...`` and reports to the orchestrator in
``STATUS {json}`` lines on stdout (its logs go to stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _harness import quantile

SERVICE = "echo"
STATUS = "STATUS "
STATUS_EVERY = 2.0
RAMP_WINDOWS = (1, 4, 16, 64)


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
        return {"p50_ms": quantile(recent, 0.5) * 1000, "p99_ms": quantile(recent, 0.99) * 1000}


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


ROLES = {"server": run_server, "client": run_client, "ramp": run_ramp}

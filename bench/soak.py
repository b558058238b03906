"""Soak: request/response through the bus for a long time, with a forced reconnect every minute.

An echo server process (``_suite_rr.py serve agentbus``) and this process, the client
(open loop, a fifth of the saturation a closed-loop ramp finds, or ``--rate``), on an exchange
of their own. Half-way through every minute the broker force-closes this run's connections
and no others (``rabbitmqctl close_connection``, by their name ``agentbus:soak-<token>-...``).
Every minute: RSS and fds of both processes (/proc), this run's connections, channels and
consumers, its queues' consumers and messages (``rabbitmqctl``), the client's ledger and
latency, the server's de-duplication entries. At the end: whether RSS and fds (within 10 %),
channels and consumers (equal) are flat, from the first minute with the de-duplication window
full (minute 2 at the earliest) to the last, and whether every request was accounted for.

    .venv/bin/python bench/soak.py                  # 30 minutes
    .venv/bin/python bench/soak.py --minutes 3 --rate 200

Needs ``rabbitmqctl`` on the broker's machine, run as a user that may call it. Not in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from typing import Any

import _harness as harness
from _suite_report import table
from _suite_rr import SCRIPT, Names
from agentbus import AgentBusError, Bus, RemoteError, RequestTimeout, Settings

RAMP_WINDOWS = (1, 4, 16, 64)
TOLERANCE = 0.10  # RSS and fds, first steady minute to the last


def rabbitmqctl(*args: str) -> str:
    if (exe := shutil.which("rabbitmqctl")) is None:
        raise RuntimeError("rabbitmqctl is needed (forced closes, channel and consumer counts)")
    return subprocess.run([exe, "-q", *args], capture_output=True, text=True, timeout=60,
                          check=True).stdout  # fmt: skip


def rows(*args: str) -> list[list[str]]:
    return [line.split("\t") for line in rabbitmqctl(*args, "--no-table-headers").splitlines()]


def our_connections(prefix: str) -> list[str]:
    """Pids of the broker connections whose client-provided name starts with ``prefix``."""
    found = rows("list_connections", "pid", "client_properties")
    return [row[0] for row in found if f'{{"connection_name","{prefix}' in row[-1]]


def close_connections(prefix: str) -> int:
    """Force-close this run's connections, and no others: the broker is shared."""
    closed = 0
    for pid in our_connections(prefix):
        with contextlib.suppress(subprocess.CalledProcessError):
            rabbitmqctl("close_connection", pid, "agentbus soak: forced reconnect")
            closed += 1
    return closed


def our_queues(token: str, *columns: str) -> list[list[str]]:
    return [row for row in rows("list_queues", "name", *columns) if row[0].startswith(f"{token}.")]


def broker_counts(token: str) -> dict[str, int]:
    """Connections, channels and their consumers; consumers and messages of our queues."""
    connections = set(our_connections(f"agentbus:{token}"))
    channels = rows("list_channels", "connection", "consumer_count")
    channels = [row for row in channels if row[0] in connections]
    queues = our_queues(token, "consumers", "messages")
    return {"connections": len(connections), "channels": len(channels),
            "consumers": sum(int(r[1] or 0) for r in channels), "queues": len(queues),
            "queue_consumers": sum(int(r[1] or 0) for r in queues),
            "queued": sum(int(r[2] or 0) for r in queues)}  # fmt: skip


@dataclass(slots=True)
class Ledger:
    """What became of every request the client sent."""

    sent: int = 0
    answered: int = 0
    timeouts: int = 0
    remote_errors: int = 0
    other_errors: int = 0
    shed: int = 0
    errors_by: Counter[str] = field(default_factory=Counter)
    latencies: deque[tuple[float, float]] = field(default_factory=deque)

    async def ask(self, bus: Bus, seq: int, text: str, timeout: float) -> None:
        started = time.monotonic()
        try:
            await bus.request("echo", "echo", {"seq": seq, "text": text}, timeout=timeout)
        except RequestTimeout:
            self.timeouts += 1
        except RemoteError as exc:
            self.remote_errors += 1
            self.errors_by[exc.code] += 1
        except AgentBusError as exc:
            self.other_errors += 1
            self.errors_by[type(exc).__name__] += 1
        else:
            self.answered += 1  # latencies of the last minute only: our memory stays flat
            now = time.monotonic()
            self.latencies.append((now, now - started))
            while self.latencies[0][0] < now - 60.0:
                self.latencies.popleft()

    def figures(self, bus: Bus, in_flight: int) -> dict[str, Any]:
        recent = sorted(latency for at, latency in self.latencies if at >= time.monotonic() - 60)
        p50, p99 = (harness.quantile(recent, q) * 1000 if recent else None for q in (0.5, 0.99))
        out = {key: value for key, value in asdict(self).items() if key != "latencies"}
        out["errors_by"] = dict(self.errors_by)
        return out | {"in_flight": in_flight, "stats": bus.stats.as_dict(), "p50_ms": p50,
                      "p99_ms": p99}  # fmt: skip


async def open_loop(bus: Bus, args: argparse.Namespace, rate: float, ledger: Ledger,
                    tasks: set[asyncio.Task[None]], done: asyncio.Event) -> None:  # fmt: skip
    """Requests at ``rate`` per second whatever the answers do; a stall is caught up."""
    loop, text = asyncio.get_running_loop(), "x" * args.payload
    started, launched = loop.time(), 0
    max_in_flight = max(64, int(rate * args.timeout * 2))
    while not done.is_set():
        while launched < int((loop.time() - started) * rate):
            launched += 1
            if len(tasks) >= max_in_flight:
                ledger.shed += 1
                continue
            ledger.sent += 1
            task = asyncio.create_task(ledger.ask(bus, launched, text, args.timeout))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.sleep(0.005)


def server_status(proc: harness.Proc) -> dict[str, Any]:
    """The server's last counters line (``_suite_rr.serve`` prints one every 2 s)."""
    lines = [line for line in proc.tail(8000).splitlines() if line.startswith('{"stats"')]
    return json.loads(lines[-1]) if lines else {"stats": {}, "dedup": None}


# The Markdown table printed as the soak goes, a row a minute.
COLUMNS = ("min|srv RSS MiB>|srv fds>|cli RSS MiB>|cli fds>|conn>|chan>|cons>|qcons>|queued>|"
           "sent>|answered>|errors>|timeouts>|late>|unknown>|in flight>|p50 ms>|p99 ms>|"
           "closed>|dedup>")  # fmt: skip


def row(minute: int, s: dict[str, Any]) -> str:
    c, b = s["client"], s["broker"]
    mib = {k: f"{s[k] / 2**20:.1f}" if s[k] else None for k in ("server_rss", "client_rss")}
    ms = {k: None if c[k] is None else f"{c[k]:.1f}" for k in ("p50_ms", "p99_ms")}
    cells = [minute, mib["server_rss"], s["server_fds"], mib["client_rss"], s["client_fds"],
             b["connections"], b["channels"], b["consumers"], b["queue_consumers"], b["queued"],
             c["sent"], c["answered"], c["remote_errors"] + c["other_errors"], c["timeouts"],
             c["stats"]["late_replies"], c["stats"]["unknown_replies"], c["in_flight"],
             ms["p50_ms"], ms["p99_ms"], s["closed"], s["dedup"]]  # fmt: skip
    return "| " + " | ".join("-" if cell is None else str(cell) for cell in cells) + " |"


def steady_from(samples: list[dict[str, Any]]) -> int:
    """The first sample (minute 2 at the earliest) once the de-duplication window is full:
    the server's memory grows by design until then (every reply kept for
    AGENTBUS_DEDUP_WINDOW), and must stay flat after. A shorter run is judged from minute 2."""
    start, final = (1 if len(samples) > 1 else 0), samples[-1]["dedup"]
    if final is None:
        return start
    full = (i for i in range(start, len(samples) - 1) if (samples[i]["dedup"] or 0) >= final * 0.99)
    return next(full, start)


def report(samples: list[dict[str, Any]], final: dict[str, Any], server: dict[str, Any]) -> int:
    steady = steady_from(samples)
    first, last = samples[steady], samples[-1]
    print(f"\nflat? (minute {steady + 1}, the de-duplication window full, vs the last minute; "
          "RSS, fds within 10 %, counts equal)")  # fmt: skip
    checks = []
    for key in ("server_rss", "server_fds", "client_rss", "client_fds"):
        a, b = first[key], last[key]
        shown = f"{a} -> {b}"
        if key.endswith("rss") and a and b:
            shown = f"{a / 2**20:.1f} -> {b / 2**20:.1f} MiB"
        good = a is not None and b is not None and abs(b - a) <= max(a * TOLERANCE, 2)
        checks.append((key.replace("_", " ").replace("rss", "RSS"), good, shown))
    for key in ("connections", "channels", "consumers", "queue_consumers"):
        a, b = first["broker"][key], last["broker"][key]
        checks.append((key, a == b, f"{a} -> {b}"))
    for name, good, shown in checks:
        print(f"  {name:<16} {'flat' if good else 'NOT FLAT':<9} {shown}")
    start, end = samples[min(1, len(samples) - 1)], samples[steady if steady > 1 else -1]
    if (grew := (end["dedup"] or 0) - (start["dedup"] or 0)) > 0:
        grown = ((end["server_rss"] or 0) - (start["server_rss"] or 0)) / 1024
        print(f"  note: the server's de-duplication window grew by {grew} replies meanwhile "
              f"({grown / grew:.2f} KiB of RSS each); it fills for AGENTBUS_DEDUP_WINDOW "
              "(600 s) or AGENTBUS_DEDUP_SIZE (100,000), then stays flat")  # fmt: skip
    ended = sum(final[k] for k in ("answered", "timeouts", "remote_errors", "other_errors"))
    print(f"\nledger (client, after draining): sent {final['sent']}, answered "
          f"{final['answered']}, remote errors {final['remote_errors']}, other errors "
          f"{final['other_errors']} {final['errors_by']}, timeouts {final['timeouts']}, shed "
          f"{final['shed']}, still in flight {final['in_flight']}")  # fmt: skip
    for who, stats, keys in (
        ("client", final["stats"], "late_replies unknown_replies replies_matched "
                                   "publish_retries settle_failures"),
        ("server", server["stats"], "requests_served duplicates replies_dropped "
                                    "settle_failures handler_errors"),
    ):  # fmt: skip
        print(f"{who} bus.stats: " + ", ".join(f"{k} {stats.get(k, 0)}" for k in keys.split()))
    accounted = ended == final["sent"]
    print(f"every request accounted for: {'yes' if accounted else 'NO'} ({ended} ended)")
    ok = accounted and all(good for _, good, _ in checks)
    print(f"\nRESULT: {'flat' if ok else 'NOT FLAT (see above)'}")
    return 0 if ok else 1


async def soak(args: argparse.Namespace, fleet: harness.Fleet, token: str) -> int:
    assert fleet.url is not None
    argv = [sys.executable, SCRIPT, "serve", "agentbus", args.url, token, f"{token}-server"]
    server = fleet.spawn("server", "server", [*argv, str(args.prefetch)])
    settings = Settings(url=args.url, exchange=token, request_timeout=args.timeout)
    await fleet.consumed([Names(token).queues["agentbus"]])
    if (rate := args.rate) is None:  # closed loop on a bus of its own: saturation
        payload = {"text": "x" * args.payload}
        async with Bus(settings, agent_id=f"{token}-ramp") as bus:

            async def call(i: int) -> Any:
                return await bus.request("echo", "echo", payload, timeout=args.timeout)

            steps = [(w, (await harness.windowed(call, w, args.ramp_step))["per_s"])
                     for w in RAMP_WINDOWS]  # fmt: skip
        saturation = max(per_s for _, per_s in steps)
        rate = max(1.0, saturation * args.load)
        ramp = ", ".join(f"{window} in flight: {per_s:.0f}/s" for window, per_s in steps)
        print(f"ramp (closed loop): {ramp}")
        print(f"saturation ~{saturation:.0f} req/s; soak rate {rate:.0f} req/s", flush=True)
    else:
        print(f"soak rate {rate:g} req/s (given)", flush=True)
    async with Bus(settings, agent_id=f"{token}-client") as bus:
        prefix, ledger, tasks, done = f"agentbus:{token}", Ledger(), set(), asyncio.Event()
        client = asyncio.create_task(open_loop(bus, args, rate, ledger, tasks, done))
        print(f"reconnect: every minute at :30, rabbitmqctl close_connection on {prefix}* only")
        print("\n".join(table(COLUMNS, [])), flush=True)
        samples: list[dict[str, Any]] = []
        closed, started, me = 0, time.monotonic(), os.getpid()
        for minute in range(1, args.minutes + 1):
            for at in (minute - 0.5, minute):
                await asyncio.sleep(max(started + at * 60 - time.monotonic(), 0))
                fleet.check()
                if client.done():
                    await client  # raises what stopped it
                if at < minute:
                    closed += await asyncio.to_thread(close_connections, prefix)
            sample = {"server_rss": harness.rss(server.pid), "closed": closed,
                      "server_fds": harness.open_fds(server.pid), "client_rss": harness.rss(me),
                      "client_fds": harness.open_fds(me),
                      "broker": await asyncio.to_thread(broker_counts, token),
                      "client": ledger.figures(bus, len(tasks)),
                      "dedup": server_status(server)["dedup"]}  # fmt: skip
            samples.append(sample)
            print(row(minute, sample), flush=True)
        done.set()
        await client
        if tasks:  # drain: every request ends, answered, failed or timed out
            await asyncio.wait(set(tasks), timeout=args.timeout + 5)
        final = ledger.figures(bus, len(tasks))
    harness.stop(fleet.procs, fleet.stop_wait)
    return report(samples, final, server_status(server))


def main() -> None:
    cli = harness.parser(__doc__)
    cli.add_argument("--minutes", type=int, default=30, help="soak length (default 30)")
    cli.add_argument("--rate", type=float, help="requests/s (default: load x saturation)")
    cli.add_argument("--load", type=float, default=0.2, help="share of saturation (0.2)")
    cli.add_argument("--timeout", type=float, default=5.0, help="request timeout, s")
    cli.add_argument("--payload", type=int, default=200, help="request text size, bytes")
    cli.add_argument("--prefetch", type=int, default=64, help="server prefetch")
    cli.add_argument("--ramp-step", type=float, default=4.0, help="seconds per ramp step")
    args = cli.parse_args()
    if args.minutes < 1:
        cli.error("--minutes must be at least 1")
    harness.quiet_logging()
    for noisy in ("aiormq", "aio_pika"):  # the forced closes: expected, and reconnected
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    harness.raise_on_sigterm()
    token = f"soak-{secrets.token_hex(4)}"
    print(f"soak {token}: {args.minutes} min, broker {args.url.rsplit('@', 1)[-1]}", flush=True)
    status = 1
    try:
        with harness.Fleet(args.url, stop_wait=30.0) as fleet:
            ids = [f"{token}-{role}" for role in ("server", "client", "ramp")]
            fleet.topology(token, ("echo",), ids)
            status = asyncio.run(soak(args, fleet, token))
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr, flush=True)
        status = 130
    except (RuntimeError, TimeoutError, subprocess.SubprocessError) as exc:
        print(f"soak failed: {exc}", file=sys.stderr, flush=True)
    sys.exit(status)


if __name__ == "__main__":
    main()

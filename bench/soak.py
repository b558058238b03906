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
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness import (
    DEFAULT_URL,
    Fleet,
    Proc,
    delete_all,
    open_fds,
    raise_on_sigterm,
    rss,
    shielded,
    stop,
)
from _soak_roles import RAMP_WINDOWS, ROLES, SERVICE, STATUS

STOP_WAIT = 30.0
RSS_TOLERANCE = 0.10
FD_TOLERANCE = 0.10


# -- the orchestrator ----------------------------------------------------------------------


@dataclass(slots=True)
class Child:
    """A soak process (a harness ``Proc``) and the status lines it writes on stdout."""

    proc: Proc
    latest: dict[str, Any] = field(default_factory=dict)
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    reader: threading.Thread | None = None

    @property
    def role(self) -> str:
        return self.proc.role

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def popen(self) -> subprocess.Popen[bytes]:
        return self.proc.popen

    def read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = raw.decode(errors="replace")
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


class SoakError(RuntimeError):
    pass


def spawn(fleet: Fleet, role: str, args: argparse.Namespace, token: str, *extra: str) -> Child:
    argv = [sys.executable, str(Path(__file__).resolve()), "--role", role, "--token", token]
    argv += ["--url", args.url, "--timeout", str(args.timeout), "--payload", str(args.payload)]
    argv += ["--prefetch", str(args.prefetch), "--ramp-step", str(args.ramp_step), *extra]
    child = Child(fleet.spawn(role, role, argv, pipes=True))
    child.reader = threading.Thread(target=child.read, daemon=True)
    child.reader.start()
    return child


def stop_child(child: Child) -> None:
    """SIGTERM, wait a bounded time (the client drains its in-flight requests), SIGKILL."""
    stop([child.proc], STOP_WAIT)
    if child.reader is not None:
        child.reader.join(timeout=5)


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


def topology_names(token: str) -> tuple[list[str], list[str]]:
    """This run's queues (also found by their prefix) and its two exchanges."""
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
    return sorted(names), [topology.exchange, topology.dead_letter_exchange]


def sleep_until(deadline: float, children: list[Child]) -> None:
    while (left := deadline - time.monotonic()) > 0:
        for child in children:
            if child.popen.poll() is not None:
                raise SoakError(f"{child.role} exited ({child.popen.returncode})")
        time.sleep(min(left, 0.5))


def mib(size: int | None) -> str:
    return "-" if size is None else f"{size / 2**20:.1f}"


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
        "server_rss": rss(server.pid),
        "server_fds": open_fds(server.pid),
        "client_rss": rss(client.pid),
        "client_fds": open_fds(client.pid),
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


def orchestrate(args: argparse.Namespace) -> int:
    raise_on_sigterm()
    token = f"soak-{secrets.token_hex(4)}"
    print(f"soak {token}: {args.minutes} min, broker {args.url.rsplit('@', 1)[-1]}", flush=True)
    status = 1
    try:
        with Fleet(stop_wait=STOP_WAIT) as fleet:  # stops the client first: it drains
            status = soak(args, fleet, token)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr, flush=True)
        status = 130
    except (SoakError, subprocess.SubprocessError) as exc:
        print(f"soak failed: {exc}", file=sys.stderr, flush=True)
    finally:
        with shielded(), contextlib.suppress(Exception):
            deleted = asyncio.run(delete_all(args.url, *topology_names(token)))
            print(f"cleanup: processes stopped, deleted {len(deleted)} queues/exchanges")
    return status


def soak(args: argparse.Namespace, fleet: Fleet, token: str) -> int:
    prefix, queue_prefix = f"agentbus:{token}", f"{token}."
    samples: list[dict[str, Any]] = []
    closed_total = 0
    server = spawn(fleet, "server", args, token)
    server.wait_event("ready", 60)
    rate = args.rate
    if rate is None:
        ramp = spawn(fleet, "ramp", args, token)
        steps = ramp.wait_event("final", 60 + len(RAMP_WINDOWS) * args.ramp_step)["steps"]
        stop_child(ramp)
        saturation = max(step["per_s"] for step in steps)
        rate = max(1.0, saturation * args.load)
        ramp_text = ", ".join(f"{s['window']} in flight: {s['per_s']:.0f}/s" for s in steps)
        print(f"ramp (closed loop): {ramp_text}", flush=True)
        print(f"saturation ~{saturation:.0f} req/s; soak rate {rate:.0f} req/s", flush=True)
    else:
        print(f"soak rate {rate:g} req/s (given)", flush=True)
    client = spawn(fleet, "client", args, token, "--rate", str(rate))
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
    return report(samples, client, server)


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
    grown = ((last["server_rss"] or 0) - (first["server_rss"] or 0)) / 1024
    if grew > 0:
        print(
            f"  note: the server's de-duplication window grew by {grew} replies meanwhile "
            f"({grown / grew:.2f} KiB of RSS each); it fills for AGENTBUS_DEDUP_WINDOW "
            "(600 s) or AGENTBUS_DEDUP_SIZE (100,000), then stays flat"
        )
    stop_child(client)  # drain: every request ends, the final ledger comes back
    stop_child(server)
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
    parser.add_argument("--role", choices=tuple(ROLES), help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role is None:
        if args.minutes < 1:
            parser.error("--minutes must be at least 1")
        sys.exit(orchestrate(args))
    from agentbus import configure_logging

    configure_logging("warning", "json")
    asyncio.run(ROLES[args.role](args))


if __name__ == "__main__":
    main()

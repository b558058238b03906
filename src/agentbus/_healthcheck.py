#!/usr/bin/env python3
"""Container health check of an agentbus agent process: are its heartbeats getting out?

The image runs this file as ``agentbus-healthcheck`` (deploy/Dockerfile). It reads the
agent's own Prometheus endpoint and says healthy (exit 0) only while the count of events
the agent published, confirmed by the broker, keeps moving: every agent publishes a
heartbeat each interval, so a count that stands still means the agent has lost the broker
or hangs. The standard library only, and no import of agentbus: a probe runs every few
seconds and must stay cheap.

Where the metrics are: ``AGENTBUS_HEALTHCHECK_URL`` if set, else
``http://127.0.0.1:PORT/metrics`` with PORT from ``--metrics-port`` on the command line of
the container's main process (PID 1). Between runs the last count and when it last moved
are kept in ``$TMPDIR/agentbus-healthcheck.json``. The count may stand still for
``max(30, 4 x --heartbeat)`` seconds, or ``AGENTBUS_HEALTHCHECK_STALE``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["check", "events_published", "main", "main_argv", "metrics_url", "stale_after"]

_SAMPLE: Final = re.compile(
    r"^agentbus_messages_published_total\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.eE+-]+)"
)
_DEFAULT_HEARTBEAT: Final = 5.0  # agentbus's --heartbeat default, seconds
_MIN_STALE: Final = 30.0


def _option(argv: Sequence[str], name: str) -> str | None:
    for index, arg in enumerate(argv):
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(f"{name}="):
            return arg.partition("=")[2]
    return None


def main_argv(proc: Path = Path("/proc/1/cmdline")) -> list[str]:
    """Return the command line of the container's main process (empty if unreadable)."""
    try:
        raw = proc.read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def metrics_url(argv: Sequence[str], env: dict[str, str]) -> str | None:
    """Return the URL of the agent's metrics, or None when it serves none."""
    if url := env.get("AGENTBUS_HEALTHCHECK_URL"):
        return url
    port = _option(argv, "--metrics-port")
    return f"http://127.0.0.1:{port}/metrics" if port else None


def stale_after(argv: Sequence[str], env: dict[str, str]) -> float:
    """Return how long, in seconds, the published-event count may stand still."""
    if value := env.get("AGENTBUS_HEALTHCHECK_STALE"):
        return float(value)
    heartbeat = float(_option(argv, "--heartbeat") or _DEFAULT_HEARTBEAT)
    return max(_MIN_STALE, 4 * heartbeat)


def events_published(text: str) -> float:
    """Return the sum of ``agentbus_messages_published_total{type="event"}`` in ``text``."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and 'type="event"' in match["labels"]:
            total += float(match["value"])
    return total


def check(url: str, stale: float, state: Path, now: float) -> tuple[bool, str]:
    """Scrape ``url`` once; return (healthy, reason), remembering the count in ``state``."""
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            text = response.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return False, f"no metrics at {url}: {exc}"
    count = events_published(text)
    if count <= 0:
        return False, "no event published yet (not connected to the broker?)"
    try:
        last = json.loads(state.read_text(encoding="utf-8"))
        last_count, moved_at = float(last["count"]), float(last["moved_at"])
    except (OSError, ValueError, KeyError, TypeError):
        last_count, moved_at = -1.0, now
    if count != last_count:
        moved_at = now
        state.write_text(json.dumps({"count": count, "moved_at": moved_at}), encoding="utf-8")
    still = now - moved_at
    if still > stale:
        return False, f"no event published for {still:.0f} s (limit {stale:.0f} s)"
    return True, f"{count:.0f} events published, the last count change {still:.0f} s ago"


def main() -> int:
    """Run the check for the container's agent; print the reason; return the exit status."""
    argv = main_argv()
    env = dict(os.environ)
    url = metrics_url(argv, env)
    if url is None:
        print("unhealthy: run the agent with --metrics-port (or set AGENTBUS_HEALTHCHECK_URL)")
        return 1
    state = Path(tempfile.gettempdir()) / "agentbus-healthcheck.json"
    healthy, reason = check(url, stale_after(argv, env), state, time.time())
    print(f"{'healthy' if healthy else 'unhealthy'}: {reason}")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())

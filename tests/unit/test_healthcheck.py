"""The container health check (agentbus._healthcheck): healthy while heartbeats get out."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbus import _healthcheck as hc

SCRAPE = """\
# TYPE agentbus_messages_published_total counter
agentbus_messages_published_total{agent_id="text-1",type="event"} %s
agentbus_messages_published_total{agent_id="text-1",type="response"} 7.0
"""


class _Metrics:
    """A /metrics endpoint whose published-event count the test sets."""

    def __init__(self) -> None:
        self.events = 3.0
        metrics = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (SCRAPE % metrics.events).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"


@pytest.fixture
def metrics() -> Iterator[_Metrics]:
    """A metrics endpoint served in a thread for one test."""
    served = _Metrics()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()
    thread.join(timeout=5)


def test_the_port_and_staleness_come_from_the_agent_command_line() -> None:
    """--metrics-port and --heartbeat of PID 1 say where to look and how long to wait."""
    argv = ["agentbus", "run", "m:C", "--metrics-port", "9464", "--heartbeat=20"]
    assert hc.metrics_url(argv, {}) == "http://127.0.0.1:9464/metrics"
    assert hc.stale_after(argv, {}) == 80.0
    assert hc.stale_after(["agentbus", "registry"], {}) == 30.0
    assert hc.metrics_url(["agentbus", "agents"], {}) is None
    env = {"AGENTBUS_HEALTHCHECK_URL": "http://x/metrics", "AGENTBUS_HEALTHCHECK_STALE": "9"}
    assert hc.metrics_url(argv, env) == "http://x/metrics"
    assert hc.stale_after(argv, env) == 9.0


def test_main_argv_reads_a_nul_separated_command_line(tmp_path: Path) -> None:
    """/proc/1/cmdline's NUL-separated words become the argv; unreadable is empty."""
    cmdline = tmp_path / "cmdline"
    cmdline.write_bytes(b"agentbus\0registry\0--metrics-port\09464\0")
    assert hc.main_argv(cmdline) == ["agentbus", "registry", "--metrics-port", "9464"]
    assert hc.main_argv(tmp_path / "missing") == []


def test_only_event_samples_count() -> None:
    """The count is the sum of published events, whatever the other types."""
    assert hc.events_published(SCRAPE % "5.0") == 5.0
    assert hc.events_published("agentbus_messages_published_total 1\n") == 0.0


def test_healthy_while_the_count_moves_unhealthy_once_it_stands(
    metrics: _Metrics, tmp_path: Path
) -> None:
    """A moving count is healthy; one standing still longer than the limit is not."""
    state = tmp_path / "state.json"
    assert hc.check(metrics.url, 30, state, now=100.0)[0]
    assert hc.check(metrics.url, 30, state, now=120.0)[0]  # still, within the limit
    healthy, reason = hc.check(metrics.url, 30, state, now=131.0)
    assert not healthy
    assert "no event published for 31 s" in reason
    metrics.events = 4.0  # a heartbeat got out
    assert hc.check(metrics.url, 30, state, now=132.0)[0]


def test_unhealthy_without_metrics_or_before_the_first_event(
    metrics: _Metrics, tmp_path: Path
) -> None:
    """No endpoint, or no event confirmed yet (not connected), is unhealthy."""
    metrics.events = 0.0
    healthy, reason = hc.check(metrics.url, 30, tmp_path / "s.json", now=1.0)
    assert (healthy, reason) == (False, "no event published yet (not connected to the broker?)")
    healthy, reason = hc.check("http://127.0.0.1:1/metrics", 30, tmp_path / "s.json", now=1.0)
    assert not healthy
    assert reason.startswith("no metrics at http://127.0.0.1:1/metrics")

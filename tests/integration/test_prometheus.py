"""A real Prometheus server scrapes a team of agentbus processes run with ``--metrics-port``.

A registry and an ``Alpha`` agent (tests/integration/sample_agents.py) run as separate
``agentbus`` processes with a 1 s heartbeat, each serving /metrics on a free port; a
Prometheus server (the Debian package, see scripts/ensure-prometheus) scrapes them every
second, and the test reads everything back through Prometheus's HTTP API. Without a
prometheus binary the test skips, or fails under CI (CI / AGENTBUS_REQUIRE_BROKER).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from helpers import BusFactory

from agentbus import RemoteError, RequestEnvelope
from agentbus.bus import Topology
from agentbus.envelopes import RequestPayload
from support.broker import delete_topology
from support.ports import free_ports
from support.required import missing
from support.waiting import eventually

T = TypeVar("T")

INTERVAL = 1.0  # the heartbeat interval of every agentbus process, seconds
MISSED = 3  # missed intervals after which the registry calls an agent offline
SCRAPE = 1.0  # Prometheus's scrape interval, seconds
SLACK = 2.0  # process wake-ups, sweep scheduling, a scrape and a query on a loaded machine
STARTUP = 30.0  # a bound on a process starting (imports, connecting, TSDB) on a loaded machine
STOP = 10.0  # SIGTERM to exit, before SIGKILL
AGENTBUS = Path(sys.executable).with_name("agentbus")
HERE = Path(__file__).resolve().parent  # sample_agents.py lives here
JOB = "agentbus"


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """The prometheus server binary: $AGENTBUS_PROMETHEUS, PATH, /usr/bin; else skip or fail."""
    candidates = [os.environ.get("AGENTBUS_PROMETHEUS"), shutil.which("prometheus")]
    found = next(
        (c for c in [*candidates, "/usr/bin/prometheus"] if c and os.access(c, os.X_OK)), None
    )
    if found is None:
        missing(
            "prometheus (Debian package prometheus) is needed for the Prometheus scrape test; "
            "./scripts/ensure-prometheus installs it, or set AGENTBUS_PROMETHEUS"
        )
    return found


@dataclass
class Child:
    """One child process and the files its output goes to."""

    name: str
    popen: subprocess.Popen[bytes]
    stderr: Path

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    def logged(self, event: str) -> bool:
        """True once a JSON log line with this ``event`` is on standard error."""
        for line in self.text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("event") == event:
                    return True
        return False

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.text().splitlines()[-lines:])


@dataclass
class Prometheus:
    """A Prometheus server this test started, and its HTTP API."""

    child: Child
    url: str

    def ready(self) -> bool | None:
        """True once ``/-/ready`` answers 200 (503 while the TSDB loads); fail if it died."""
        if not self.child.running:
            pytest.fail(
                f"prometheus exited with status {self.child.popen.returncode}:\n"
                f"{self.child.tail()}",
                pytrace=False,
            )
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
            return True if response.status == 200 else None

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now: [{"metric": {...}, "value": [time, "v"]}]."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        if body.get("status") != "success" or body["data"]["resultType"] != "vector":
            raise ValueError(f"unexpected answer to {expr!r}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def values(self, expr: str) -> dict[str, float]:
        """``expr``'s samples now, by instance (``-`` for series without one)."""
        return {
            row["metric"].get("instance", "-"): float(row["value"][1]) for row in self.query(expr)
        }


@dataclass
class Team:
    """Starts ``agentbus`` processes and a Prometheus server for one test; stops them all."""

    url: str
    exchange: str
    workdir: Path
    children: list[Child] = field(default_factory=list)
    agent_ids: list[str] = field(default_factory=list)

    def _spawn(self, name: str, command: list[str], env: dict[str, str] | None) -> Child:
        stem = self.workdir / f"{len(self.children)}-{name}"
        err = Path(f"{stem}.stderr")
        with Path(f"{stem}.stdout").open("wb") as stdout, err.open("wb") as stderr:
            popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=env,
                cwd=self.workdir,
            )
        child = Child(name, popen, err)
        self.children.append(child)
        return child

    def agentbus(self, agent_id: str, *args: str) -> Child:
        """Start a serving ``agentbus`` command (json logs, 1 s heartbeat) as ``agent_id``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        command = [
            str(AGENTBUS),
            *("--url", self.url, "--exchange", self.exchange),
            *("--log-format", "json", "--log-level", "info"),
            *args,
            *("--id", agent_id, "--heartbeat", str(INTERVAL)),
        ]
        self.agent_ids.append(agent_id)
        return self._spawn(agent_id, command, env)

    def prometheus(self, binary: str, targets: list[str], port: int) -> Prometheus:
        """Start a Prometheus server on 127.0.0.1:``port`` scraping ``targets`` every second."""
        config = self.workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {SCRAPE:g}s\n"
            f"  scrape_timeout: {SCRAPE:g}s\n"
            "scrape_configs:\n"
            f"  - job_name: {JOB}\n"
            "    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n",
            encoding="utf-8",
        )
        command = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        return Prometheus(self._spawn("prometheus", command, None), f"http://127.0.0.1:{port}")

    def stop_all(self) -> None:
        """SIGTERM every child still running; SIGKILL those not gone ``STOP`` seconds later."""
        running = [child.popen for child in self.children if child.running]
        for popen in running:
            popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP
        for popen in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=max(deadline - time.monotonic(), 0.01))
        for popen in running:
            if popen.poll() is None:
                popen.kill()
                popen.wait(timeout=STOP)

    def report(self) -> None:
        """Print each child's exit status and last lines (pytest shows it on failure)."""
        for child in self.children:
            print(f"--- {child.name}: exit {child.popen.returncode}, {child.stderr}")
            print(child.tail())


@pytest.fixture
async def team(
    broker_url: str, exchange_name: str, tmp_path: Path, make_bus: BusFactory
) -> AsyncIterator[Team]:
    """Children on this test's exchange; all stopped, and the topology deleted, afterwards."""
    # make_bus is asked for so that its teardown (client buses, exchange) runs after ours.
    started = Team(broker_url, exchange_name, tmp_path)
    try:
        yield started
    finally:
        await asyncio.to_thread(started.stop_all)
        started.report()
        topology = Topology(exchange_name)
        queues = {topology.service_queue(name) for name in ("registry", "alpha")}
        queues.update(topology.instance_queue(agent_id) for agent_id in started.agent_ids)
        await delete_topology(broker_url, exchange_name, queues)


async def test_prometheus_scrapes_the_team_and_drops_a_departed_agent(
    prometheus_binary: str, team: Team, make_bus: BusFactory
) -> None:
    """Prometheus scrapes registry and agent metrics; a killed agent's registry series go."""
    registry_port, alpha_port, web_port = free_ports(3)
    registry_target, alpha_target = f"127.0.0.1:{registry_port}", f"127.0.0.1:{alpha_port}"
    registry = team.agentbus(
        "registry-1", "registry", "--missed", str(MISSED), "--metrics-port", str(registry_port)
    )
    alpha = team.agentbus(
        "alpha-1", "run", "sample_agents:Alpha", "--metrics-port", str(alpha_port)
    )
    began = time.monotonic()
    prometheus = team.prometheus(prometheus_binary, [registry_target, alpha_target], web_port)

    for child in (registry, alpha):

        def started(child: Child = child) -> bool | None:
            if not child.running:
                pytest.fail(f"{child.name} exited early:\n{child.tail()}", pytrace=False)
            return True if child.logged("agent started") else None

        await eventually(started, STARTUP, f"{child.name} to log 'agent started'")
    await eventually(prometheus.ready, STARTUP, "prometheus /-/ready")
    ready_after = time.monotonic() - began

    client = await make_bus()
    replies = [await client.request("alpha", "double", {"n": n}, timeout=10) for n in range(5)]
    assert [reply.result for reply in replies] == [0, 2, 4, 6, 8]
    with pytest.raises(RemoteError):
        await client.request("alpha", "double", {"n": "x"}, timeout=10)
    listing = await client.request("registry", "list_agents", timeout=10)
    assert {row["agent_id"] for row in listing.result} <= {"registry-1", "alpha-1"}
    # A broadcast request, as the registry sends when it starts: every agent handles it.
    announce = RequestEnvelope(
        sender_id=client.agent_id,
        receiver_id="broadcast",
        payload=RequestPayload(action="announce"),
    )
    await client.publish(announce, persistent=False, mandatory=False)
    requested = time.monotonic()

    def both_up() -> dict[str, float] | None:
        up = prometheus.values(f'up{{job="{JOB}"}}')
        return up if up == {registry_target: 1.0, alpha_target: 1.0} else None

    await eventually(both_up, STARTUP, "up == 1 for both targets")
    up_after = time.monotonic() - began  # Prometheus 2.x applies new targets on a 5 s tick

    def alpha_online() -> list[dict[str, Any]] | None:
        rows = prometheus.query('agentbus_agents_online{service="alpha"}')
        return rows if [float(row["value"][1]) for row in rows] == [1.0] else None

    [online] = await eventually(alpha_online, STARTUP, "agents_online{service=alpha} == 1")
    assert online["metric"]["instance"] == registry_target
    assert online["metric"]["status"] == "ready"

    def served_all() -> dict[str, float] | None:
        # Scraped after the requests: 5 answered, 1 refused with invalid_parameters.
        rows = prometheus.query('agentbus_handler_duration_seconds_count{action="double"}')
        by_outcome = {row["metric"]["outcome"]: float(row["value"][1]) for row in rows}
        announced = prometheus.query('agentbus_handler_duration_seconds_count{action="announce"}')
        if len(announced) < 2:  # the registry and alpha each handled the broadcast
            return None
        return by_outcome if by_outcome == {"success": 5.0, "invalid_parameters": 1.0} else None

    await eventually(served_all, 2 * SCRAPE + SLACK, "handler counts of 'double' scraped")
    counted_after = time.monotonic() - requested

    handled = prometheus.query("agentbus_handler_duration_seconds_count")
    assert {row["metric"]["instance"] for row in handled} == {registry_target, alpha_target}
    assert all(float(row["value"][1]) > 0 for row in handled)
    assert {row["metric"]["action"] for row in handled} >= {"double", "list_agents", "announce"}
    published = prometheus.query("agentbus_messages_published_total")
    assert {row["metric"]["instance"] for row in published} == {registry_target, alpha_target}
    assert all(float(row["value"][1]) > 0 for row in published)
    assert {(row["metric"]["agent_id"], row["metric"]["type"]) for row in published} >= {
        ("alpha-1", "response"),
        ("alpha-1", "event"),
        ("registry-1", "response"),
    }
    errors = prometheus.values(
        'agentbus_errors_total{agent_id="alpha-1",code="invalid_parameters",direction="sent"}'
    )
    assert errors == {alpha_target: 1.0}
    in_flight = prometheus.query('agentbus_agent_in_flight{agent_id="alpha-1"}')
    assert [(row["metric"]["instance"], row["metric"]["service"]) for row in in_flight] == [
        (registry_target, "alpha")
    ]

    alpha.popen.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    bound = MISSED * INTERVAL + SCRAPE + SLACK

    def departed() -> bool | None:
        return (
            True if not prometheus.query('agentbus_agent_in_flight{agent_id="alpha-1"}') else None
        )

    await eventually(departed, bound, "agent_in_flight{agent_id=alpha-1} to be dropped")
    dropped_after = time.monotonic() - killed

    print(
        f"prometheus ready {ready_after:.2f} s and both targets up {up_after:.2f} s after it "
        f"started; all counts scraped {counted_after:.2f} s after the requests; alpha-1's "
        f"series dropped {dropped_after:.2f} s after SIGKILL (bound {bound:.1f} s)"
    )
    assert dropped_after <= bound
    assert prometheus.query('agentbus_agents_online{service="alpha"}') == []
    assert prometheus.values('agentbus_agent_in_flight{agent_id="registry-1"}') == {
        registry_target: 0.0
    }
    offline = prometheus.values(
        f'agentbus_agent_transitions_total{{instance="{registry_target}",'
        'transition="agent_offline",reason="timeout"}'
    )
    assert offline == {registry_target: 1.0}
    assert prometheus.values(f'up{{instance="{alpha_target}"}}') == {alpha_target: 0.0}

"""Every PromQL expression of the Grafana dashboard and of the alert rules returns data.

A real team runs against a private RabbitMQ node that has the deploy definitions imported
and the rabbitmq_prometheus plugin on: a registry, a leader and two ``text`` agents
(``agentbus`` processes on quorum service queues, 1 s heartbeats, each with
``--metrics-port``). A real Prometheus (scripts/ensure-prometheus) scrapes them and the
node every second and loads deploy/prometheus/alerts.yml. The test makes the team do
what the panels and alerts watch: requests answered and refused, a plan completed and
one failed, an agent killed (the registry times it out). Then each dashboard expression,
and each alert's measure (its expression without the threshold), must return a finite
sample through Prometheus's HTTP API.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import DEPLOY, FIGURES

import agentbus
from agentbus import PlanClient, RemoteError, Settings
from agentbus.testing.chaos import PrivateBroker, find_rabbitmq
from support.ports import free_ports
from support.required import missing
from support.waiting import eventually

DASHBOARD = DEPLOY / "grafana" / "dashboards" / "agentbus.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DEFINITIONS = DEPLOY / "rabbitmq" / "definitions.json"
AGENTBUS = Path(sys.executable).with_name("agentbus")
RATE_INTERVAL = "5m"  # what Grafana's $__rate_interval stands for here: the whole test
STARTUP = 60.0
STOP = 10.0
_THRESHOLD = re.compile(r"^(?P<measure>.+?)\s*(==|!=|>=|<=|>|<)\s*[0-9.eE+-]+\s*$", re.DOTALL)


def dashboard_exprs() -> list[str]:
    """Every target expression of the dashboard, ``$__rate_interval`` filled in."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in board["panels"] if p["type"] != "row" for t in p["targets"]]
    return [expr.replace("$__rate_interval", RATE_INTERVAL) for expr in exprs]


def alert_measures() -> dict[str, str]:
    """Each alert's expression without its threshold comparison, by alert name."""
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    measures = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            match = _THRESHOLD.match(" ".join(rule["expr"].split()))
            assert match, f"{rule['alert']}: expected MEASURE OP THRESHOLD, got {rule['expr']!r}"
            measures[rule["alert"]] = match["measure"]
    return measures


def test_every_panel_and_alert_has_an_expression() -> None:
    """The dashboard has panels with queries, and every alert has a measurable expression."""
    assert len(dashboard_exprs()) >= 15
    assert len(alert_measures()) >= 8


def _prometheus_binary() -> str:
    for candidate in (os.environ.get("AGENTBUS_PROMETHEUS"), shutil.which("prometheus")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    if os.access("/usr/bin/prometheus", os.X_OK):
        return "/usr/bin/prometheus"
    missing("prometheus is not installed; ./scripts/ensure-prometheus installs it")
    raise AssertionError("unreachable")


@dataclass
class Stack:
    """The processes of this test: the team and Prometheus; stopped all at once."""

    workdir: Path
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def spawn(self, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
        with (self.workdir / f"{name}.log").open("wb") as log:
            self.children[name] = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, cwd=self.workdir,
            )  # fmt: skip

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(encoding="utf-8", errors="replace")

    def stop_all(self) -> None:
        running = [p for p in self.children.values() if p.poll() is None]
        for popen in running:
            popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP
        for popen in running:
            try:
                popen.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(timeout=STOP)


@dataclass
class Observed:
    """A running team on a private node, and the Prometheus that scrapes it."""

    node: PrivateBroker
    stack: Stack
    prometheus_url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise ValueError(f"{expr!r}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def finite(self, expr: str) -> list[float] | None:
        """The finite values ``expr`` returns now, or None while there are none."""
        values = [float(row["value"][1]) for row in self.query(expr)]
        finite = [value for value in values if math.isfinite(value)]
        return finite or None


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    """Node (definitions, Prometheus plugin), team and Prometheus; all stopped afterwards."""
    prometheus = _prometheus_binary()
    if find_rabbitmq() is None:
        missing("rabbitmq-server is not installed: no private node for the team")
    workdir = tmp_path_factory.mktemp("observed")
    rabbit_port, registry_port, leader_port, text1_port, text2_port, web_port = free_ports(6)
    began = time.monotonic()
    node = PrivateBroker(
        "agentbus-deploy-obs",
        config={"prometheus.tcp.port": str(rabbit_port), "prometheus.tcp.ip": "127.0.0.1"},
    )
    stack = Stack(workdir)
    try:
        node.start()
        assert node.directory is not None
        plugins = node.directory / "enabled_plugins"
        plugins.write_text("[rabbitmq_prometheus].\n", encoding="utf-8")
        node.rabbitmqctl("eval", f'rabbit_plugins:ensure("{plugins}").')
        node.rabbitmqctl("import_definitions", str(DEFINITIONS))
        # The per-object queue series the dashboard's RabbitMQ panels read.
        node.rabbitmqctl(
            "eval", "application:set_env(rabbitmq_prometheus, return_per_object_metrics, true)."
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBUS_")}
        env.update(AGENTBUS_URL=node.url, AGENTBUS_EXCHANGE="agentbus")
        env.update(AGENTBUS_QUEUE_TYPE="quorum", AGENTBUS_LOG_FORMAT="json")
        common = ["--heartbeat", "1"]
        text = ["run", "agentbus.agents.builtin:TextAgent"]
        team = {
            "registry-1": (["registry", "--missed", "3"], registry_port),
            "leader-1": (["leader"], leader_port),
            "text-1": (text, text1_port),
            "text-2": (text, text2_port),
        }
        for agent_id, (args, port) in team.items():
            command = [str(AGENTBUS), *args, "--id", agent_id, "--metrics-port", str(port)]
            stack.spawn(agent_id, [*command, *common], env)
        agents = [f"127.0.0.1:{p}" for p in (registry_port, leader_port, text1_port, text2_port)]
        every = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
        rabbit = [f"127.0.0.1:{rabbit_port}"]
        config = {
            "global": every,
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {"job_name": "agentbus", "static_configs": [{"targets": agents}]},
                {"job_name": "rabbitmq", "static_configs": [{"targets": rabbit}]},
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        stack.spawn(
            "prometheus",
            [
                prometheus,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{web_port}",
            ],
        )
        spawned = time.monotonic() - began
        FIGURES["observed team: node, plugin, definitions, processes spawned"] = f"{spawned:.1f} s"
        yield Observed(node, stack, f"http://127.0.0.1:{web_port}")
    finally:
        stack.stop_all()
        for name in stack.children:
            print(f"--- {name}:\n{stack.log(name)[-2000:]}")
        node.stop()


async def _started(observed: Observed, name: str) -> None:
    def probe() -> bool | None:
        popen = observed.stack.children[name]
        if popen.poll() is not None:
            pytest.fail(f"{name} exited {popen.returncode}:\n{observed.stack.log(name)[-2000:]}")
        return True if '"event":"agent started"' in observed.stack.log(name) else None

    await eventually(probe, STARTUP, f"{name} to start")


async def _drive(client: agentbus.Bus) -> None:
    """Requests answered and refused, a plan completed and one failed."""
    text = "Bees make honey. Honey is sweet. Bees are busy in summer."
    for _ in range(5):
        answer = await client.request("text", "stats", {"text": text}, timeout=10)
        assert answer.result["sentences"] == 3
    with pytest.raises(RemoteError) as refused:  # to one instance: its series grows
        await client.request("text-1", "stats", {"text": 5}, timeout=10)
    assert refused.value.code == "invalid_parameters"
    plans = PlanClient(client)
    done = await plans.run(
        {"subtasks": [{"id": "k", "skill": "keywords", "parameters": {"text": text}}]},
        timeout=30,
    )
    assert done.status == "completed", done.model_dump_json()
    failed = await plans.run(
        {"subtasks": [{"id": "x", "skill": "no_such_skill", "parameters": {}}]}, timeout=30
    )
    assert failed.status == "failed"


async def test_every_dashboard_and_alert_expression_returns_data(observed: Observed) -> None:
    """Driven through its paces, the team gives every panel and alert measure a value."""
    began = time.monotonic()
    for name in ("registry-1", "leader-1", "text-1", "text-2"):
        await _started(observed, name)
    settings = Settings(url=observed.node.url, exchange="agentbus", queue_type="quorum")
    async with agentbus.Bus(settings, agent_id="client-obs") as client:
        # Both text agents known to the registry before anything is asked of the team.
        deadline = time.monotonic() + STARTUP
        while True:
            query = {"skill": "keywords"}
            found = await client.request("registry", "find_skill", query, timeout=10)
            if len(found.result) >= 2:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the registry knows only {found.result} after {STARTUP} s")
            await asyncio.sleep(0.2)
        # Twice: a labelled series appears with its first count, and a rate needs the
        # count to grow after Prometheus has seen it.
        await _drive(client)

        def scraped() -> bool | None:
            plans = observed.query('agentbus_plans_total{status="failed"}')
            refused = observed.query(
                'agentbus_handler_duration_seconds_count{outcome="invalid_parameters"}'
            )
            return True if plans and refused else None

        await eventually(scraped, 30, "the first round's series scraped")
        await _drive(client)
    observed.stack.children["text-2"].send_signal(signal.SIGKILL)

    for expr in dashboard_exprs():
        await eventually(lambda e=expr: observed.finite(e), 60, f"data for panel query {expr}")
    for alert, measure in alert_measures().items():
        await eventually(lambda m=measure: observed.finite(m), 60, f"data for {alert}: {measure}")

    def rules_loaded() -> list[dict[str, Any]] | None:
        url = f"{observed.prometheus_url}/api/v1/rules?type=alert"
        with urllib.request.urlopen(url, timeout=5) as response:
            groups = json.load(response)["data"]["groups"]
        rules: list[dict[str, Any]] = [rule for group in groups for rule in group["rules"]]
        return rules if rules and all(rule["health"] == "ok" for rule in rules) else None

    loaded = await eventually(rules_loaded, 30, "the alert rules evaluated without error")
    assert {rule["name"] for rule in loaded} == set(alert_measures())

    def timed_out_fires() -> bool | None:
        url = f"{observed.prometheus_url}/api/v1/alerts"
        with urllib.request.urlopen(url, timeout=5) as response:
            alerts = json.load(response)["data"]["alerts"]
        names = {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
        return True if "AgentbusAgentsTimingOut" in names else None

    # text-2 was SIGKILLed: the registry times it out, and the alert without `for` fires.
    await eventually(timed_out_fires, 30, "AgentbusAgentsTimingOut to fire")
    answered = time.monotonic() - began
    FIGURES["observed team: every dashboard and alert query answered"] = f"{answered:.1f} s"

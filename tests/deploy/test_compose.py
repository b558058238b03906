"""deploy/compose.yaml: valid for podman-compose, and its agent services serve a plan.

``podman-compose config`` must accept the file and resolve the team. With the image
built, the registry, leader and text services are brought up by podman-compose against
the real broker (the only image available offline is agentbus's own, so RabbitMQ,
Prometheus and Grafana stay down, ``--no-deps``): the broker is reached on the host
network, so an override file gives each service its own metrics port there. A plan
submitted to the leader is then run on the text agent and answered.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import DEPLOY, FIGURES, delete_topology, free_ports, run, tool

import agentbus
from agentbus import PlanClient, Settings, Unroutable
from agentbus.bus import Topology

COMPOSE = DEPLOY / "compose.yaml"
AGENTS = ("registry", "leader", "files", "code", "text", "report")
STARTUP = 60.0


def _config(env: dict[str, str] | None = None) -> dict[str, Any]:
    done = run([tool("podman-compose"), "-f", str(COMPOSE), "config"], env=env)
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


# The first test to ask for the image builds it (conftest.py): on a cold machine that is a
# debootstrap of the base (about 1-2 min) and the build, beyond the default per-test limit.
pytestmark = pytest.mark.timeout(1200)


def test_podman_compose_accepts_the_file_and_resolves_the_team() -> None:
    """`podman-compose config` resolves RabbitMQ, Prometheus, Grafana and the agents."""
    services = _config()["services"]
    assert set(services) == {"rabbitmq", "prometheus", "grafana", *AGENTS}
    assert services["code"]["deploy"]["replicas"] == 2
    for name in AGENTS:
        service = services[name]
        assert service["image"] == "localhost/agentbus:latest"
        assert service["command"][-2:] == ["--metrics-port", "9464"]
        assert service["environment"]["AGENTBUS_QUEUE_TYPE"] == "quorum"
        assert service["environment"]["AGENTBUS_URL"] == "amqp://guest:guest@rabbitmq:5672/"
        assert service["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    rabbit_mounts = " ".join(services["rabbitmq"]["volumes"])
    for path in ("definitions.json", "compose-users.json", "rabbitmq.conf", "enabled_plugins"):
        assert f"rabbitmq/{path}:" in rabbit_mounts


def test_every_file_compose_mounts_exists() -> None:
    """The configs, definitions and dashboards compose mounts are in deploy/."""
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), f"{source} is mounted but missing"


def test_promtool_accepts_the_compose_prometheus_config() -> None:
    """`promtool check config` passes on deploy/prometheus/compose.yml and its rules."""
    done = run([tool("promtool"), "check", "config", str(DEPLOY / "prometheus" / "compose.yml")])
    assert "SUCCESS" in done.stdout + done.stderr


@pytest.fixture
def project(
    agentbus_image: str, podman_env: dict[str, str], broker_url: str, tmp_path: Path
) -> Iterator[tuple[list[str], dict[str, str], str]]:
    """A compose project of this test on a unique exchange: its command and env; downed after."""
    exchange = f"compose-{uuid.uuid4().hex[:10]}"
    ports = free_ports(3)
    override: dict[str, Any] = {"services": {}}
    commands = {
        "registry": ["registry"],
        "leader": ["leader"],
        "text": ["run", "agentbus.agents.builtin:TextAgent"],
    }
    for (name, command), port in zip(commands.items(), ports, strict=True):
        override["services"][name] = {
            "network_mode": "host",
            "command": [*command, "--metrics-port", str(port), "--heartbeat", "1"],
        }
    (tmp_path / "host.yaml").write_text(yaml.safe_dump(override), encoding="utf-8")
    env = {**podman_env, "AGENTBUS_IMAGE": agentbus_image, "AGENTBUS_URL": broker_url}
    env["AGENTBUS_EXCHANGE"] = exchange
    name = f"agentbus-test-{uuid.uuid4().hex[:8]}"
    compose = [tool("podman-compose"), "-p", name, "-f", str(COMPOSE)]
    compose += ["-f", str(tmp_path / "host.yaml")]
    try:
        yield compose, env, exchange
    finally:
        run([*compose, "down"], env=env, check=False, timeout=120)
        ps = run([tool("podman"), "ps", "-a", "--format", "{{.Names}}"], env=podman_env)
        assert not [line for line in ps.stdout.splitlines() if line.startswith(name)]


async def test_compose_brings_up_agents_that_run_a_plan(
    project: tuple[list[str], dict[str, str], str], broker_url: str
) -> None:
    """registry, leader and text from compose.yaml run a plan submitted to the leader."""
    compose, env, exchange = project
    began = time.monotonic()
    run([*compose, "up", "-d", "--no-deps", "registry", "leader", "text"], env=env, timeout=180)
    settings = Settings(url=broker_url, exchange=exchange)
    try:
        async with agentbus.Bus(settings, agent_id="client-compose") as client:
            deadline = time.monotonic() + STARTUP
            while True:
                try:
                    found = await client.request("registry", "list_agents", timeout=10)
                except Unroutable:  # the registry's container is still starting
                    services: set[str] = set()
                else:
                    services = {row["service"] for row in found.result}
                if {"leader", "text"} <= services:
                    break
                if time.monotonic() > deadline:
                    logs = run([*compose, "logs"], env=env, check=False)
                    pytest.fail(f"the registry knows {services}:\n{logs.stdout[-3000:]}")
                await asyncio.sleep(0.2)
            FIGURES["compose: registry, leader, text up and registered"] = (
                f"{time.monotonic() - began:.1f} s"
            )
            plan = {"subtasks": [{"id": "k", "skill": "keywords", "parameters": {"text": "a b a"}}]}
            aggregate = await PlanClient(client).run(plan, timeout=30)
        assert aggregate.status == "completed", aggregate.model_dump_json()
        assert aggregate.subtask("k").agents[0].startswith("text-")
    finally:
        topology = Topology(exchange)
        queues = [topology.service_queue(s) for s in ("registry", "leader", "text")]
        await delete_topology(
            broker_url, exchange, [*queues, topology.instance_queue("client-compose")]
        )

"""deploy/compose.yaml: valid for podman-compose, and the demo team brought up as a whole.

``podman-compose config`` must accept the file (alone and with the files that go on top of
it) and resolve the team. No registry is reachable here, so RabbitMQ and Prometheus are the
images built from Debian's packages (deploy/compose.local-images.yaml); the demo stack
(the broker with the definitions and the demo's guest, Prometheus and every agent, two
``code`` replicas; not Grafana, which has no Debian package) is brought up with
podman-compose on host ports of the test's choosing. From the host, as ``guest``: the
management API answers, ``agentbus agents`` lists the agent of every container, and a plan
runs (the files agent serves a directory of the test's). The production profile has its
own test (test_compose_production.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_stack import (
    AGENTS,
    COMPOSE,
    LOCAL_IMAGES,
    PRODUCTION,
    analysis_plan,
    check_analysis,
    cli,
    cli_env,
    compose_env,
    compose_stack,
    load_compose,
    record,
)
from deploy_support import DEPLOY, FIGURES, run, tool

from support.ports import free_ports
from support.waiting import eventually

# The first test to ask for the images builds them (conftest.py): on a cold machine that is
# a debootstrap of the base (about 1-2 min) and the builds, beyond the default per-test limit.
pytestmark = pytest.mark.timeout(1500)


def _config(*files: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    command = [tool("podman-compose")]
    for file in files or (COMPOSE,):
        command += ["-f", str(file)]
    done = run([*command, "config"], env=env)
    config: dict[str, Any] = yaml.safe_load(done.stdout)
    return config


def test_podman_compose_accepts_the_file_and_resolves_the_team() -> None:
    """`podman-compose config` resolves RabbitMQ, Prometheus, Grafana and the agents."""
    services = _config(env=compose_env(dict(os.environ)))["services"]
    assert set(services) == {"rabbitmq", "prometheus", "grafana", *AGENTS}
    assert services["code"]["deploy"] == {"mode": "replicated", "replicas": 2}
    for name in AGENTS:
        service = services[name]
        assert service["image"] == "localhost/agentbus:latest"
        assert service["command"][-2:] == ["--metrics-port", "9464"]
        assert service["environment"]["AGENTBUS_QUEUE_TYPE"] == "quorum"
        assert service["environment"]["AGENTBUS_URL"] == "amqp://guest:guest@rabbitmq:5672/"
        assert service["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    assert services["rabbitmq"]["image"] == "rabbitmq:3.13-management"  # the public image
    assert services["rabbitmq"]["ports"] == ["5672:5672", "15672:15672"]
    rabbit_mounts = " ".join(services["rabbitmq"]["volumes"])
    for path in ("definitions.json", "compose-users.json", "rabbitmq.conf", "enabled_plugins"):
        assert f"rabbitmq/{path}:" in rabbit_mounts


def test_local_images_are_built_here_and_named_apart_from_the_public_ones() -> None:
    """compose.local-images.yaml: RabbitMQ and Prometheus from deploy/'s Dockerfiles, under
    the names scripts/build-compose-images gives them by default."""
    services = _config(COMPOSE, LOCAL_IMAGES, env=compose_env(dict(os.environ)))["services"]
    for name in ("rabbitmq", "prometheus"):
        assert services[name]["image"] == f"localhost/agentbus-{name}:latest"
        context = Path(services[name]["build"]["context"])
        assert context == DEPLOY / name
        assert (context / "Dockerfile").is_file()
    script = (DEPLOY.parent / "scripts" / "build-compose-images").read_text(encoding="utf-8")
    assert "prefix=localhost/agentbus tag=latest" in script


@pytest.mark.parametrize("service", ["rabbitmq", "prometheus"])
def test_hadolint_passes_the_service_dockerfiles(service: str) -> None:
    """hadolint finds nothing to say about the RabbitMQ and Prometheus Dockerfiles."""
    done = run([tool("hadolint"), str(DEPLOY / service / "Dockerfile")], check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("file", [COMPOSE, LOCAL_IMAGES, PRODUCTION], ids=lambda f: f.name)
def test_every_file_compose_mounts_exists(file: Path) -> None:
    """The configs, definitions and dashboards the compose files mount are in deploy/."""
    services = load_compose(file)["services"]
    mounted = [
        volume.split(":")[0]
        for service in services.values()
        for volume in service.get("volumes", [])
        if volume.startswith("./")
    ]
    assert mounted or file == LOCAL_IMAGES
    for source in mounted:
        assert (DEPLOY / source).exists(), f"{source} is mounted but missing"


def test_promtool_accepts_the_compose_prometheus_config() -> None:
    """`promtool check config` passes on deploy/prometheus/compose.yml and its rules."""
    done = run([tool("promtool"), "check", "config", str(DEPLOY / "prometheus" / "compose.yml")])
    assert "SUCCESS" in done.stdout + done.stderr


def _management(port: int) -> dict[str, Any] | None:
    """The management API's overview, as guest."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/overview")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        overview: dict[str, Any] = json.load(response)
    return overview


async def test_the_demo_stack_runs_as_a_whole(
    agentbus_image: str, compose_images: dict[str, str], podman_env: dict[str, str], data_dir: Path
) -> None:
    """The demo stack up with the broker built here; a plan from the host, as guest."""
    amqp, management, prometheus = free_ports(3)
    env = compose_env(
        podman_env,
        AGENTBUS_IMAGE=agentbus_image,
        AGENTBUS_AMQP_PORT=str(amqp),
        AGENTBUS_MANAGEMENT_PORT=str(management),
        AGENTBUS_PROMETHEUS_PORT=str(prometheus),
        AGENTBUS_FILES_DIR=str(data_dir),
        **compose_images,
    )
    guest = cli_env(f"amqp://guest:guest@127.0.0.1:{amqp}/")
    with compose_stack([COMPOSE, LOCAL_IMAGES], env, "demo") as stack:
        began = time.monotonic()
        # Broker first, then the team: what depends_on's service_healthy does (podman-compose
        # ignores it before podman 4.6).
        stack.up(["rabbitmq", "prometheus"])
        [broker] = stack.of("rabbitmq")
        await eventually(lambda: stack.healthy(broker) or None, 180, "the broker's health check")
        stack.up(AGENTS, no_deps=True)
        agents = [c for c in stack.containers() if c.service in AGENTS]
        assert Counter(c.service for c in agents) == Counter(
            {**dict.fromkeys(AGENTS, 1), "code": 2}
        )
        overview = await eventually(lambda: _management(management), 60, "the management API")
        assert overview["rabbitmq_version"].startswith("3.")

        def listed() -> dict[str, str] | None:
            ids = {stack.agent_id(c): c.service for c in agents}
            done = cli(guest, "agents", "--json")
            if done.returncode != 0:
                return None
            found = {row["agent_id"]: row["service"] for row in json.loads(done.stdout)}
            return found if found == ids else None

        await eventually(listed, 120, "agentbus agents to list the agent of every container")
        record("demo: up -d to every agent listed", began, time.monotonic())
        plan = json.dumps(analysis_plan("compose demo"))
        done = await asyncio.to_thread(cli, guest, "plan", "run", "-", "--json", "-q", stdin=plan)
        assert done.returncode == 0, done.stdout + done.stderr
        check_analysis(json.loads(done.stdout))
        FIGURES["demo: whole test, up to plan done"] = f"{time.monotonic() - began:.1f} s"

"""The agentbus image: hadolint passes its Dockerfile; podman builds it and it serves.

The image is built once per session (conftest.py: a debootstrap base, host-built wheels,
``podman build``). A container on the host network runs the built-in text agent against
the real broker (a unique exchange) and answers a request; its HEALTHCHECK says healthy;
it runs as a non-root user; the same image runs the one-shot CLI.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import pytest
from deploy_support import DEPLOY, FIGURES, ROOT, run, tool

import agentbus
from agentbus import Settings
from agentbus.bus import Topology
from support.broker import delete_topology
from support.ports import free_ports
from support.waiting import eventually

# The first test to ask for the image builds it (conftest.py): on a cold machine that is a
# debootstrap of the base (about 1-2 min) and the build, beyond the default per-test limit.
pytestmark = pytest.mark.timeout(1200)


def test_hadolint_passes_the_dockerfile() -> None:
    """hadolint finds nothing to say about deploy/Dockerfile."""
    done = run([tool("hadolint"), str(DEPLOY / "Dockerfile")], check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerignore_lets_in_only_what_the_build_copies() -> None:
    """The build context is the repository: .dockerignore admits only the wheels and one file."""
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules == ["*", "!dist/wheels/", "!src/agentbus/_healthcheck.py"]


def test_image_runs_as_a_non_root_user_with_a_healthcheck(
    agentbus_image: str, podman_env: dict[str, str]
) -> None:
    """The image's user is not root, it has a HEALTHCHECK, and it runs the CLI."""
    podman = tool("podman")
    inspected = json.loads(run([podman, "image", "inspect", agentbus_image], env=podman_env).stdout)
    config = inspected[0]["Config"]
    assert config["User"] not in ("", "0", "root", "0:0")
    assert config["Entrypoint"] == ["agentbus"]
    assert inspected[0]["Healthcheck"]["Test"][:2] == ["CMD", "python3"]
    FIGURES["agentbus image size"] = f"{inspected[0]['Size'] / 1e6:.0f} MB"
    whoami = run(
        [podman, "run", "--rm", "--network", "host", "--entrypoint", "id", agentbus_image, "-u"],
        env=podman_env,
    )
    assert whoami.stdout.strip() not in ("", "0")
    version = run([podman, "run", "--rm", agentbus_image, "--version"], env=podman_env)
    assert version.stdout.startswith("agentbus, version")


@pytest.fixture
async def exchange(broker_url: str) -> AsyncIterator[str]:
    """A unique exchange on the real broker; its topology deleted afterwards."""
    name = f"deploy-{uuid.uuid4().hex[:10]}"
    yield name
    topology = Topology(name)
    queues = [topology.service_queue("text"), topology.instance_queue("text-c1")]
    await delete_topology(broker_url, name, [*queues, topology.instance_queue("client-img")])


async def test_a_containerised_agent_answers_on_the_real_broker(
    agentbus_image: str, podman_env: dict[str, str], broker_url: str, exchange: str
) -> None:
    """podman runs the text agent on the host network; a request is answered; it is healthy."""
    podman = tool("podman")
    (metrics_port,) = free_ports(1)
    name = f"agentbus-test-{uuid.uuid4().hex[:8]}"
    command = [
        podman, "run", "-d", "--name", name, "--network", "host",
        "-e", f"AGENTBUS_URL={broker_url}", "-e", f"AGENTBUS_EXCHANGE={exchange}",
        agentbus_image, "run", "agentbus.agents.builtin:TextAgent",
        "--id", "text-c1", "--heartbeat", "1", "--metrics-port", str(metrics_port),
    ]  # fmt: skip
    run(command, env=podman_env)
    try:
        async with agentbus.Bus(
            Settings(url=broker_url, exchange=exchange), agent_id="client-img"
        ) as client:

            def healthy() -> bool | None:
                done = run([podman, "healthcheck", "run", name], env=podman_env, check=False)
                return True if done.returncode == 0 else None

            await eventually(healthy, 60, "the container's HEALTHCHECK to pass")
            reply = await asyncio.wait_for(
                client.request("text", "stats", {"text": "One. Two three."}, timeout=10), 15
            )
            assert reply.result["sentences"] == 2
            assert reply.sender_id == "text-c1"
        run([podman, "stop", "--time", "15", name], env=podman_env)
        logs = run([podman, "logs", name], env=podman_env)
        events = [json.loads(line)["event"] for line in logs.stderr.splitlines() if line[:1] == "{"]
        assert events[-1] == "agent stopped"  # SIGTERM drained the agent
        state = run([podman, "inspect", name, "--format", "{{.State.ExitCode}}"], env=podman_env)
        assert state.stdout.strip() == "0"
    finally:
        run([podman, "rm", "--force", name], env=podman_env, check=False)

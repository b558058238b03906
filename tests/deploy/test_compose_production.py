"""deploy/compose.production.yaml, brought up as a whole: TLS only, a broker user per service.

The certificates are made by deploy/tls/make-certs; RabbitMQ and Prometheus are the images
built here from Debian's packages (deploy/compose.local-images.yaml, no registry is
reachable); the agents are the agentbus image. ``podman-compose up -d`` starts the broker,
Prometheus and every agent (two ``code`` replicas) at once; Grafana stays down (it has no
Debian package). Then, from the host, with the ``operator`` certificate:

- every container reports healthy; the broker has exactly the generated users (no guest),
  and each agent container is connected over TLS with EXTERNAL as its own service's user;
- ``agentbus agents`` lists the agent of every container;
- ``agentbus plan run`` runs a plan that needs every service;
- ``agentbus gateway`` serves the team's cards and runs a plan through the leader for an
  HTTP caller, and the broker refuses that caller what ``operator`` may not do;
- ``agentbus dashboard`` shows the team, cards included, and the dead-letter queue;
- Prometheus scrapes every agent container (each replica by its address) and RabbitMQ;
- no agent was refused anything by the broker.

Everything is torn down (``down -v``) even on failure. The timings go to the terminal summary.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from compose_stack import (
    AGENTBUS,
    AGENTS,
    COMPOSE,
    LOCAL_IMAGES,
    OFFLINE_SERVICES,
    PRODUCTION,
    Container,
    Stack,
    analysis_plan,
    check_analysis,
    cli,
    cli_env,
    compose_env,
    compose_stack,
    http_json,
    record,
)
from deploy_support import DEPLOY, FIGURES, run, timed, tool

from support.ports import free_ports
from support.waiting import eventually

# A cold machine builds the base (debootstrap), the agentbus image and the broker's and
# Prometheus's images before the stack starts.
pytestmark = pytest.mark.timeout(1500)

MAKE_CERTS: Final = DEPLOY / "tls" / "make-certs"
DEFINITIONS: Final = DEPLOY / "rabbitmq" / "production" / "definitions.json"
BROKER_CONF: Final = DEPLOY / "rabbitmq" / "production" / "rabbitmq.conf"
REPLICAS: Final = Counter({**dict.fromkeys(OFFLINE_SERVICES, 1), "code": 2})
GATEWAY_KEY: Final = f"compose-{uuid.uuid4().hex}"


def _users() -> list[str]:
    document = json.loads(DEFINITIONS.read_text(encoding="utf-8"))
    return [user["name"] for user in document["users"]]


def test_the_production_definitions_are_the_generated_ones() -> None:
    """rabbitmq/production/definitions.json is the output of the command its config names."""
    header = " ".join(
        line.lstrip("#").strip().rstrip("\\")
        for line in BROKER_CONF.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    )
    start = header.index("agentbus definitions ") + len("agentbus definitions ")
    arguments = header[start : header.index(" (the topology")].split()
    done = run([*AGENTBUS, "definitions", *arguments], env=cli_env("amqp://unused/"))
    assert json.loads(done.stdout) == json.loads(DEFINITIONS.read_text(encoding="utf-8"))
    assert "guest" not in _users()
    assert set(AGENTS) | {"operator"} == set(_users())


def test_make_certs_issues_a_certificate_for_every_broker_user(tmp_path: Path) -> None:
    """A CA, the broker's certificate for its names, a client one per user (CN = the user)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    tool("openssl")
    out = tmp_path / "certs"
    run([str(MAKE_CERTS), "--out", str(out), "--host", "broker.example.com"])
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())

    def issued(name: str) -> x509.Certificate:
        cert = x509.load_pem_x509_certificate((out / f"{name}.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
        assert (out / f"{name}.key").stat().st_mode & 0o077 == 0, f"{name}.key is readable"
        return cert

    server = issued("rabbitmq")
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"rabbitmq", "localhost", "broker.example.com"} <= set(
        names.get_values_for_type(x509.DNSName)
    )
    for user in _users():
        cert = issued(user)
        [cn] = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        assert cn.value == user
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    if os.geteuid() == 0:  # each key belongs to the uid of the container that reads it
        owners = {name: (out / f"{name}.key").stat().st_uid for name in ("text", "rabbitmq")}
        assert owners == {"text": 10001, "rabbitmq": 999}
        assert (out / "operator.key").stat().st_uid == 0
    again = run([str(MAKE_CERTS), "--out", str(out)])
    assert "kept text.pem" in again.stderr  # a second run keeps the CA and what it issued
    assert (out / "ca.pem").read_bytes() == ca.public_bytes(Encoding.PEM)


def test_podman_compose_resolves_the_production_profile(tmp_path: Path) -> None:
    """Each agent: an amqps:// URL without a password, the CA and its own certificate only."""
    env = compose_env(dict(os.environ), AGENTBUS_TLS_DIR=str(tmp_path))
    done = run(
        [tool("podman-compose"), "-f", str(COMPOSE), "-f", str(PRODUCTION), "config"], env=env
    )
    services = yaml.safe_load(done.stdout)["services"]
    for name in AGENTS:
        environment = services[name]["environment"]
        assert environment["AGENTBUS_URL"] == "amqps://rabbitmq:5671/"
        mounts = {v.split(":")[1]: v.split(":")[0] for v in services[name]["volumes"]}
        assert mounts[environment["AGENTBUS_TLS_CERT_FILE"]] == f"{tmp_path}/{name}.pem"
        assert mounts[environment["AGENTBUS_TLS_KEY_FILE"]] == f"{tmp_path}/{name}.key"
        assert mounts[environment["AGENTBUS_TLS_CA_FILE"]] == f"{tmp_path}/ca.pem"
        tls = sorted(source for source in mounts.values() if source.startswith(str(tmp_path)))
        assert tls == [f"{tmp_path}/ca.pem", f"{tmp_path}/{name}.key", f"{tmp_path}/{name}.pem"]
    rabbitmq = services["rabbitmq"]
    assert rabbitmq["ports"] == ["5671:5671"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in rabbitmq["volumes"]}
    assert mounts["/etc/rabbitmq/definitions.d/definitions.json"].endswith(
        "rabbitmq/production/definitions.json"
    )
    assert mounts["/etc/rabbitmq/tls/server.key"] == f"{tmp_path}/rabbitmq.key"
    config = mounts["/etc/rabbitmq/conf.d/20-agentbus.conf"]
    assert config.endswith("rabbitmq/production/rabbitmq.conf")
    # The node loads the one definitions file, not the demo's guest mounted beside it.
    loads = "load_definitions = /etc/rabbitmq/definitions.d/definitions.json"
    assert loads in BROKER_CONF.read_text(encoding="utf-8").splitlines()
    assert services["prometheus"]["ports"] == ["127.0.0.1:9090:9090"]


@pytest.fixture
def certificates(tmp_path: Path) -> Path:
    """The certificates of the stack, made by deploy/tls/make-certs."""
    tool("openssl")
    out = tmp_path / "certs"
    with timed("production: certificates (make-certs)"):
        run([str(MAKE_CERTS), "--out", str(out)])
    return out


class Operator:
    """The host's ``agentbus`` commands, logged in as ``operator`` with its certificate."""

    def __init__(self, certs: Path, port: int, workdir: Path) -> None:
        self.url = f"amqps://localhost:{port}/"
        self.env = cli_env(
            self.url,
            AGENTBUS_TLS_CA_FILE=str(certs / "ca.pem"),
            AGENTBUS_TLS_CERT_FILE=str(certs / "operator.pem"),
            AGENTBUS_TLS_KEY_FILE=str(certs / "operator.key"),
        )
        self.workdir = workdir

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return cli(self.env, *args, stdin=stdin)

    def listed(self) -> dict[str, str] | None:
        """``agentbus agents --json``: agent id -> service, or None if it failed."""
        done = self.cli("agents", "--json")
        if done.returncode != 0:
            return None
        return {row["agent_id"]: row["service"] for row in json.loads(done.stdout)}

    def serve(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """Start a serving command (gateway, dashboard); its log in the work directory."""
        with (self.workdir / f"{name}.log").open("wb") as log:
            return subprocess.Popen(
                [*AGENTBUS, "--log-format", "json", *args], env=self.env, stdout=log, stderr=log
            )

    def stop(self, process: subprocess.Popen[bytes], name: str, *codes: int) -> None:
        """SIGTERM, then wait: it must exit 0 (or one of ``codes``) having said it stopped."""
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail(f"{name} did not stop on SIGTERM: {self.log(name)}")
        assert code in (0, *codes), f"{name} exited {code}: {self.log(name)}"

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]


def _rpc(skill: str, data: dict[str, Any]) -> dict[str, Any]:
    """An A2A SendMessage with one data part, for ``skill``."""
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"data": data}],
        "metadata": {"skill": skill},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    import httpx

    headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "A2A-Version": "1.0"}
    answer: dict[str, Any] = httpx.post(url, json=body, headers=headers, timeout=60).json()
    return answer


async def _gateway_serves_the_team(operator: Operator, port: int, workdir: Path) -> None:
    keys = workdir / "keys.json"
    keys.write_text(json.dumps({GATEWAY_KEY: {"identity": "operator", "url": operator.url}}))
    keys.chmod(0o600)
    gateway = operator.serve("gateway", "gateway", "--port", str(port), "--keys", str(keys))
    base = f"http://127.0.0.1:{port}"
    try:

        def cards() -> list[str] | None:
            names = sorted(card["name"] for card in http_json(f"{base}/agents")["agents"])
            return names if names == sorted(AGENTS) else None

        await eventually(cards, 60, "the gateway's cards of every service")
        plan = {"subtasks": [{"id": "k", "skill": "keywords", "parameters": {"text": "a b a"}}]}
        answer = await asyncio.to_thread(
            _post, f"{base}/agents/leader/", _rpc("run_plan", {"plan": plan})
        )
        task = answer["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
        aggregate = task["artifacts"][0]["parts"][0]["data"]
        assert aggregate["status"] == "completed"
        assert aggregate["subtasks"][0]["agents"][0].startswith("text-")
        # The HTTP caller is the operator on the bus, a dashboard user, which may send
        # every service a request (the answers to its questions: the broker tells requests
        # apart by service, not action). A user that may not is refused by the broker:
        # files, which calls nothing.
        called = await asyncio.to_thread(
            _post, f"{base}/agents/text/", _rpc("keywords", {"text": "a b a"})
        )
        assert called["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", called
        certs = Path(operator.env["AGENTBUS_TLS_CA_FILE"]).parent
        as_files = cli_env(
            operator.url,
            AGENTBUS_TLS_CA_FILE=str(certs / "ca.pem"),
            AGENTBUS_TLS_CERT_FILE=str(certs / "files.pem"),
            AGENTBUS_TLS_KEY_FILE=str(certs / "files.key"),
        )
        refused = await asyncio.to_thread(
            cli, as_files, "request", "text", "keywords", "-p", '{"text": "a b a"}'
        )
        assert refused.returncode != 0, refused.stdout
        assert "access_refused" in refused.stderr.lower(), refused.stderr
    finally:
        operator.stop(gateway, "gateway")


async def _dashboard_shows_the_team(
    operator: Operator, port: int, agents: dict[str, str]
) -> dict[str, Any]:
    dashboard = operator.serve("dashboard", "dashboard", "--port", str(port))
    try:

        def shown() -> dict[str, Any] | None:
            state: dict[str, Any] = http_json(f"http://127.0.0.1:{port}/api/state")
            rows = {
                agent["agent_id"]: agent
                for service in state["agents"]["services"]
                for agent in service["agents"]
            }
            if set(rows) != set(agents) or not all(row["skills"] for row in rows.values()):
                return None  # cards come from describe, a moment after the first beat
            return state

        state = await eventually(shown, 60, "the dashboard to show every agent with its card")
    finally:
        # uvicorn raises the signal again once it has shut down: a clean stop reads -SIGTERM.
        operator.stop(dashboard, "dashboard", -signal.SIGTERM)
        assert '"dashboard stopped"' in operator.log("dashboard")
    return state


def _scraped(prometheus: int, agents: list[Container]) -> dict[str, list[str]] | None:
    """Prometheus's targets by job, once every agent's and the broker's are up."""
    targets = http_json(f"http://127.0.0.1:{prometheus}/api/v1/targets")["data"]["activeTargets"]
    jobs: dict[str, list[str]] = {}
    for target in targets:
        if target["health"] != "up":
            return None
        jobs.setdefault(target["labels"]["job"], []).append(target["labels"]["instance"])
    wanted = sorted(f"{c.ip}:9464" for c in agents)
    return jobs if sorted(jobs.get("agentbus", [])) == wanted and "rabbitmq" in jobs else None


async def test_the_production_profile_runs_as_a_whole(
    agentbus_image: str,
    compose_images: dict[str, str],
    podman_env: dict[str, str],
    certificates: Path,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    """The whole profile up; from the host: CLI, plan, gateway, dashboard, Prometheus."""
    amqps, prometheus, gateway, dashboard = free_ports(4)
    ports = tmp_path / "ports.yaml"  # the test's own host ports, on loopback
    ports.write_text(
        "services:\n"
        f'  rabbitmq:\n    ports: !override\n      - "127.0.0.1:{amqps}:5671"\n'
        f'  prometheus:\n    ports: !override\n      - "127.0.0.1:{prometheus}:9090"\n',
        encoding="utf-8",
    )
    env = compose_env(
        podman_env,
        AGENTBUS_IMAGE=agentbus_image,
        AGENTBUS_TLS_DIR=str(certificates),
        AGENTBUS_FILES_DIR=str(data_dir),
        **compose_images,
    )
    files = [COMPOSE, LOCAL_IMAGES, PRODUCTION, ports]
    operator = Operator(certificates, amqps, tmp_path)
    with compose_stack(files, env, "production") as stack:
        began = time.monotonic()
        try:
            await _run_and_check(stack, operator, began, prometheus, gateway, dashboard)
        except BaseException:
            sys.stderr.write(stack.tail() + "\n")  # shown with the failure
            raise
    FIGURES["production: whole test, up to down"] = f"{time.monotonic() - began:.1f} s"


async def _run_and_check(
    stack: Stack, operator: Operator, began: float, prometheus: int, gateway: int, dashboard: int
) -> None:
    # What depends_on's service_healthy does, which podman-compose ignores before podman 4.6
    # (the agents would restart, by their restart policy, until the broker answers).
    stack.up(["rabbitmq", "prometheus"])
    [broker] = stack.of("rabbitmq")
    await eventually(lambda: stack.healthy(broker) or None, 180, "the broker's health check")
    record("production: up -d to the broker healthy", began, time.monotonic())
    stack.up(AGENTS, no_deps=True)
    containers = stack.containers()
    assert Counter(c.service for c in containers) == REPLICAS
    agents = [c for c in containers if c.service in AGENTS]
    for container in agents:
        await eventually(
            lambda c=container: stack.healthy(c) or None, 180, f"{container.name} healthy"
        )
    record("production: up -d to every container healthy", began, time.monotonic())

    # The broker: the generated users only, and each agent logged in as its own service.
    users = stack.exec(broker, "rabbitmqctl", "list_users", "-q", "--no-table-headers")
    assert sorted(line.split()[0] for line in users.splitlines()) == sorted(_users())
    connections = stack.exec(
        broker, "rabbitmqctl", "list_connections", "-q", "--no-table-headers",
        "user", "auth_mechanism", "ssl", "peer_host",
    )  # fmt: skip
    by_peer = {row.split()[3]: row.split()[:3] for row in connections.splitlines()}
    for container in agents:
        assert by_peer[container.ip] == [container.service, "EXTERNAL", "true"], container

    ids = {stack.agent_id(c): c.service for c in agents}

    def every_agent_listed() -> dict[str, str] | None:
        found = operator.listed()
        return found if found == ids else None

    listed = await eventually(
        every_agent_listed, 60, "agentbus agents to list the agent of every container"
    )
    record("production: every agent listed by the operator's CLI", began, time.monotonic())
    assert Counter(listed.values()) == Counter({**dict.fromkeys(AGENTS, 1), "code": 2})

    plan = json.dumps(analysis_plan("compose production"))
    done = await asyncio.to_thread(operator.cli, "plan", "run", "-", "--json", "-q", stdin=plan)
    assert done.returncode == 0, done.stdout + done.stderr
    check_analysis(json.loads(done.stdout))

    await _gateway_serves_the_team(operator, gateway, operator.workdir)
    state = await _dashboard_shows_the_team(operator, dashboard, ids)
    live = {s["service"]: s["live"] for s in state["agents"]["services"]}
    assert live == {**dict.fromkeys(AGENTS, 1), "code": 2}
    assert state["dead_letters"]["available"]
    assert state["dead_letters"]["error"] is None, state["dead_letters"]

    await eventually(
        lambda: _scraped(prometheus, agents), 120, "Prometheus to scrape every agent and the broker"
    )
    record("production: Prometheus scraping every agent", began, time.monotonic())
    for container in agents:  # each user may do all its agent does
        assert "ACCESS_REFUSED" not in stack.logs(container), container.name

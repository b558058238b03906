"""A team under one shared broker user, and the CLI under EXTERNAL, with no ids given.

Every process is started as an operator starts it: the ``agentbus`` command, its own
process, nothing shared but the broker, no ``--id``. The registry, the leader and an
agent start under a shared user ``ops<random>``; the CLI lists them, calls the agent and
runs a plan as that user, then again over TLS with the user's certificate (EXTERNAL).
Each id the registry lists belongs to the user and shows its service. An ``--id`` of
another user is still refused, in one line.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tls_support import CertificateAuthority

from agentbus.security._admission import sent_by
from agentbus.testing.chaos import PrivateBroker

pytestmark = pytest.mark.security

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0
PLAN = {
    "id": "no-ids",
    "subtasks": [{"id": "hi", "skill": "greet", "parameters": {"who": "ops"}}],
}


class Cli:
    """Runs ``agentbus`` as its own process, as one user, on one exchange."""

    def __init__(self, env: dict[str, str], tls: list[str]) -> None:
        self.env = env
        self.tls = tls
        self.started: list[asyncio.subprocess.Process] = []

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        """Start a long-running command (an agent process)."""
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentbus", *args, cwd=ROOT, env=self.env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self.started.append(process)
        return process

    async def run(self, *args: str, tls: bool = False) -> tuple[int, str, str]:
        """Run a one-shot command to its end: exit status, stdout, stderr."""
        options = self.tls if tls else []
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentbus", *options, *args, cwd=ROOT, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=WAIT)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async def stop(self) -> list[int | None]:
        """SIGTERM every started process and wait for each to exit."""
        for process in self.started:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        return [await asyncio.wait_for(p.wait(), timeout=WAIT) for p in self.started]


@pytest.fixture
async def ops(tls_node: PrivateBroker, ca: CertificateAuthority) -> AsyncIterator[tuple[str, Cli]]:
    """A shared user with the run of the vhost, and the CLI logged in as it."""
    user = f"ops{secrets.token_hex(3)}"
    url = tls_node.add_user(user, secrets.token_hex(8))
    issued = ca.client(user)
    env = {
        **os.environ,
        "AGENTBUS_URL": url,
        "AGENTBUS_EXCHANGE": f"ids-{secrets.token_hex(3)}",
        "PYTHONPATH": os.pathsep.join((str(ROOT / "src"), str(ROOT))),
    }
    tls = [
        "--url", tls_node.tls_url(),
        "--tls-ca-file", str(ca.ca_file),
        "--tls-cert-file", str(issued.cert_file),
        "--tls-key-file", str(issued.key_file),
    ]  # fmt: skip
    cli = Cli(env, tls)
    try:
        yield user, cli
    finally:
        await cli.stop()
        tls_node.delete_user(user)


async def _listed(cli: Cli, services: set[str]) -> list[dict[str, str]]:
    """Ask the registry (``agentbus agents``) until every service is listed."""
    async with asyncio.timeout(WAIT):
        while True:
            status, out, err = await cli.run("agents", "--json")
            assert status == 0 or "nobody serves it" in err, err  # the registry is starting
            rows: list[dict[str, str]] = json.loads(out) if status == 0 else []
            if services <= {row["service"] for row in rows}:
                return rows
            await asyncio.sleep(0.3)  # the next heartbeat round: no event to wait on


async def test_a_team_under_one_shared_user_works_with_no_ids_given(
    ops: tuple[str, Cli], tmp_path: Path
) -> None:
    """registry, leader and greeter start as ``ops`` with no ``--id``; so does the CLI,
    over the plain port (PLAIN) and over TLS with ``ops``'s certificate (EXTERNAL)."""
    user, cli = ops
    for command in (["registry"], ["leader"], ["run", "examples.greeter:Greeter"]):
        await cli.start(*command, "--heartbeat", "0.5")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(PLAN))

    rows = await _listed(cli, {"registry", "leader", "greeter"})
    called = await cli.run("request", "greeter", "greet", "-p", '{"who": "ann"}')
    planned = await cli.run("plan", "run", str(plan_file), "--json", "-q")
    external = await cli.run("agents", "--json", tls=True)
    called_external = await cli.run("request", "greeter", "greet", "-p", "{}", tls=True)

    for row in rows:
        assert sent_by(row["agent_id"], user), row
        assert row["service"] in row["agent_id"], row
    assert called[0] == 0, called[2]
    assert json.loads(called[1])["payload"]["result"]["text"] == "hello, ann!"
    assert planned[0] == 0, planned[2]
    assert json.loads(planned[1])["subtasks"][0]["result"]["text"] == "hello, ops!"
    assert external[0] == 0, external[2]
    assert {row["service"] for row in json.loads(external[1])} >= {"registry", "greeter"}
    # Parameters are checked by the agent: the call went through, as ``ops`` over TLS.
    assert called_external[0] != 0
    assert "invalid_parameters" in called_external[1] + called_external[2]
    assert await cli.stop() == [0, 0, 0]


async def test_an_id_of_another_user_is_refused_in_one_line(ops: tuple[str, Cli]) -> None:
    """``--id`` does not let ``ops`` pass for ``billing``: one line, exit 2, no traceback."""
    _, cli = ops
    status, _, err = await cli.run("agents", "--id", "billing-1")
    assert status == 2
    assert "does not belong to broker user" in err
    assert "Traceback" not in err

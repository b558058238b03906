"""``agentbus gateway`` and ``run-a2a`` as commands: a process, its options, one-line errors."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import sys
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a_client import data_of, sdk_client, send, user_message
from gateway_agents import Calc
from gateway_team import HEARTBEAT, KEY, Team

import agentbus
from agentbus import Settings
from agentbus.bus import Topology
from support.broker import delete_topology
from support.ports import free_port
from support.required import missing

AGENTBUS = str(Path(sys.executable).with_name("agentbus"))
ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "AGENTBUS_INSTANCE_QUEUE_EXPIRES": "5"}  # its queues go soon after it


async def run(*args: str) -> tuple[int, str]:
    """Run ``agentbus ARGS``; return its exit status and standard error."""
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, err.decode()


async def wait_listed(url: str, service: str, verify: ssl.SSLContext | bool = True) -> None:
    """Wait until the gateway at ``url`` lists ``service``.

    Up to a minute: a gateway of two worker processes beside two other test workers on two
    cores took more than 20 s to start and list it."""
    async with asyncio.timeout(60), httpx.AsyncClient(verify=verify) as http:
        while True:
            try:
                listing = (await http.get(f"{url}/agents")).json()
            except httpx.HTTPError:
                listing = {"agents": []}
            if any(card["name"] == service for card in listing["agents"]):
                return
            await asyncio.sleep(0.1)


async def test_the_gateway_command_serves_the_bus_agents(team: Team, tmp_path: Path) -> None:
    """``agentbus gateway --keys FILE`` serves calc; SIGTERM stops it cleanly."""
    await team.add(Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT))
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({KEY: "alice"}))
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, "--url", team.settings.url, "--exchange", team.settings.exchange,
        "gateway", "--keys", str(keys), "--port", str(port), env=ENV,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_listed(url, "calc")
        async with sdk_client(f"{url}/agents/calc", KEY) as client:
            (response,) = await send(client, user_message({"n": 7}, skill="double"))
        assert data_of(response.task.artifacts[0].parts[0]) == 14
    finally:
        process.terminate()
        status = await process.wait()
    assert status == 0


async def test_an_anonymous_gateway_serves_its_root_service_by_host(team: Team) -> None:
    """``gateway --anonymous --root-service calc``: a client given only the host calls calc."""
    await team.add(Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT))
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, "--url", team.settings.url, "--exchange", team.settings.exchange,
        "gateway", "--anonymous", "--root-service", "calc", "--port", str(port),
        env=ENV, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_listed(url, "calc")
        async with httpx.AsyncClient() as http:
            card = await A2ACardResolver(http, url).get_agent_card()
        assert (card.name, len(card.security_requirements), len(card.security_schemes)) == (
            "calc",
            0,
            0,
        )
        async with sdk_client(url, None) as client:
            (response,) = await send(client, user_message({"n": 3}, skill="double"))
        assert data_of(response.task.artifacts[0].parts[0]) == 6
    finally:
        process.terminate()
        _, err = await process.communicate()
    assert process.returncode == 0
    assert f"calc served at {url}/" in err.decode()


async def test_the_gateway_serves_tls_with_uvicorns_options(team: Team, tmp_path: Path) -> None:
    """--ssl-certfile/--ssl-keyfile: cards and calls over https, their URLs the public one."""
    openssl = shutil.which("openssl")
    if openssl is None:
        missing("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = await asyncio.create_subprocess_exec(
        openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        "-keyout", str(key), "-out", str(cert),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert await made.wait() == 0
    await team.add(Calc(agent_id="calc-1", settings=team.settings, heartbeat_interval=HEARTBEAT))
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({KEY: "alice"}))
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    process = await asyncio.create_subprocess_exec(
        AGENTBUS, "--url", team.settings.url, "--exchange", team.settings.exchange,
        "gateway", "--keys", str(keys), "--port", str(port), "--public-url", url,
        "--ssl-certfile", str(cert), "--ssl-keyfile", str(key), env=ENV,
    )  # fmt: skip
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        await wait_listed(url, "calc", verify=trust)
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(verify=trust, headers=headers, timeout=30) as http:
            card = await A2ACardResolver(http, f"{url}/agents/calc").get_agent_card()
            assert card.supported_interfaces[0].url == f"{url}/agents/calc/"
            client = await create_client(card, ClientConfig(streaming=False, httpx_client=http))
            (response,) = await send(client, user_message({"n": 8}, skill="double"))
            assert data_of(response.task.artifacts[0].parts[0]) == 16
            with pytest.raises(httpx.HTTPError):
                await http.get(f"http://127.0.0.1:{port}/agents")
    finally:
        process.terminate()
        await process.wait()


async def test_the_commands_refuse_bad_setups_in_one_line(tmp_path: Path) -> None:
    """No keys, a malformed keys file, an unreachable A2A agent: a clear error, no traceback."""
    status, err = await run("gateway")
    assert status == 2
    assert "give --keys FILE" in err
    bad = tmp_path / "keys.json"
    bad.write_text(json.dumps({"short": "alice"}))
    status, err = await run("gateway", "--keys", str(bad))
    assert status == 2
    assert "shorter than 16 characters" in err
    status, err = await run("run-a2a", f"http://127.0.0.1:{free_port()}/", "--wait", "1")
    assert status == 2
    assert "no A2A agent card at" in err
    assert "Traceback" not in err


async def test_run_a2a_waits_for_a_server_that_starts_after_it(broker_url: str) -> None:
    """Started before its A2A server (as `cmd &` lines run), run-a2a waits, then serves."""
    port = free_port()
    env = {**os.environ, "AGENTBUS_URL": broker_url, "AGENTBUS_EXCHANGE": f"gw-wait-{port}"}
    bridge = await asyncio.create_subprocess_exec(
        AGENTBUS, "run-a2a", f"http://127.0.0.1:{port}/", "--id", "drafter-1",
        "--heartbeat", "1", env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.a2a_drafter", "--port", str(port),
        cwd=ROOT, env=env, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        settings = Settings(url=broker_url, exchange=env["AGENTBUS_EXCHANGE"])
        async with agentbus.connect(settings=settings) as bus:
            reply = None
            async with asyncio.timeout(60):
                while reply is None:  # until the bridge has the card and serves
                    try:  # the first call through a just-started server: 5 s was too few
                        reply = await bus.request(  # under three test workers
                            "drafter-1", "draft", {"sections": ["Bees"]}, timeout=30
                        )
                    except agentbus.Unroutable:
                        await asyncio.sleep(0.2)
        assert reply.result.startswith("## Bees")
    finally:
        for process in (bridge, server):
            if process.returncode is None:
                process.terminate()
                await process.wait()
        topology = Topology(env["AGENTBUS_EXCHANGE"])
        queues = {topology.service_queue("drafter"), topology.instance_queue("drafter-1")}
        await delete_topology(broker_url, env["AGENTBUS_EXCHANGE"], queues)

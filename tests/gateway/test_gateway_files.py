"""Files through the gateway: an a2a-sdk client's file part becomes an artifact the agent
reads, an artifact the agent returns comes back as a file part, the digests equal."""

from __future__ import annotations

import hashlib

import pytest
from a2a.helpers import new_message
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import InvalidParamsError
from a2a_client import data_of, sdk_client, send, state_name, user_message
from gateway_team import HEARTBEAT, KEY, Team
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from agentbus import Agent, Artifact, put_artifact, skill
from agentbus.gateway import RemoteA2AAgent
from support.ports import free_port
from support.servers import start_uvicorn, stop_uvicorn
from support.waiting import wait_until

MB = 1_000_000


def payload(size: int, seed: bytes) -> bytes:
    """``size`` bytes that differ from one seed to the next (SHA-256 blocks)."""
    blocks = (hashlib.sha256(seed + n.to_bytes(8, "big")).digest() for n in range(size // 32 + 1))
    return b"".join(blocks)[:size]


class Scanner(Agent):
    name = "scanner"

    @skill
    async def digest(self, document: Artifact) -> dict[str, object]:
        """The SHA-256 and size of a document, read a chunk at a time."""
        sha, size = hashlib.sha256(), 0
        async for chunk in document.open():
            sha.update(chunk)
            size += len(chunk)
        return {"sha256": sha.hexdigest(), "size": size, "name": document.name}

    @skill
    async def produce(self, size: int) -> Artifact:
        """``size`` bytes of a report, stored for the caller."""
        return await put_artifact(
            payload(size, b"report"), name="report.bin", media_type="application/octet-stream"
        )


def file_message(part: a2a.Part, skill: str) -> a2a.Message:
    message = new_message([part], role=a2a.Role.ROLE_USER)
    message.metadata.update({"skill": skill})
    return message


async def scanner_team(team: Team, **options: object) -> str:
    await team.add(
        Scanner(agent_id="scanner-1", settings=team.settings, heartbeat_interval=HEARTBEAT)
    )
    gateway = await team.serve(max_body_size=64 * 1024 * 1024, **options)
    await wait_until(lambda: "scanner" in gateway.directory.cards, 15)
    return f"{team.url}/agents/scanner"


async def test_a_20_mb_file_goes_in_and_a_5_mb_artifact_comes_back(team: Team) -> None:
    """20 MB as a file part's bytes: the agent reads the artifact and its digest is the
    client's; 5 MB the agent stores comes back as a file part, digest equal at both ends."""
    url = await scanner_team(team)
    sent = payload(20 * MB, b"upload")
    part = a2a.Part(raw=sent, filename="upload.bin", media_type="application/octet-stream")
    async with sdk_client(url, KEY) as client:
        events = await send(client, file_message(part, "digest"))
        task = events[-1].task
        assert state_name(task.status.state) == "TASK_STATE_COMPLETED"
        result = data_of(task.artifacts[0].parts[0])
        assert result == {
            "sha256": hashlib.sha256(sent).hexdigest(),
            "size": 20 * MB,
            "name": "upload.bin",
        }

        task = (await send(client, user_message({"size": 5 * MB}, skill="produce")))[-1].task
    assert state_name(task.status.state) == "TASK_STATE_COMPLETED"
    (back,) = task.artifacts[0].parts
    assert (back.filename, back.media_type) == ("report.bin", "application/octet-stream")
    assert hashlib.sha256(back.raw).digest() == hashlib.sha256(payload(5 * MB, b"report")).digest()


async def test_a_file_by_url_is_fetched_and_a_private_one_refused_by_default(team: Team) -> None:
    """A file part's URL: fetched and stored when the gateway may reach the host; by
    default a loopback URL is refused and the task fails saying so."""
    served = payload(3 * MB, b"served")

    async def file(_: object) -> Response:
        return Response(served, media_type="application/pdf")

    port = free_port()
    server, serving = await start_uvicorn(Starlette(routes=[Route("/doc.pdf", file)]), port)
    try:
        part = a2a.Part(url=f"http://127.0.0.1:{port}/doc.pdf", filename="doc.pdf")
        url = await scanner_team(team, file_private_hosts=True)
        async with sdk_client(url, KEY) as client:
            task = (await send(client, file_message(part, "digest")))[-1].task
        assert state_name(task.status.state) == "TASK_STATE_COMPLETED"
        assert data_of(task.artifacts[0].parts[0])["sha256"] == hashlib.sha256(served).hexdigest()

        await team.close_gateway()
        gateway = await team.serve()
        await wait_until(lambda: "scanner" in gateway.directory.cards, 15)
        async with sdk_client(f"{team.url}/agents/scanner", KEY) as client:
            task = (await send(client, file_message(part, "digest")))[-1].task
        assert state_name(task.status.state) == "TASK_STATE_FAILED"
        said = task.status.message.parts[0].text
        assert "refused: a private or local address" in said
    finally:
        await stop_uvicorn(server, serving)


async def test_a_file_for_a_skill_without_file_parameters_is_a_protocol_error(
    team: Team,
) -> None:
    """A file part for ``produce`` (no artifact parameter): InvalidParams names the schema."""
    url = await scanner_team(team)
    part = a2a.Part(raw=b"x" * 10, filename="x.bin")
    async with sdk_client(url, KEY) as client:
        with pytest.raises(InvalidParamsError, match="files for 'produce' do not fit its schema"):
            await send(client, file_message(part, "produce"))


async def test_run_a2a_passes_files_both_ways(team: Team) -> None:
    """``run-a2a`` in front of the gateway's scanner: an artifact parameter goes to the A2A
    agent as a file part, a file part it returns comes back as an artifact for the caller."""
    url = await scanner_team(team)
    remote = await RemoteA2AAgent.from_url(
        url, service="far-scanner", key=KEY, settings=team.settings, heartbeat_interval=HEARTBEAT
    )
    await team.add(remote)
    sent = payload(3 * MB, b"far")
    document = await team.client.artifacts.put(sent, name="far.bin", reader="far-scanner")
    reply = await team.client.request(
        "far-scanner", "digest", {"document": document.wire()}, timeout=30
    )
    assert reply.result == {
        "sha256": hashlib.sha256(sent).hexdigest(),
        "size": 3 * MB,
        "name": "far.bin",
    }

    reply = await team.client.request("far-scanner", "produce", {"size": 2 * MB}, timeout=30)
    report = Artifact.model_validate(reply.result)
    assert (report.name, report.size) == ("report.bin", 2 * MB)
    back = await report.read(via=team.client.artifacts)
    assert hashlib.sha256(back).digest() == hashlib.sha256(payload(2 * MB, b"report")).digest()

"""Artifacts on an S3-compatible store (obstore), against moto's S3 server on localhost."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from agentbus import (
    Agent,
    Artifact,
    ArtifactCorrupt,
    ArtifactMissing,
    Settings,
    put_artifact,
    skill,
)
from agentbus.testing import MemoryBroker, MemoryBus

pytestmark = pytest.mark.integration

BUCKET = "agentbus-test"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on a free port, with the bucket made, its keys in the environment."""
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    keys = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }
    saved = {name: os.environ.get(name) for name in keys}
    os.environ.update(keys)
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Shredder(Agent):
    name = "shredder"

    @skill
    async def shred(self, document: Artifact) -> Artifact:
        """Return the document's bytes reversed, chunk by chunk, as a new artifact."""
        chunks = [chunk[::-1] async for chunk in document.open()]
        return await put_artifact(chunks[::-1], name="shredded.bin")


async def test_an_artifact_goes_to_s3_and_back_through_a_skill(s3_endpoint: str) -> None:
    """With artifact_store=s3://..., a 12 MB file (three parts of a multipart upload) goes
    to a skill and a new one comes back; digests equal, keys by writer and reader."""
    settings = Settings(artifact_store=f"s3://{BUCKET}/team", max_message_size=256 * 1024)
    broker = MemoryBroker()
    data = os.urandom(12 * 1000 * 1000)
    async with (
        MemoryBus(broker, settings, agent_id="shredder-1") as serving,
        Shredder(bus=serving, settings=settings),
        MemoryBus(broker, settings, agent_id="client-1") as client,
    ):
        document = await client.artifacts.put(data, name="doc.bin", reader="shredder")
        assert document.store == "s3"
        assert document.location == f"s3://{BUCKET}/team/client.shredder/{document.id}"
        reply = await client.request("shredder", "shred", {"document": document.wire()}, timeout=60)
        shredded = Artifact.model_validate(reply.result)
        assert shredded.location.startswith(f"s3://{BUCKET}/team/shredder.client/")
        assert await shredded.read(via=client.artifacts) == data[::-1]


async def test_s3_errors_are_the_artifact_errors(s3_endpoint: str) -> None:
    """A deleted object is ArtifactMissing; bytes that are not the reference's, corrupt."""
    settings = Settings(artifact_store=f"s3://{BUCKET}")
    async with MemoryBus(MemoryBroker(), settings) as bus:
        stored = await bus.artifacts.put(b"x" * 1000, name="x")
        lying = Artifact.model_validate({**stored.model_dump(), "sha256": "0" * 64})
        with pytest.raises(ArtifactCorrupt):
            await bus.artifacts.read(lying)
        assert await bus.artifacts.delete(stored)
        with pytest.raises(ArtifactMissing):
            await bus.artifacts.read(stored)

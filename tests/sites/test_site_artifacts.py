"""Files across sites (docs/sites.md, "Files across sites"): a stream is not federated, so
a reader at another site fetches an object on demand from the bus that stored it, checked
against its size and digest; an agent's file and a plain client's both; a user that is not
one of the object's pair is refused."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import pytest
from chaos_support import eventually
from fault_support import Team

from agentbus import AccessRefused, Artifact, ArtifactMissing
from agentbus.bus import Bus
from conftest import Sites
from support.file_agents import Checker, Maker

pytestmark = pytest.mark.sites

_LINK_UP = 60.0  # s: the links start and carry each site's bindings to the other
MB = 1_000_000


async def test_a_file_made_at_one_site_is_read_at_the_other(sites: Sites, team: Team) -> None:
    """maker runs at a; a client at b asks it for 20 MB and reads the file at b: fetched
    across from maker-a, whole and checked; a user not of the pair is refused."""
    await team.start(Maker(agent_id="maker-a", settings=sites.a))
    client = await Bus(sites.b, agent_id="client-b").open()
    try:

        async def made() -> Any:
            return await client.request("maker", "make", {"size": 1000}, timeout=10)

        await eventually(made, _LINK_UP, "a request from b served at a")
        reply = await client.request("maker", "make", {"size": 20 * MB}, timeout=60)
        artifact = Artifact.model_validate(reply.result)
        assert artifact.site == "a"
        began = time.monotonic()
        data = await artifact.read(via=client.artifacts)
        took = time.monotonic() - began
        print(f"20 MB across the link: {took:.2f} s, {20 / took:.1f} MB/s")
        assert hashlib.sha256(data).hexdigest() == artifact.sha256
        assert len(data) == 20 * MB
        async with Bus(sites.b, agent_id="other-b") as other:
            with pytest.raises(AccessRefused):
                await other.artifacts.read(artifact)
    finally:
        await client.aclose()


async def test_a_file_a_request_names_is_read_at_the_far_site(sites: Sites, team: Team) -> None:
    """A client at a (a plain bus) stores 5 MB for checker, which runs at b only, and names
    it in a request that crosses: checker reads it across from the client, whole; once the
    client is gone, the file is a clear ArtifactMissing, never wrong bytes."""
    await team.start(Checker(agent_id="checker-b", settings=sites.b))
    # An agent at a: its heartbeats tell b that the link to a is up (the site's beacon).
    await team.start(Maker(agent_id="maker-a", settings=sites.a, heartbeat_interval=1))
    client = await Bus(sites.a, agent_id="client-a").open()
    try:
        small = await client.artifacts.put(b"x", name="x.bin", reader="checker")

        async def checked() -> Any:
            parameters = {"document": small.wire()}
            return await client.request("checker", "digest", parameters, timeout=10)

        await eventually(checked, _LINK_UP, "a request from a served at b")
        data = os.urandom(5 * MB)
        document = await client.artifacts.put(data, name="doc.bin", reader="checker")
        assert document.site == "a"
        parameters = {"document": document.wire()}
        reply = await client.request("checker", "digest", parameters, timeout=60)
        assert reply.result == hashlib.sha256(data).hexdigest()
    finally:
        await client.aclose()
    async with Bus(sites.b, agent_id="checker-c") as reader:
        with pytest.raises(ArtifactMissing):
            await reader.artifacts.read(document)

"""The generated permissions across sites (docs/sites.md): each site loads what
``agentbus definitions --peer-site`` and ``agentbus federation`` generate for it, its
participants and links log in as the users those name, and a request crosses, with its
answer, on nothing more; a request the client may not send is refused by the broker; a
file the service returns is read across at the client's site.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from chaos_support import eventually
from fault_support import Team
from link_support import heard, until_true

from agentbus import (
    AccessRefused,
    Agent,
    Artifact,
    Settings,
    SiteUnreachable,
    put_artifact,
    skill,
)
from agentbus.bus import Bus, Topology
from agentbus.definitions import definitions, federation_definitions, team_grants
from agentbus.testing.chaos import PrivateBroker

pytestmark = pytest.mark.sites

_LINK_UP = 60.0


async def _load(node: PrivateBroker, document: dict[str, Any], path: Path) -> None:
    await asyncio.to_thread(path.write_bytes, orjson.dumps(document))
    await asyncio.to_thread(node.rabbitmqctl, "import_definitions", str(path))


async def test_requests_cross_on_the_generated_permissions_and_no_more(
    site_nodes: tuple[PrivateBroker, PrivateBroker], team: Team, tmp_path: Path
) -> None:
    a, b = site_nodes
    run = uuid.uuid4().hex[:6]
    exchange, service, client = f"perm-{run}", f"greeter{run}", f"cli{run}"
    link_of = {"a": f"feda{run}", "b": f"fedb{run}"}  # the user each site's link logs in as
    password = secrets.token_urlsafe(12)
    nodes = {"a": a, "b": b}
    # Site a runs the client only; b the greeter. The same calls at both: b's greeter
    # answers a caller from a.
    teams = {"a": [], "b": [service]}

    async def generate(site: str, peer: str) -> None:
        grants = team_grants(teams[site], clients={client: [service]}, across_sites=True)
        document = definitions(
            grants, exchange=exchange, queue_type="classic", peers={peer: link_of[peer]}
        )
        await _load(nodes[site], document, tmp_path / f"team-{site}.json")
        users = [client, link_of[peer]] if site == "a" else [service, link_of[peer]]
        for user in users:
            await asyncio.to_thread(nodes[site].rabbitmqctl, "change_password", user, password)
        link = nodes[peer].url_for(link_of[site], password)
        linking = federation_definitions(site, {peer: link}, exchange=exchange)
        await _load(nodes[site], linking, tmp_path / f"link-{site}.json")

    await asyncio.gather(generate("a", "b"), generate("b", "a"))

    def settings(site: str, user: str) -> Settings:
        peer = "b" if site == "a" else "a"
        url = nodes[site].url_for(user, password)
        return Settings(url=url, exchange=exchange, site=site, peer_sites=peer)

    greeter: Callable[..., Agent] = type(
        "Greeter", (_Greeter,), {"name": service}
    )  # the service's name is its broker user's
    await team.start(
        greeter(agent_id=f"{service}-1", settings=settings("b", service), heartbeat_interval=1)
    )
    bus = await Bus(settings("a", client), agent_id=f"{client}-1").open()
    try:
        beacon = Topology(exchange).site_beacon("b")
        await until_true(lambda: heard(a.url, beacon), _LINK_UP, "b's heartbeats heard at a")

        async def greet() -> Any:
            return (await bus.request(service, "greet", {"who": "ann"}, timeout=5)).result

        assert await eventually(greet, _LINK_UP, "a request across") == "hello ann from b"
        with pytest.raises(AccessRefused):  # not among its calls: the broker refuses it
            await bus.request(f"other{run}", "greet", timeout=5)
        # A file the service returns is read at the client's site: fetched from its owner
        # at b, on the same permissions (the client may call the service's instances).
        made = await bus.request(service, "make", {"size": 3_000_000}, timeout=30)
        artifact = Artifact.model_validate(made.result)
        assert (artifact.site, artifact.reader) == ("b", client)
        data = await artifact.read(via=bus.artifacts)
        assert hashlib.sha256(data).hexdigest() == artifact.sha256
        bus_again = await Bus(settings("a", client), agent_id=f"{client}-2").open()
        try:
            await team.aclose()  # b's only agent goes: its beacon at a empties
            await until_true(
                lambda: _silent(a.url, beacon), 30, "b's beacon to empty, read as the client"
            )
            with pytest.raises(SiteUnreachable):
                await bus_again.request(service, "greet", {"who": "ann"}, timeout=30)
        finally:
            await bus_again.aclose()
    finally:
        await bus.aclose()


async def _silent(url: str, beacon: str) -> bool:
    return not await heard(url, beacon)


class _Greeter(Agent):
    name = "greeter"

    @skill
    async def greet(self, who: str) -> str:
        """Say hello, and from where."""
        return f"hello {who} from {self.site}"

    @skill
    async def make(self, size: int) -> Artifact:
        """Store ``size`` random bytes for the caller."""
        return await put_artifact(os.urandom(size), name="made.bin")

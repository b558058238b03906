"""A private RabbitMQ cluster for chaos tests: N private nodes on this host, joined as one.

Each node is a ``PrivateBroker`` (its own name, AMQP and distribution ports, data
directory); the cluster gives them one Erlang cookie, an ``epmd`` of their own on a free
port (never the machine's on 4369), and classic-config peer discovery, so they form one
cluster as they boot::

    async with PrivateCluster(3) as cluster:
        settings = Settings(url=cluster.url, queue_type="quorum")  # every node, ';'-joined
        ...
        leader = await cluster.queue_leader("agentbus.svc.worker")
        await cluster.kill(leader)  # SIGKILL of that node's Erlang VM
        await cluster.start(leader)  # back, and back in the cluster

The blocking work (a node's start, a ``rabbitmqctl``) runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Final, Self

from agentbus.testing.chaos._node_layout import free_port
from agentbus.testing.chaos._private_node import PrivateBroker, PrivateBrokerError

__all__ = ["ClusterState", "PrivateCluster"]

_EPMD_WAIT: Final = 10.0


class ClusterState(enum.Enum):
    """Where a ``PrivateCluster`` is in its life."""

    NEW = "new"
    RUNNING = "running"  # formed; some nodes may be down for a test
    CLOSED = "closed"


class PrivateCluster:
    """RabbitMQ nodes of a test session's own, on this host, forming one cluster.

    Args:
        size: How many nodes.
        name: The node names' prefix: ``<name>-<run>-<i>@localhost``.
        config: Extra ``rabbitmq.conf`` settings for every node.
        start_timeout: Seconds a node's start may take before it fails.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        name: str = "agentbus-c",
        config: Mapping[str, str] | None = None,
        start_timeout: float = 90.0,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        run = secrets.token_hex(3)
        names = [f"{name}{run}-{i}@localhost" for i in range(size)]
        self.epmd_port = 0
        self.formed_seconds = 0.0  # how long the cluster took to form, for reports
        self._config = {
            "cluster_formation.peer_discovery_backend": "classic_config",
            **{f"cluster_formation.classic_config.nodes.{i + 1}": n for i, n in enumerate(names)},
            **(config or {}),
        }
        self._cookie = secrets.token_hex(20).upper()
        self._start_timeout = start_timeout
        self._names = names
        self.nodes: list[PrivateBroker] = []
        self._epmd: subprocess.Popen[bytes] | None = None
        self._state = ClusterState.NEW

    def __repr__(self) -> str:
        up = sum(node.is_running for node in self.nodes)
        return f"<PrivateCluster {up}/{len(self._names)} up state={self._state.value}>"

    @property
    def state(self) -> ClusterState:
        """Where the cluster is in its life."""
        return self._state

    @property
    def urls(self) -> list[str]:
        """Each node's AMQP URL, in node order."""
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """Every node's URL joined with ``;``: the multi-node form the bus takes."""
        return ";".join(self.urls)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self, index: int | None = None) -> None:
        """Form the cluster (first call), or start node ``index`` again: it rejoins.

        Raises:
            PrivateBrokerError: RabbitMQ is not installed, or a node did not start in time.
        """
        if self._state is ClusterState.CLOSED:
            raise PrivateBrokerError(f"{self!r} is closed")
        if self._state is ClusterState.NEW:
            await asyncio.to_thread(self._form)
            return
        node = self.nodes[index] if index is not None else None
        if node is None:
            await self.ensure_running()
        else:
            await asyncio.to_thread(node.ensure_running)

    async def kill(self, index: int) -> None:
        """SIGKILL node ``index``'s Erlang VM, as a crash would; its data stays."""
        await asyncio.to_thread(self.nodes[index].kill)

    async def stop(self, index: int) -> None:
        """Shut node ``index`` down cleanly; its data stays for ``start(index)``."""
        await asyncio.to_thread(self.nodes[index].shutdown)

    async def restart(self, index: int) -> None:
        """Restart node ``index`` on its data (shut down first if it runs); it rejoins."""
        await asyncio.to_thread(self.nodes[index].restart)

    async def ensure_running(self, timeout: float = 60.0) -> None:
        """Bring every node back and wait until the cluster reports them all running."""
        for node in self.nodes:
            if not node.is_running:
                await asyncio.to_thread(node.ensure_running)
        deadline = time.monotonic() + timeout
        while len(await self.running_nodes()) < len(self.nodes):
            if time.monotonic() > deadline:
                raise PrivateBrokerError(f"{self!r}: not every node rejoined in {timeout} s")
            await asyncio.sleep(0.2)

    async def running_nodes(self) -> list[str]:
        """The running nodes' names, as a running node's ``cluster_status`` reports them."""
        status = json.loads(await self.rabbitmqctl("cluster_status", "--formatter", "json"))
        return sorted(status.get("running_nodes", []))

    async def queue_leader(self, queue: str) -> int:
        """Return the index of the node leading quorum queue ``queue`` (``/`` vhost)."""
        rows = json.loads(
            await self.rabbitmqctl("list_queues", "name", "leader", "--formatter", "json")
        )
        for row in rows:
            if row.get("name") == queue:
                return self.index_of(str(row.get("leader", "")))
        raise PrivateBrokerError(f"no queue {queue!r} on {self!r}")

    async def node_of_connection(self, connection_name: str) -> int | None:
        """Return the index of the node serving the connection named ``connection_name``.

        The name is the client's ``connection_name`` (the bus sends ``agentbus:<agent id>``).
        """
        rows = json.loads(
            await self.rabbitmqctl(
                "list_connections", "port", "client_properties", "--formatter", "json"
            )
        )
        for row in rows:
            properties = {item[0]: item[-1] for item in row.get("client_properties", [])}
            if properties.get("connection_name") == connection_name:
                return self.index_of(int(row["port"]))  # the node's own AMQP port
        return None

    def index_of(self, node: str | int) -> int:
        """The index of a node given by its name, its AMQP port, or a URL holding the port."""
        for index, broker in enumerate(self.nodes):
            if node in (broker.node, broker.port) or (
                isinstance(node, str) and f"127.0.0.1:{broker.port}/" in node
            ):
                return index
        raise PrivateBrokerError(f"{node!r} is no node of {self!r}")

    async def rabbitmqctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl ARGS`` on the first running node; return its output."""
        for node in self.nodes:
            if node.is_running:
                return await asyncio.to_thread(node.rabbitmqctl, *args, timeout=timeout)
        raise PrivateBrokerError(f"{self!r}: no node is running")

    async def aclose(self) -> None:
        """Stop every node, remove their data, and stop the cluster's ``epmd``."""
        if self._state is ClusterState.CLOSED:
            return
        self._state = ClusterState.CLOSED
        try:
            await asyncio.gather(*(asyncio.to_thread(node.stop) for node in self.nodes))
        finally:
            self._stop_epmd()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of every node's output and log, for failure reports."""
        return "\n".join(node.log_tail(lines) for node in self.nodes)

    # Internals.

    def _form(self) -> None:
        began = time.monotonic()
        try:
            self._start_epmd()
            env = {"ERL_EPMD_PORT": str(self.epmd_port)}
            self.nodes = [
                PrivateBroker(
                    node=name,
                    config=self._config,
                    cookie=self._cookie,
                    env=env,
                    start_timeout=self._start_timeout,
                )
                for name in self._names
            ]
            # The first node forms the cluster; the others find it through the classic
            # config and join it (together: nobody else can form a second cluster).
            self.nodes[0].start()
            self._state = ClusterState.RUNNING
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                for started in [pool.submit(node.start) for node in self.nodes[1:]]:
                    started.result()
            deadline = time.monotonic() + self._start_timeout
            while len(self._running_now()) < len(self.nodes):
                if time.monotonic() > deadline:
                    raise PrivateBrokerError(f"{self!r} did not form:\n{self.log_tail()}")
                time.sleep(0.2)
        except BaseException:
            for node in self.nodes:
                node.stop()
            self._stop_epmd()
            self._state = ClusterState.CLOSED
            raise
        self.formed_seconds = time.monotonic() - began

    def _running_now(self) -> list[str]:
        status = json.loads(self.nodes[0].rabbitmqctl("cluster_status", "--formatter", "json"))
        running: list[str] = status.get("running_nodes", [])
        return running

    def _start_epmd(self) -> None:
        epmd = shutil.which("epmd")
        if epmd is None:
            raise PrivateBrokerError("epmd (Erlang's port mapper) is not installed")
        self.epmd_port = free_port(set())
        self._epmd = subprocess.Popen(
            [epmd, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + _EPMD_WAIT
        while not _listens(self.epmd_port):
            if self._epmd.poll() is not None or time.monotonic() > deadline:
                raise PrivateBrokerError(f"epmd did not start on port {self.epmd_port}")
            time.sleep(0.05)

    def _stop_epmd(self) -> None:
        epmd, self._epmd = self._epmd, None
        if epmd is None:
            return
        if epmd.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                epmd.send_signal(signal.SIGKILL)
        epmd.wait(timeout=10)


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False

"""pytest fixtures for chaos tests of agents: a private broker, a faulty network, processes.

Opt in from the ``conftest.py`` at the root of your tests (pytest reads ``pytest_plugins``
only there) or on the command line (``pytest -p agentbus.testing.chaos.pytest_plugin``)::

    pytest_plugins = ["agentbus.testing.chaos.pytest_plugin"]

Nothing starts unless a test asks for a fixture::

    @pytest.mark.chaos
    async def test_survives_a_cut(private_broker, chaos_proxy):
        async with agentbus.connect(chaos_proxy.url()) as bus:
            chaos_proxy.cut()
            ...

- ``private_broker_node`` (session): a ``PrivateBroker``, a RabbitMQ node of the test
  session's own, started from the installed ``rabbitmq-server`` (about 5-10 s).
- ``private_broker``: the same node, brought back to serving before each test (a test
  that killed it or stopped its application, then failed, does not break the next).
- ``private_cluster``: a ``PrivateCluster`` of three private nodes forming one cluster,
  shared by the session (formed on first use, about 20 s), with every node brought back
  to running, and in the cluster, before each test (needs pytest-asyncio).
- ``chaos_proxy``: a ``ChaosProxy`` in front of ``private_broker``; healed as soon as the
  test ends (before other fixtures close their buses), closed after it (needs
  pytest-asyncio).
- ``agent_process``: an ``AgentLauncher`` writing into ``tmp_path``; every process it
  started is stopped after the test.
- ``ledger``: a ``Ledger`` in ``tmp_path``; agent processes the test starts find it
  through ``$AGENTBUS_LEDGER`` and record their effects in it.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbus.testing.chaos._ledger import LEDGER_ENV, Ledger
from agentbus.testing.chaos._node_layout import find_rabbitmq
from agentbus.testing.chaos._private_cluster import PrivateCluster
from agentbus.testing.chaos._private_node import PrivateBroker, PrivateBrokerError
from agentbus.testing.chaos._processes import AgentLauncher
from agentbus.testing.chaos._proxy import ChaosProxy

__all__ = [
    "agent_process",
    "chaos_proxy",
    "ledger",
    "private_broker",
    "private_broker_node",
    "private_cluster",
    "private_cluster_session",
]

_HAS_PYTEST_ASYNCIO = importlib.util.find_spec("pytest_asyncio") is not None


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``chaos`` marker (for ``--strict-markers``)."""
    config.addinivalue_line(
        "markers", "chaos: a fault-injection test (private broker node, TCP proxy, processes)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Heal the test's ``chaos_proxy`` before any fixture is torn down.

    A test that failed during a stall would otherwise leave its buses closing through a
    stalled link: each close would wait for the heartbeat timeouts.
    """
    proxy = getattr(item, "funcargs", {}).get("chaos_proxy")
    if isinstance(proxy, ChaosProxy):
        proxy.heal()


def _require_rabbitmq(fixture: str) -> None:
    if find_rabbitmq() is None:
        pytest.fail(
            f"the {fixture} fixture needs RabbitMQ's rabbitmq-server installed "
            "(e.g. 'apt-get install rabbitmq-server'); set AGENTBUS_RABBITMQ_SBIN to the "
            "directory of rabbitmq-server and rabbitmqctl if it is elsewhere",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def private_broker_node() -> Iterator[PrivateBroker]:
    """A private RabbitMQ node for the session; stopped and its data removed at the end."""
    _require_rabbitmq("private_broker")
    broker = PrivateBroker()
    try:
        broker.start()
    except PrivateBrokerError as exc:
        broker.stop()
        pytest.fail(f"the private RabbitMQ node did not start: {exc}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def private_broker(private_broker_node: PrivateBroker) -> PrivateBroker:
    """The session's private node, serving: restarted or its app started if a test left it down."""
    private_broker_node.ensure_running()
    return private_broker_node


if _HAS_PYTEST_ASYNCIO:
    import pytest_asyncio

    @pytest.fixture(scope="session")
    def private_cluster_session() -> Iterator[PrivateCluster]:
        """Three private nodes forming one cluster, for the session; removed at the end.

        Sync, on loops of its own: the cluster keeps no loop state (its work runs in
        threads), so each test's loop drives it.
        """
        _require_rabbitmq("private_cluster")
        cluster = PrivateCluster(3)
        try:
            asyncio.run(cluster.start())
        except PrivateBrokerError as exc:
            asyncio.run(cluster.aclose())
            pytest.fail(f"the private RabbitMQ cluster did not form: {exc}", pytrace=False)
        try:
            yield cluster
        finally:
            asyncio.run(cluster.aclose())

    @pytest_asyncio.fixture
    async def private_cluster(
        private_cluster_session: PrivateCluster,
    ) -> PrivateCluster:
        """The session's cluster with every node running and in it (a test may have killed one)."""
        await private_cluster_session.ensure_running()
        return private_cluster_session

    @pytest_asyncio.fixture
    async def chaos_proxy(private_broker: PrivateBroker) -> AsyncIterator[ChaosProxy]:
        """A TCP proxy to ``private_broker``; connect through ``chaos_proxy.url()``."""
        async with ChaosProxy("127.0.0.1", private_broker.port) as proxy:
            yield proxy

else:  # pragma: no cover - without pytest-asyncio, say what is missing

    @pytest.fixture
    def private_cluster() -> Any:
        """A private RabbitMQ cluster (needs pytest-asyncio)."""
        pytest.fail("the private_cluster fixture needs pytest-asyncio installed", pytrace=False)

    @pytest.fixture
    def chaos_proxy() -> Any:
        """A TCP proxy to ``private_broker`` (needs pytest-asyncio)."""
        pytest.fail("the chaos_proxy fixture needs pytest-asyncio installed", pytrace=False)


@pytest.fixture
def agent_process(tmp_path: Path) -> Iterator[AgentLauncher]:
    """Start ``agentbus run`` processes (output in ``tmp_path``); all are stopped afterwards.

    ``agent_process.start("mymodule:MyAgent", "--id", "a-1", url=private_broker.url)``
    """
    launcher = AgentLauncher(workdir=tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()
        if launcher.processes:
            print(launcher.report())  # shown by pytest when the test failed


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    """The test's ledger; agent processes find it through ``$AGENTBUS_LEDGER``."""
    path = tmp_path / "ledger.db"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    with Ledger(path) as book:
        yield book

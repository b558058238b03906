"""Chaos tests on a real broker: a private RabbitMQ node, a faulty network, agent processes.

``PrivateBroker`` is a RabbitMQ node of the test's own (its own name, ports, cookie and
data, from the installed ``rabbitmq-server``) to kill, restart, or stop and start;
``PrivateCluster`` is several such nodes forming one cluster, each to kill or stop;
``ChaosProxy`` is a TCP proxy that stalls, cuts, slows or refuses; ``AgentLauncher`` runs
agents as OS processes, to SIGKILL, SIGTERM or SIGSTOP. ``Ledger`` records what producers
sent and what agents did, and reports what was lost or done twice::

    with PrivateBroker() as broker, Ledger(tmp_path / "ledger.db") as ledger:
        async with ChaosProxy("127.0.0.1", broker.port) as proxy:
            ...  # connect to proxy.url(), cut it, kill the node, record sends and effects
        report = await ledger.check(url=broker.url, queues=[...])
        assert report.is_clean

The pytest plugin ``agentbus.testing.chaos.pytest_plugin`` offers them as the fixtures
``private_broker``, ``chaos_proxy``, ``agent_process`` and ``ledger``. It is opt-in: list
it in ``pytest_plugins`` of the ``conftest.py`` at the root of your tests, or pass
``-p agentbus.testing.chaos.pytest_plugin``. For tests without a broker, see the
in-memory bus of ``agentbus.testing``.
"""

from agentbus.testing.chaos._ledger import (
    LEDGER_ENV,
    Ledger,
    LedgerReport,
    QueueDepth,
    SendOutcome,
    queue_depths,
)
from agentbus.testing.chaos._node_layout import find_rabbitmq
from agentbus.testing.chaos._private_cluster import ClusterState, PrivateCluster
from agentbus.testing.chaos._private_node import (
    BrokerState,
    PrivateBroker,
    PrivateBrokerError,
    TlsListener,
)
from agentbus.testing.chaos._processes import AgentLauncher, AgentProcess
from agentbus.testing.chaos._proxy import ChaosProxy, ProxyState

__all__ = [
    "LEDGER_ENV",
    "AgentLauncher",
    "AgentProcess",
    "BrokerState",
    "ChaosProxy",
    "ClusterState",
    "Ledger",
    "LedgerReport",
    "PrivateBroker",
    "PrivateBrokerError",
    "PrivateCluster",
    "ProxyState",
    "QueueDepth",
    "SendOutcome",
    "TlsListener",
    "find_rabbitmq",
    "queue_depths",
]

"""Transport on aio-pika: topology, confirmed publishing, acked consuming, requests and events.

Also the one way agentbus opens a connection (``open_connection``: the bus, the audit
reader and the chaos kit use it) and the audit stream's reader (``read_audit``).
"""

from typing import TYPE_CHECKING

from agentbus._topology import Topology, reply_routing_key, routing_key, topic_matches
from agentbus.bus._artifacts import (
    Artifact,
    Artifacts,
    artifact_scope,
    put_artifact,
    reader_of,
)
from agentbus.bus._feed import DEFAULT_FEED_LENGTH, Feed, FeedHandler, FeedState, FeedStats
from agentbus.bus._hooks import Journal
from agentbus.bus._lease import Lease, LeaseState
from agentbus.bus._options import PublishOptions
from agentbus.bus._pending import ProgressCallback, QuestionHandler
from agentbus.bus._protocol import Transport
from agentbus.bus._rabbitmq._artifact_stream import StreamArtifactStore
from agentbus.bus._rabbitmq._audit_stream import read_audit
from agentbus.bus._rabbitmq._bus import Bus, connect
from agentbus.bus._rabbitmq._connection import open_connection
from agentbus.bus._rabbitmq._dead_letters import DeadLetter, DeadLetters, Settled
from agentbus.bus._redelivery import ack_after, redelivered, reply_address
from agentbus.bus._routes import EventHandler, RequestHandler
from agentbus.bus._stats import BusState, BusStats, LatencyObserver
from agentbus.bus._stores._artifact_store import ArtifactStore
from agentbus.bus._stores._dedup import DedupStore, DedupWindow, SharedDedupStore
from agentbus.bus._stores._redis_dedup import DedupUnavailable, RedisDedupStore
from agentbus.bus._stores._s3_artifacts import S3ArtifactStore
from agentbus.bus._stores._sqlite_dedup import SqliteDedupStore
from agentbus.bus._trace import current_trace
from agentbus.security import Refusal, verifies_sender

__all__ = [
    "DEFAULT_FEED_LENGTH",
    "Artifact",
    "ArtifactStore",
    "Artifacts",
    "Bus",
    "BusState",
    "BusStats",
    "DeadLetter",
    "DeadLetters",
    "DedupStore",
    "DedupUnavailable",
    "DedupWindow",
    "EventHandler",
    "Feed",
    "FeedHandler",
    "FeedState",
    "FeedStats",
    "Journal",
    "LatencyObserver",
    "Lease",
    "LeaseState",
    "ProgressCallback",
    "PublishOptions",
    "QuestionHandler",
    "RedisDedupStore",
    "Refusal",
    "RequestHandler",
    "S3ArtifactStore",
    "Settled",
    "SharedDedupStore",
    "SqliteDedupStore",
    "StreamArtifactStore",
    "Topology",
    "Transport",
    "ack_after",
    "artifact_scope",
    "connect",
    "current_trace",
    "open_connection",
    "put_artifact",
    "read_audit",
    "reader_of",
    "redelivered",
    "reply_address",
    "reply_routing_key",
    "routing_key",
    "topic_matches",
    "verifies_sender",
]

if TYPE_CHECKING:  # mypy proves the RabbitMQ bus satisfies the transport seam.

    def _conforms(bus: Bus) -> Transport:
        return bus

"""What agentbus's own packages build a bus from: not public API, may change in any release.

The in-memory bus (``agentbus.testing``) is a bus of its own on the same base and the
same delivery seam as the RabbitMQ bus; it takes these names from here, not from the
bus's private modules.
"""

from agentbus.bus._base import BaseBus
from agentbus.bus._delivery import IncomingMessage
from agentbus.bus._options import publication
from agentbus.bus._stores._artifact_store import ArtifactStore, Placement, Tally, new_artifact_id

__all__ = [
    "ArtifactStore",
    "BaseBus",
    "IncomingMessage",
    "Placement",
    "Tally",
    "new_artifact_id",
    "publication",
]

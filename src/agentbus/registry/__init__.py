"""The registry agent: liveness from heartbeats, discovery, online/offline events; and
``ServiceDirectory``, a client's view of the live services and their cards, kept from it."""

from agentbus.registry._directory import ServiceDirectory
from agentbus.registry._registry import Registry
from agentbus.registry._table import AgentInfo, LivenessTable, Transition

__all__ = ["AgentInfo", "LivenessTable", "Registry", "ServiceDirectory", "Transition"]

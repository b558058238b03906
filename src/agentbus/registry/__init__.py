"""The registry agent: liveness from heartbeats, discovery, online/offline events."""

from agentbus.registry._registry import Registry
from agentbus.registry._table import AgentInfo, LivenessTable, Transition

__all__ = ["AgentInfo", "LivenessTable", "Registry", "Transition"]

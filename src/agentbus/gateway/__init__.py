"""The A2A gateway: the bus's agents as A2A agents over HTTP (needs the ``a2a`` extra).

``Gateway`` serves every live service as an A2A agent (cards, JSON-RPC, SSE streaming,
tasks); ``ApiKeys`` maps bearer keys to bus identities. ``RemoteA2AAgent`` puts an
external A2A agent on the bus.
"""

# First: the SDK reads whether to trace when it is first imported.
from agentbus.gateway import _sdk_tracing  # isort: skip
from agentbus._http import ApiKeys, Identity, keys_of
from agentbus.gateway._app import Gateway
from agentbus.gateway._cards import SCHEMAS_EXTENSION, SITES_EXTENSION, a2a_card
from agentbus.gateway._executor import PARTIAL_KEY
from agentbus.gateway._parts import SKILL_KEY
from agentbus.gateway._remote import RemoteA2AAgent
from agentbus.gateway._settings import GatewaySettings
from agentbus.gateway._workers import serve_workers

_sdk_tracing.unwrap()

__all__ = [
    "PARTIAL_KEY",
    "SCHEMAS_EXTENSION",
    "SITES_EXTENSION",
    "SKILL_KEY",
    "ApiKeys",
    "Gateway",
    "GatewaySettings",
    "Identity",
    "RemoteA2AAgent",
    "a2a_card",
    "keys_of",
    "serve_workers",
]

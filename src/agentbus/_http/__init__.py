"""What the HTTP faces (the A2A gateway, the MCP server, the dashboard) share, written once.

Not public API: the faces' own packages re-export what their users are shown. Who calls
(``ApiKeys``: bearer keys to bus identities, or ``anonymous``), the bus each caller's
requests go on (``Callers``, one per identity, each followed for its plans by a
``PlanWatch``), the settings every face takes (``HttpSettings``), serving in one process
or several (``Face``, ``serve_app``, ``run_workers``), and a skill known only by its JSON Schemas
(``SchemaSkill``: a remote agent's, a tool's). No protocol SDK is imported here: only
Starlette and, when serving, uvicorn.
"""

from agentbus._http._callers import Callers, Connect
from agentbus._http._keys import (
    ANONYMOUS,
    ApiKeys,
    Identity,
    KeyBackend,
    bearer_key,
    unauthorized,
)
from agentbus._http._plans import PlanWatch, PlanWatcher
from agentbus._http._serving import Face, Lifespan, handed_down, run_workers, serve_app
from agentbus._http._settings import HttpSettings, keys_of
from agentbus._http._skills import SchemaSkill

__all__ = [
    "ANONYMOUS",
    "ApiKeys",
    "Callers",
    "Connect",
    "Face",
    "HttpSettings",
    "Identity",
    "KeyBackend",
    "Lifespan",
    "PlanWatch",
    "PlanWatcher",
    "SchemaSkill",
    "bearer_key",
    "handed_down",
    "keys_of",
    "run_workers",
    "serve_app",
    "unauthorized",
]

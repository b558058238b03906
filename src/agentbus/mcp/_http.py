"""The team server over Streamable HTTP, behind the bearer API keys."""

from __future__ import annotations

from mcp.server.auth.settings import AuthSettings
from starlette.applications import Starlette

from agentbus._http import ApiKeys
from agentbus.mcp._auth import KeyVerifier
from agentbus.mcp._server import TeamServer

__all__ = ["http_app"]


def http_app(team: TeamServer, keys: ApiKeys) -> Starlette:
    """Return the ASGI app serving ``team`` at its settings' ``path`` (serve it with uvicorn,
    lifespan on: the app's lifespan runs the SDK's session manager).

    Every request needs ``Authorization: Bearer <key>`` of ``keys`` (the SDK's bearer
    middleware answers 401 otherwise), unless ``keys`` allows anonymous callers. With
    several ``workers`` in the settings, the endpoint keeps no sessions (stateless).
    """
    config = team.config
    stateless = config.workers > 1
    if keys.allow_anonymous:
        return team.server.streamable_http_app(
            streamable_http_path=config.path, host=config.host, stateless_http=stateless
        )
    # The SDK's bearer middleware, with no OAuth routes (no provider) and no resource
    # metadata: the keys are checked as bearer tokens. The issuer it requires is unused.
    issuer = f"http://{config.host}:{config.port}"
    auth = AuthSettings(issuer_url=issuer, resource_server_url=None)  # type: ignore[arg-type]
    return team.server.streamable_http_app(
        streamable_http_path=config.path,
        host=config.host,
        stateless_http=stateless,
        auth=auth,
        token_verifier=KeyVerifier(keys),
    )

"""Who calls over HTTP: the API keys (``agentbus._http``), checked by the MCP SDK's bearer
middleware."""

from __future__ import annotations

import hashlib
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext

from agentbus._http import ANONYMOUS, ApiKeys

__all__ = ["KeyVerifier", "caller_of"]


class KeyVerifier:
    """The SDK's ``TokenVerifier`` over API keys: a known key is its identity's token."""

    def __init__(self, keys: ApiKeys) -> None:
        self._keys = keys

    def __repr__(self) -> str:
        return f"<KeyVerifier keys={len(self._keys)}>"

    async def verify_token(self, token: str) -> AccessToken | None:
        """Return the access of ``token``'s identity (its ``client_id``), or None."""
        identity = self._keys.identify(token.strip())
        if identity is None:
            return None
        # The token itself is not kept: its digest tells sessions apart as well.
        digest = hashlib.sha256(token.encode()).hexdigest()
        return AccessToken(token=digest, client_id=identity.name, scopes=[])


def caller_of(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Return the HTTP caller's identity, or None for a call that came over stdio."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    user = scope.get("user")
    return user.access_token.client_id if isinstance(user, AuthenticatedUser) else ANONYMOUS

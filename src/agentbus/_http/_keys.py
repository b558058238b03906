"""Bearer API keys: each key maps to a bus identity; unknown keys get 401 before the bus.

The keys file is a JSON object, key -> identity (or ``{"identity": ..., "url": ...}``, the
broker URL to speak as that identity). Without keys, a face may let every caller in as
the identity ``anonymous`` (for local use only).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
    SimpleUser,
)
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response

from agentbus._exceptions import ConfigurationError

__all__ = ["ANONYMOUS", "ApiKeys", "Identity", "KeyBackend", "bearer_key", "unauthorized"]

ANONYMOUS = "anonymous"
"""The identity of every caller when a face runs without keys."""
_ID = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a key stands for on the bus, and optionally the broker URL to speak as them."""

    name: str
    url: str | None = None


class ApiKeys:
    """Keys to identities; keys are held only as SHA-256 digests."""

    def __init__(self, keys: Mapping[str, Identity], *, allow_anonymous: bool = False) -> None:
        self._by_digest = {_digest(key): identity for key, identity in keys.items()}
        self._by_name = {identity.name: identity for identity in keys.values()}
        self.allow_anonymous = allow_anonymous and not keys

    def __len__(self) -> int:
        return len(self._by_digest)

    @classmethod
    def from_mapping(cls, data: Any, *, allow_anonymous: bool = False) -> ApiKeys:
        """Read ``{key: identity}`` or ``{key: {"identity": ..., "url": ...}}``.

        Raises:
            ConfigurationError: the mapping is malformed or names an invalid identity.
        """
        if not isinstance(data, dict):
            raise ConfigurationError("API keys must be a JSON object: key -> identity")
        keys: dict[str, Identity] = {}
        for key, value in data.items():
            entry = {"identity": value} if isinstance(value, str) else value
            if not isinstance(entry, dict) or not isinstance(entry.get("identity"), str):
                raise ConfigurationError("each API key maps to an identity or {identity, url}")
            name = entry["identity"]
            if not _ID.match(name):
                raise ConfigurationError(f"identity {name!r} is not [A-Za-z0-9_-]{{1,100}}")
            if len(key) < 16:
                raise ConfigurationError(f"the key of {name!r} is shorter than 16 characters")
            url = entry.get("url")
            keys[key] = Identity(name, url if isinstance(url, str) else None)
        return cls(keys, allow_anonymous=allow_anonymous)

    @classmethod
    def from_file(cls, path: str | Path, *, allow_anonymous: bool = False) -> ApiKeys:
        """Read keys from a JSON file (see ``from_mapping``).

        Raises:
            ConfigurationError: the file cannot be read or is malformed.
        """
        try:
            data = orjson.loads(Path(path).read_bytes())
        except OSError as exc:
            raise ConfigurationError(f"cannot read API keys from {path}: {exc.strerror}") from exc
        except orjson.JSONDecodeError as exc:
            raise ConfigurationError(f"API keys file {path} is not JSON: {exc}") from exc
        return cls.from_mapping(data, allow_anonymous=allow_anonymous)

    def named(self, name: str) -> Identity:
        """Return the identity called ``name`` (``anonymous`` when keys are off)."""
        return self._by_name.get(name) or Identity(name)

    def identify(self, key: str) -> Identity | None:
        """Return the identity of ``key``, or None for an unknown key."""
        return self._by_digest.get(_digest(key))


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def bearer_key(authorization: str) -> str:
    """Return the key of an ``Authorization: Bearer <key>`` header's value; "" for another
    scheme or no key."""
    scheme, _, key = authorization.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


class KeyBackend(AuthenticationBackend):
    """Starlette authentication: ``Authorization: Bearer <key>`` on every non-public path."""

    def __init__(self, keys: ApiKeys, is_public: Any) -> None:
        self._keys = keys
        self._is_public = is_public

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
        if self._is_public(conn.scope):
            return None
        if self._keys.allow_anonymous:
            return AuthCredentials(["authenticated"]), SimpleUser(ANONYMOUS)
        key = bearer_key(conn.headers.get("authorization", ""))
        if not key:
            raise AuthenticationError("missing API key: send Authorization: Bearer <key>")
        identity = self._keys.identify(key)
        if identity is None:
            raise AuthenticationError("unknown API key")
        return AuthCredentials(["authenticated"]), SimpleUser(identity.name)


def unauthorized(conn: HTTPConnection, exc: AuthenticationError) -> Response:
    """Answer 401 with a JSON-RPC error body; nothing reaches the bus."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": str(exc)}}
    return JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})

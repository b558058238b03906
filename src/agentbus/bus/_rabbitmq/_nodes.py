"""Broker nodes: one URL, or a cluster's nodes in kombu's ``;``-separated form."""

from __future__ import annotations

from typing import Final
from urllib.parse import SplitResult, urlsplit, urlunsplit

from agentbus._config import mask_url
from agentbus._exceptions import ConfigurationError

__all__ = ["broker_nodes"]

_SCHEMES: Final = ("amqp", "amqps")


def broker_nodes(url: str) -> tuple[str, ...]:
    """Return the full AMQP URL of each node that ``url`` names, in order.

    ``url`` is one URL or several joined by ``;``, as kombu takes them, e.g.
    ``amqp://user:pw@rabbit-1:5672/prod;rabbit-2:5672;rabbit-3``. A node after the
    first may leave out the scheme, the credentials, the virtual host and the query:
    it takes the first node's.

    Raises:
        ConfigurationError: a node is empty, has no host, or is not ``amqp://`` or
            ``amqps://``.
    """
    parts = [part.strip() for part in url.split(";")]
    if not parts[0]:
        raise ConfigurationError(f"broker URL {mask_url(url)!r} names no node")
    first = _split(parts[0], default_scheme=None)
    nodes = [urlunsplit(first)]
    for part in parts[1:]:
        if not part:
            raise ConfigurationError(f"broker URL {mask_url(url)!r} has an empty node")
        nodes.append(urlunsplit(_inherit(_split(part, default_scheme=first.scheme), first)))
    return tuple(nodes)


def _split(node: str, *, default_scheme: str | None) -> SplitResult:
    if "://" not in node and default_scheme is not None:
        node = f"{default_scheme}://{node}"
    try:
        parts = urlsplit(node)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ConfigurationError(f"broker URL {mask_url(node)!r} is not valid: {exc}") from exc
    if parts.scheme not in _SCHEMES:
        raise ConfigurationError(
            f"broker URL {mask_url(node)!r} is not amqp:// or amqps:// "
            f"(RabbitMQ's AMQP port, e.g. amqp://guest:guest@localhost:5672/)"
        )
    if not parts.hostname:
        raise ConfigurationError(f"broker URL {mask_url(node)!r} names no host")
    return parts


def _inherit(node: SplitResult, first: SplitResult) -> SplitResult:
    netloc = node.netloc
    if "@" not in netloc and "@" in first.netloc:
        netloc = f"{first.netloc.rpartition('@')[0]}@{netloc}"
    return node._replace(
        netloc=netloc,
        path=node.path or first.path,
        query=node.query or first.query,
    )

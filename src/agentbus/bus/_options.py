"""How an envelope is published: the options every publish takes, defined once."""

from __future__ import annotations

from typing import NamedTuple, TypedDict

__all__ = ["Publication", "PublishOptions", "publication"]


class PublishOptions(TypedDict, total=False):
    """How ``publish`` sends an envelope; every key may be left out."""

    reply_to: str | None
    """The queue its answer goes to (default: none)."""
    persistent: bool
    """Written to disk by the broker, surviving its restart (default: true)."""
    ttl: float | None
    """Seconds before the broker drops it unconsumed (default: no limit)."""
    timeout: float | None
    """Seconds to wait for the broker's confirm (default: the ``request_timeout`` setting)."""
    mandatory: bool
    """A message no queue is bound for raises ``Unroutable``, not dropped (default: true)."""
    exchange: str | None
    """The exchange to publish on instead of the bus's topic exchange (a site's outbox)."""
    confirm: bool
    """Wait for the broker's confirm, and publish again through a reconnect (default:
    true). False: written on a channel without confirms and not waited for, for what
    costs nothing if a reconnect loses it; never ``mandatory`` then (aiormq does not pass
    on a return on such a channel)."""


class Publication(NamedTuple):
    """The options of one publish, with the defaults filled in."""

    reply_to: str | None
    persistent: bool
    ttl: float | None
    timeout: float | None
    mandatory: bool
    confirm: bool


def publication(options: PublishOptions) -> Publication:
    """Return ``options`` with the defaults filled in: the one place they are set."""
    return Publication(
        options.get("reply_to"),
        options.get("persistent", True),
        options.get("ttl"),
        options.get("timeout"),
        options.get("mandatory", True),
        options.get("confirm", True),
    )

"""A lease: one holder at a time among the buses that ask for it, kept by the broker.

On RabbitMQ it is a queue with a single active consumer (``x-single-active-consumer``)
and one token message in it: the broker delivers to one consumer only, the active one,
and a consumer learns it is active when the token comes; it holds it unacknowledged.
When its holder goes (its channel or connection closes, ``kill -9`` included), the
broker makes the next consumer active and gives it the token. The holder cycles the
token (a new one published, the old one acked) well within the broker's consumer
timeout. In memory, the ``MemoryBroker`` does the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from typing import Final, Protocol

from agentbus._exceptions import AgentBusError, BusClosed, ConnectionLost
from agentbus._logging import get_logger

__all__ = ["RENEW_EVERY", "Lease", "LeaseHooks", "LeaseState"]

RENEW_EVERY: Final = 60.0
"""Seconds between two cycles of a held token: far within RabbitMQ's consumer timeout
(30 minutes by default), past which an unacknowledged delivery closes its channel."""

_log = get_logger("agentbus.bus")


class LeaseState(enum.Enum):
    """Where a lease stands for the bus that asked for it."""

    WAITING = "waiting"
    """Another bus holds it, or nobody yet: its token has not come here."""
    HELD = "held"
    """This bus holds it: the broker delivers the token to nobody else."""
    CLOSED = "closed"
    """Given up (``aclose``), or its bus closed."""


class LeaseHooks(Protocol):
    """What the broker does for a lease: prove it, cycle its token, give it up."""

    async def confirm(self) -> None:
        """Prove by a round trip that the token is still held here (raise if not)."""
        ...

    async def cycle(self) -> None:
        """Publish a new token, then acknowledge the one held."""
        ...

    async def close(self) -> None:
        """Stop consuming: a held token goes to the next consumer."""
        ...


class Lease:
    """One holder at a time among the buses that asked for the lease ``name``.

    ``await lease.acquired()`` waits until this bus holds it; ``await lease.lost()``
    until it no longer does (its connection went: the broker gave the token to the
    next one; after a reconnect this bus waits in line again). Before an action that
    only the holder may take, ``await lease.confirm()`` proves the lease is still held
    by a round trip to the broker. ``aclose`` gives it up.
    """

    def __init__(self, name: str, *, renew_every: float = RENEW_EVERY) -> None:
        self.name = name
        self.grants = 0
        """How many times the lease came to this bus."""
        self._renew_every = renew_every
        self._state = LeaseState.WAITING
        self._held = asyncio.Event()
        self._free = asyncio.Event()
        self._free.set()
        self._hooks: LeaseHooks | None = None
        self._renewing: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<Lease name={self.name!r} state={self._state.value} grants={self.grants}>"

    @property
    def state(self) -> LeaseState:
        """Where the lease stands here."""
        return self._state

    @property
    def is_held(self) -> bool:
        """Whether this bus holds the lease (as far as it has heard)."""
        return self._state is LeaseState.HELD

    async def acquired(self) -> None:
        """Wait until this bus holds the lease.

        Raises:
            BusClosed: the lease was given up, or its bus closed.
        """
        while self._state is not LeaseState.HELD:
            if self._state is LeaseState.CLOSED:
                raise BusClosed(f"lease {self.name!r} was given up")
            await self._held.wait()

    async def lost(self) -> None:
        """Wait until this bus no longer holds the lease."""
        await self._free.wait()

    async def confirm(self) -> None:
        """Prove the lease is held now, by a round trip to the broker on its channel.

        Raises:
            ConnectionLost: it is not held (any more).
        """
        if self._state is not LeaseState.HELD or self._hooks is None:
            raise ConnectionLost(f"lease {self.name!r} is not held here")
        try:
            await self._hooks.confirm()
        except AgentBusError:
            self._revoke()
            raise
        if self._state is not LeaseState.HELD:
            raise ConnectionLost(f"lease {self.name!r} went during the check")

    async def aclose(self) -> None:
        """Give the lease up: the next bus in line gets it."""
        if self._state is LeaseState.CLOSED:
            return
        self._set(LeaseState.CLOSED)
        self._stop_renewing()
        if self._hooks is not None:
            with contextlib.suppress(AgentBusError, OSError):
                await self._hooks.close()

    # The broker's side.

    def _attach(self, hooks: LeaseHooks) -> None:
        self._hooks = hooks

    def _grant(self) -> None:
        """The token came: this bus holds the lease (again, after a cycle)."""
        if self._state is not LeaseState.WAITING:
            return
        self.grants += 1
        self._set(LeaseState.HELD)
        self._renewing = asyncio.create_task(self._renew())
        _log.info("lease held", lease=self.name, grants=self.grants)

    def _revoke(self) -> None:
        """The token's channel closed: no longer held here."""
        if self._state is not LeaseState.HELD:
            return
        self._set(LeaseState.WAITING)
        self._stop_renewing()
        _log.info("lease lost", lease=self.name)

    def _set(self, state: LeaseState) -> None:
        self._state = state
        if state is LeaseState.HELD:
            self._free.clear()
            self._held.set()
        else:
            self._held.clear()
            self._free.set()
            if state is LeaseState.CLOSED:
                self._held.set()  # wakes acquired(), which raises

    def _stop_renewing(self) -> None:
        if self._renewing is not None and self._renewing is not asyncio.current_task():
            self._renewing.cancel()
        self._renewing = None

    async def _renew(self) -> None:
        while self._state is LeaseState.HELD and self._hooks is not None:
            await asyncio.sleep(self._renew_every)
            try:
                await self._hooks.cycle()
            except AgentBusError as exc:
                _log.warning("lease token not cycled", lease=self.name, error=str(exc))

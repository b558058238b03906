"""Free TCP ports on 127.0.0.1, for servers a test starts."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports free on 127.0.0.1 right now."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 right now."""
    (port,) = free_ports(1)
    return port

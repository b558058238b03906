"""An ASGI app served by uvicorn in the test's own event loop (needs uvicorn: an extra)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal


async def start_uvicorn(
    app: Any, port: int, *, lifespan: Literal["on", "off"] = "off"
) -> tuple[Any, asyncio.Task[None]]:
    """Serve ``app`` on 127.0.0.1:``port`` with uvicorn in this loop; return it once started."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan=lifespan, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:
            if serving.done():
                serving.result()
            await asyncio.sleep(0.01)
    return server, serving


async def stop_uvicorn(server: Any, serving: asyncio.Task[None], *, force: bool = False) -> None:
    """Stop a server ``start_uvicorn`` started (``force``: drop open connections at once)."""
    server.should_exit = True
    server.force_exit = force
    await serving

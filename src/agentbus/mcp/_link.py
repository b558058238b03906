"""A link to an MCP server: one SDK client session, held open in a task of its own.

The SDK's client keeps task groups that must be left by the task that entered them; a
bus agent starts and stops from whichever task runs it, so the session lives in a task
of the link's, and calls are made on it from any task.

The server's elicitations go to the call that is asked: a 2026-07-28 server asks inside
the call's own exchange (``InputRequiredResult``), which the SDK answers in the call's
task, so the call's handler is found in its context; a 2025 server sends
``elicitation/create`` on its own, naming no call, so it goes to the one call waiting
with a handler (with several, none can be told: the elicitation is refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agentbus._exceptions import AgentBusError
from agentbus._logging import get_logger
from agentbus.envelopes import ErrorCode

__all__ = ["Elicit", "McpLink", "McpTarget"]

Elicit = Callable[[types.ElicitRequestParams], Awaitable[types.ElicitResult]]
"""Answers an elicitation of the server during one call."""

_log = get_logger("agentbus.mcp")
_FIRST_PAUSE: Final = 0.2  # seconds between tries to connect, doubling
_MAX_PAUSE: Final = 2.0
_HTTP_TIMEOUT: Final = httpx2.Timeout(30.0, read=300.0)
_GONE: Final = (
    httpx2.HTTPError,
    OSError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
)
"""What a call raises when its server went away."""
_eliciting: contextvars.ContextVar[Elicit | None] = contextvars.ContextVar(
    "agentbus_mcp_eliciting", default=None
)


@dataclass(frozen=True, slots=True)
class McpTarget:
    """Where an MCP server is: a command to start (stdio), or a URL (Streamable HTTP)."""

    command: list[str] = field(default_factory=list)
    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    """Set for the command, beside the SDK's safe defaults (``PATH``, ``HOME``, ...)."""
    cwd: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every HTTP request (``Authorization: Bearer ...``)."""
    mode: str = "auto"
    """The protocol era: ``auto`` (2026-07-28 where the server offers it, else the 2025
    handshake), or ``legacy`` (the 2025 handshake)."""

    def __post_init__(self) -> None:
        if (self.url is None) == (not self.command):
            raise ValueError("an MCP target is a command or a URL, not both or neither")

    def __str__(self) -> str:
        return self.url or " ".join(self.command)

    @classmethod
    def of(cls, words: list[str] | tuple[str, ...], **options: Any) -> McpTarget:
        """A URL when ``words`` is one ``http(s)://`` word, else a command and its arguments."""
        if len(words) == 1 and words[0].startswith(("http://", "https://")):
            return cls(url=words[0], **options)
        return cls(command=list(words), **options)

    @contextlib.asynccontextmanager
    async def session(self, elicit: ElicitationFnT | None = None) -> AsyncIterator[Client]:
        """Open an SDK client session with the server (and its HTTP client, for a URL);
        ``elicit`` answers its elicitations (None: the client declares none)."""
        if self.url is None:
            command, *args = self.command
            server = StdioServerParameters(command=command, args=args, env=self.env, cwd=self.cwd)
            async with Client(server, mode=self.mode, elicitation_callback=elicit) as client:
                yield client
            return
        async with (
            httpx2.AsyncClient(headers=self.headers, timeout=_HTTP_TIMEOUT) as http,
            Client(
                streamable_http_client(self.url, http_client=http),
                mode=self.mode,
                elicitation_callback=elicit,
            ) as client,
        ):
            yield client


class McpLink:
    """One open session with an MCP server; ``open`` it, call tools, ``aclose`` it."""

    def __init__(self, target: McpTarget) -> None:
        self.target = target
        self.tools: list[types.Tool] = []
        self.server_info: types.Implementation | None = None
        self._client: Client | None = None
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._eliciting: dict[int, Elicit] = {}
        self._calls = 0

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"<McpLink {self.target} {state} tools={len(self.tools)}>"

    @property
    def is_open(self) -> bool:
        """Whether the session is up (the server has not gone, the link not closed)."""
        return self._client is not None and self._task is not None and not self._task.done()

    @classmethod
    async def open(cls, target: McpTarget, *, wait: float = 0.0) -> McpLink:
        """Connect to ``target`` and list its tools.

        ``wait``: seconds to keep trying while the server does not answer yet (one
        started just before, say), backing off from 0.2 s to 2 s between tries.

        Raises:
            AgentBusError: the server cannot be reached (``agent_unavailable``).
        """
        deadline = asyncio.get_running_loop().time() + wait
        pause = _FIRST_PAUSE
        while True:
            link = cls(target)
            try:
                await link._start()
                return link
            except AgentBusError:
                if asyncio.get_running_loop().time() + pause > deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, _MAX_PAUSE)

    async def _start(self) -> None:
        self._task = asyncio.create_task(self._hold())
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            await self.aclose()
            raise

    async def _hold(self) -> None:
        try:
            async with self.target.session(self._elicit) as client:
                self.server_info = client.server_info
                self.tools = await _all_tools(client)
                self._client = client
                self._ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:  # the SDK's and the transport's errors alike
            if not self._ready.done():
                self._ready.set_exception(
                    AgentBusError(
                        f"no MCP server at {self.target}: {_reason(exc)}",
                        code=ErrorCode.AGENT_UNAVAILABLE,
                    )
                )
            else:
                _log.warning("MCP session lost", target=str(self.target), error=_reason(exc))
        finally:
            self._client = None

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        progress: Any = None,
        elicit: Elicit | None = None,
    ) -> types.CallToolResult:
        """Call the tool ``name``; ``progress(progress, total, message)`` hears its progress,
        ``elicit`` answers the server's elicitations during the call (None: they are refused).

        Raises:
            AgentBusError: ``agent_unavailable`` when the server is gone (or goes during
                the call), ``invalid_parameters`` when it refuses the arguments,
                ``timeout`` when it did not answer in time, else ``processing_failed``.
        """
        client = self._client
        if client is None or not self.is_open:
            raise AgentBusError(
                f"the MCP server at {self.target} is gone", code=ErrorCode.AGENT_UNAVAILABLE
            )
        self._calls += 1
        number = self._calls
        if elicit is not None:
            self._eliciting[number] = elicit
        context = _eliciting.set(elicit)
        try:
            return await client.call_tool(name, arguments, progress_callback=progress)
        except MCPError as exc:
            raise AgentBusError(
                f"the MCP server at {self.target} failed: {exc.error.message}",
                code=_code(exc.error.code),
                details={"mcp_code": exc.error.code},
            ) from exc
        except _GONE as exc:
            raise AgentBusError(
                f"the MCP server at {self.target} is gone: {_reason(exc)}",
                code=ErrorCode.AGENT_UNAVAILABLE,
            ) from exc
        finally:
            _eliciting.reset(context)
            self._eliciting.pop(number, None)

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        # In the call's context (2026-07-28), else the one call that waits with a handler.
        elicit = _eliciting.get()
        if elicit is None and len(self._eliciting) == 1:
            elicit = next(iter(self._eliciting.values()))
        if elicit is None:
            waiting = len(self._eliciting)
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"agentbus cannot tell which of its {waiting} calls this elicitation is for"
                if waiting
                else "no call of agentbus takes an elicitation now",
            )
        return await elicit(params)

    async def aclose(self) -> None:
        """End the session (a command's process is stopped)."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def _all_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            return tools


def _code(mcp_code: int) -> str:
    if mcp_code == types.INVALID_PARAMS:
        return ErrorCode.INVALID_PARAMETERS
    if mcp_code == types.CONNECTION_CLOSED:
        return ErrorCode.AGENT_UNAVAILABLE
    if mcp_code == types.REQUEST_TIMEOUT:
        return ErrorCode.TIMEOUT
    return ErrorCode.PROCESSING_FAILED


def _reason(exc: BaseException) -> str:
    # An exception group (the SDK's task groups) says little: its first leaf says more.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__

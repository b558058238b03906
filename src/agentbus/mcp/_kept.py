"""run-mcp's calls kept open while a remote server's elicitation waits for a bus answer.

An MCP server that elicits waits inside its session for the answer, so the answer must
come back to this process. The call runs in a task of its own, kept by the agent instance
(``KeptCalls``) under the bus request that began it, and the skill follows it
(``follow``): each elicitation is asked of the bus caller with ``agentbus.ask(...,
here=True)`` (its answer comes to this instance), which ends the skill's run. The answer
runs the skill again from the top: it finds the kept call, each ``ask`` returns its answer
so far (the answers already handed over are handed over again, to no effect), the newest
answer goes to the waiting elicitation, and the skill follows the call again, to its next
elicitation or its end.

A kept call nobody follows (its question waits) is cancelled and forgotten after
``answer_within`` seconds, the wait its questions are asked with: the memory it holds is
bounded. Form mode is asked as an object of the form's schema (``_forms.answer_type``),
URL mode as a yes-or-no ``auth`` question with the URL as its ``data``; a declined
question declines the elicitation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from agentbus._exceptions import QuestionDeclined
from agentbus.agents import ask, report_progress
from agentbus.mcp._forms import answer_type

__all__ = ["KeptCall", "KeptCalls", "follow"]

Progress = tuple[float, float | None, str | None]
"""A progress notification of the call; None ends the reports of a call that ended."""
Start = Callable[["KeptCall"], Coroutine[Any, Any, types.CallToolResult]]


@dataclass(slots=True)
class _Elicitation:
    """One elicitation of the remote server, and the reply it waits for."""

    params: types.ElicitRequestParams
    reply: asyncio.Future[types.ElicitResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def give(self, result: types.ElicitResult) -> None:
        if not self.reply.done():
            self.reply.set_result(result)


class KeptCall:
    """One tool call of the remote server, kept while its elicitations wait for answers."""

    def __init__(self, key: str, calls: KeptCalls, start: Start) -> None:
        self.key = key
        self.elicitations: list[_Elicitation] = []
        self.reports: asyncio.Queue[Progress | None] = asyncio.Queue()
        self._calls = calls
        self._changed = asyncio.Event()
        self._expiry: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[types.CallToolResult] = asyncio.create_task(start(self))
        self.task.add_done_callback(lambda _: self._changed.set())

    def __repr__(self) -> str:
        state = "done" if self.task.done() else "running"
        return f"<KeptCall {self.key} {state} elicitations={len(self.elicitations)}>"

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        """The call's progress callback: told from the SDK's own task, reported by a run."""
        self.reports.put_nowait((progress, total, message))

    async def elicit(self, params: types.ElicitRequestParams) -> types.ElicitResult:
        """The call's elicitation callback: wait for a run of the skill to hand the reply."""
        elicitation = _Elicitation(params)
        self.elicitations.append(elicitation)
        self._changed.set()
        return await elicitation.reply

    async def next(self, turn: int) -> _Elicitation | None:
        """The elicitation ``turn`` (the first is 0), once it comes; None: the call ended."""
        while turn >= len(self.elicitations) and not self.task.done():
            self._changed.clear()
            await self._changed.wait()
        return self.elicitations[turn] if turn < len(self.elicitations) else None

    def follows(self, following: bool) -> None:
        """A run of the skill follows the call now, or has stopped following it: while
        none does, the call is forgotten after ``answer_within`` seconds."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if following:
            return
        if self.task.done():
            self._calls.forget(self.key)
        else:
            self._expiry = asyncio.get_running_loop().call_later(
                self._calls.answer_within, self.cancel
            )

    def cancel(self) -> None:
        """Stop the call (the SDK tells the server) and forget it."""
        for elicitation in self.elicitations:
            elicitation.give(types.ElicitResult(action="cancel"))
        self.task.cancel()
        self._calls.forget(self.key)


class KeptCalls:
    """One agent instance's remote calls kept while they wait for answers, by bus request."""

    def __init__(self, answer_within: float) -> None:
        self.answer_within = answer_within
        self._calls: dict[str, KeptCall] = {}

    def __repr__(self) -> str:
        return f"<KeptCalls {len(self._calls)}>"

    def __len__(self) -> int:
        return len(self._calls)

    def get(self, key: str) -> KeptCall | None:
        """The call kept under ``key``, if it still is."""
        return self._calls.get(key)

    def start(self, key: str, start: Start) -> KeptCall:
        """Start ``start(call)`` as the call kept under ``key``."""
        call = self._calls[key] = KeptCall(key, self, start)
        return call

    def forget(self, key: str) -> None:
        """Forget the call kept under ``key`` (done, cancelled or expired)."""
        self._calls.pop(key, None)

    async def aclose(self) -> None:
        """Cancel every kept call: the agent stops."""
        calls = list(self._calls.values())
        for call in calls:
            call.cancel()
        await asyncio.gather(*(call.task for call in calls), return_exceptions=True)


async def follow(call: KeptCall, within: float) -> types.CallToolResult:
    """From the skill: follow ``call`` to its end, asking the caller each elicitation.

    Its questions end this run (``ask``); the call stays kept for the answer's run.
    """
    pump = asyncio.create_task(_report(call.reports))
    call.follows(True)
    try:
        turn = 0
        while (elicitation := await call.next(turn)) is not None:
            elicitation.give(await _asked(elicitation.params, within))
            turn += 1
        call.reports.put_nowait(None)
        await pump  # every report goes out before the result
        return call.task.result()
    except asyncio.CancelledError:
        call.cancel()  # the bus request was cancelled: so is the remote call
        raise
    finally:
        pump.cancel()
        call.follows(False)


async def _asked(params: types.ElicitRequestParams, within: float) -> types.ElicitResult:
    # On a run after an answer, each elicitation already answered is asked again: ``ask``
    # returns its answer, and handing it over again does nothing.
    try:
        if isinstance(params, types.ElicitRequestURLParams):
            text = f"{params.message}\n\n{params.url}"
            data = {"url": params.url}
            agreed = await ask(text, bool, kind="auth", data=data, within=within, here=True)
            return types.ElicitResult(action="accept" if agreed else "decline")
        wanted = answer_type(params.requested_schema)
        content: dict[str, Any] = await ask(params.message, wanted, within=within, here=True)
    except QuestionDeclined:
        return types.ElicitResult(action="decline")
    return types.ElicitResult(action="accept", content=content)


async def _report(reports: asyncio.Queue[Progress | None]) -> None:
    # In the skill's task: progress reports go to the request this run serves.
    while (report := await reports.get()) is not None:
        progress, total, message = report
        fraction = progress / total if total and 0 <= progress <= total else None
        await report_progress(fraction, message or f"progress {progress:g}")

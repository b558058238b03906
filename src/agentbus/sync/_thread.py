"""An event loop in a daemon thread of its own, on which coroutines from any thread run."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, InvalidStateError
from functools import partial
from typing import Any, Final, TypeVar

from agentbus._exceptions import BusClosed, UsageError
from agentbus._logging import get_logger
from agentbus._loop import loop_factory

__all__ = ["LoopThread"]

T = TypeVar("T")

_CANCEL_GRACE: Final = 5.0  # seconds the calls cancelled by ``stop`` have to end
_log = get_logger("agentbus.sync")


class LoopThread:
    """One event loop, run by a daemon thread, for callers in any other thread.

    ``start`` runs a setup coroutine on the loop and returns once it has; ``submit`` runs
    a coroutine there, in a copy of the calling thread's context (so its structlog
    variables and OpenTelemetry span go with it), and returns a ``Future``; ``stop``
    fails the calls still running with ``BusClosed``, runs a teardown coroutine and ends
    the loop. Whatever is still waiting when the thread ends fails with ``BusClosed``: no
    caller waits on a loop that is gone.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ended: asyncio.Event | None = None
        self._pid = os.getpid()
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()  # touched on the loop only
        self._waiting: set[Future[Any]] = set()
        self._waiting_lock = threading.Lock()

    @property
    def calls(self) -> int:
        """How many submitted calls have not ended."""
        return len(self._waiting)

    def start(self, setup: Callable[[], Awaitable[None]]) -> None:
        """Start the thread and its loop, run ``setup`` there, and return when it has.

        Raises:
            Exception: what ``setup`` raised; the thread has ended then.
        """
        started: Future[None] = Future()
        self._pid = os.getpid()
        self._thread = threading.Thread(
            target=self._run, args=(setup, started), name=self.name, daemon=True
        )
        self._thread.start()
        try:
            started.result()
        except BaseException:
            self._thread.join()
            raise

    def submit(self, make: Callable[[], Awaitable[T]]) -> Future[T]:
        """Run the awaitable ``make()`` returns on the loop; its future, to wait on here.

        Cancelling the future cancels the call.

        Raises:
            BusClosed: the loop is stopping or has stopped.
            UsageError: called from the loop's own thread (it would wait on itself), or
                in a process forked from the one that started the loop.
        """
        loop = self.check_caller()
        if self._stopping:
            raise BusClosed("the client is closing")
        future: Future[T] = Future()
        context = contextvars.copy_context()
        with self._waiting_lock:
            self._waiting.add(future)
        future.add_done_callback(self._done_waiting)
        try:
            loop.call_soon_threadsafe(self._begin, make, future, context)
        except RuntimeError as exc:  # the loop closed meanwhile
            future.cancel()
            raise BusClosed("the client's loop has ended") from exc
        return future

    def stop(self, teardown: Callable[[], Awaitable[None]], *, timeout: float | None) -> None:
        """Fail the calls still running with ``BusClosed``, run ``teardown``, end the loop.

        Raises:
            Exception: what ``teardown`` raised (the loop has ended all the same).
        """
        loop = self.check_caller()
        self._stopping = True
        finished: Future[None] = Future()
        try:
            loop.call_soon_threadsafe(self._begin, partial(self._finish, teardown), finished, None)
            finished.result(timeout)
        finally:
            if self._ended is not None:
                loop.call_soon_threadsafe(self._ended.set)
            self.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (at once if it never started or has ended)."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def forked(self) -> bool:
        """Whether this is a process forked from the one that started the loop (its
        thread is not here)."""
        return os.getpid() != self._pid

    def check_caller(self) -> asyncio.AbstractEventLoop:
        """The loop, for a call from this thread.

        Raises:
            UsageError: called from the loop's own thread, or in a forked process.
            BusClosed: the loop is not running.
        """
        if self.forked:
            raise UsageError(
                "this client was opened in another process (before a fork): "
                "open one in each process, after it starts"
            )
        if self._thread is threading.current_thread():
            raise UsageError(
                "a blocking call from the client's own event loop would wait on itself: "
                "await the bus there instead"
            )
        if self._loop is None:
            raise BusClosed("the client's loop is not running")
        return self._loop

    def _run(self, setup: Callable[[], Awaitable[None]], started: Future[None]) -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                runner.run(self._main(setup, started))
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
                return
            _log.error("the client's loop ended", error=repr(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._loop = None
            self._fail_waiting()

    async def _main(self, setup: Callable[[], Awaitable[None]], started: Future[None]) -> None:
        await setup()
        self._ended = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        started.set_result(None)
        await self._ended.wait()

    def _begin(
        self,
        make: Callable[[], Awaitable[T]],
        future: Future[T],
        context: contextvars.Context | None,
    ) -> None:
        # On the loop: the call starts, unless it was cancelled while it came.
        if future.cancelled():
            return
        task = asyncio.get_running_loop().create_task(_awaited(make), context=context)
        self._tasks.add(task)
        task.add_done_callback(partial(self._settle, future))
        future.add_done_callback(partial(_cancel_with, task))

    def _settle(self, future: Future[T], task: asyncio.Task[T]) -> None:
        self._tasks.discard(task)
        if future.cancelled():
            return
        if task.cancelled():
            if self._stopping:
                _fail(future, BusClosed("the client closed while the call waited"))
            else:
                future.cancel()
            return
        error = task.exception()
        if error is not None:
            _fail(future, error)
        else:
            with contextlib.suppress(InvalidStateError):  # cancelled by its caller meanwhile
                future.set_result(task.result())

    async def _finish(self, teardown: Callable[[], Awaitable[None]]) -> None:
        current = asyncio.current_task()
        calls = {task for task in self._tasks if task is not current}
        for task in calls:
            task.cancel()
        if calls:
            await asyncio.wait(calls, timeout=_CANCEL_GRACE)
        await teardown()

    def _done_waiting(self, future: Future[Any]) -> None:
        with self._waiting_lock:
            self._waiting.discard(future)

    def _fail_waiting(self) -> None:
        with self._waiting_lock:
            left = list(self._waiting)
        for future in left:
            _fail(future, BusClosed("the client's loop has ended"))


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


def _cancel_with(task: asyncio.Task[Any], future: Future[Any]) -> None:
    # In the thread that cancelled ``future`` (or settled it): cancel its task on the loop.
    if future.cancelled() and not task.done():
        with contextlib.suppress(RuntimeError):  # the loop has closed: the task went with it
            task.get_loop().call_soon_threadsafe(task.cancel)


def _fail(future: Future[Any], error: BaseException) -> None:
    with contextlib.suppress(InvalidStateError):  # cancelled by its caller meanwhile
        future.set_exception(error)

"""What a blocking call's callbacks are handed to: the thread that waits on the call."""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from agentbus._exceptions import QuestionDeclined
from agentbus.bus import QuestionHandler
from agentbus.envelopes import Question

__all__ = ["Inbox"]

T = TypeVar("T")
A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class _Callback(Generic[A]):
    callback: Callable[[A], Any]
    argument: A
    answer: Future[Any] | None  # a question's: the loop awaits it

    def run(self) -> None:
        if self.answer is None:
            self.callback(self.argument)
            return
        try:
            value = self.callback(self.argument)
        except QuestionDeclined as declined:  # an answer: the loop's side declines
            with contextlib.suppress(InvalidStateError):
                self.answer.set_exception(declined)
            return
        except BaseException:  # the caller's call ends with it (``wait``)
            self.answer.cancel()
            raise
        with contextlib.suppress(InvalidStateError):  # the question expired meanwhile
            self.answer.set_result(value)


class Inbox:
    """Carries one call's callbacks from the loop to the thread waiting on the call.

    A callback of a blocking call runs in the caller's thread, between its waits: never
    on the loop, which the client's other calls share (a person answering a question
    there would stop them all). ``progress`` and ``question`` make the loop's side of a
    callback; ``wait`` runs them as they come, in order, until the call ends.
    """

    def __init__(self) -> None:
        self._items: queue.SimpleQueue[_Callback[Any] | None] = queue.SimpleQueue()

    def progress(self, callback: Callable[[A], object]) -> Callable[[A], None]:
        """The loop's side of ``callback``: hands each value over, waits for nothing."""

        def hand_over(value: A) -> None:
            self._items.put(_Callback(callback, value, None))

        return hand_over

    def question(self, callback: Callable[[Question], Any]) -> QuestionHandler:
        """The loop's side of ``callback``: hands each question over and awaits its answer."""

        async def hand_over(question: Question) -> Any:
            answer: Future[Any] = Future()
            self._items.put(_Callback(callback, question, answer))
            return await asyncio.wrap_future(answer)

        return hand_over

    def wait(self, call: Future[T]) -> T:
        """Run the callbacks of ``call`` as they come, then return its result (or raise).

        Whatever a callback raises (but ``QuestionDeclined``, which declines the
        question) cancels the call and is raised here.
        """
        call.add_done_callback(lambda _: self._items.put(None))
        try:
            while (item := self._items.get()) is not None:
                item.run()
        except BaseException:
            call.cancel()
            raise
        return call.result()

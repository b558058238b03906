"""A leader's plan queues: an ended plan's queue serves the next, up to a bound."""

from __future__ import annotations

import asyncio
from typing import Any

from agentbus import ConnectionLost
from agentbus.leader._plan_queues import IDLE_MAX, PlanQueues


class Queues:
    """The two calls ``PlanQueues`` makes of a bus, recorded."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.deleted: list[str] = []
        self.released: list[str] = []

    async def reply_queue(self, name: str, **options: Any) -> Any:
        assert options == {"hold": True, "exclusive": True}
        self.opened.append(name)

        async def stop(delete: bool) -> None:
            if delete:
                self.deleted.append(name)

        return stop

    def release_all(self, name: str) -> int:
        self.released.append(name)
        return 0


async def test_a_queue_given_back_is_taken_next_and_the_idle_ones_are_bounded() -> None:
    bus = Queues()
    queues = PlanQueues(bus)  # type: ignore[arg-type]
    taken = [await queues.take() for _ in range(IDLE_MAX + 2)]
    for name, stop in taken:
        queues.give_back(name, stop, _written())
    again = await queues.take()
    await queues.aclose()

    names = [name for name, _ in taken]
    assert bus.released == names  # what a queue held for its last plan went first
    assert again[0] == names[IDLE_MAX - 1]  # the last one kept, not a new one
    # Two over the bound went at once; the rest (and the one opened ahead) at the close.
    assert sorted(bus.deleted) == sorted(set(bus.opened) - {again[0]})
    assert len(bus.opened) == IDLE_MAX + 3


async def test_a_queue_waits_for_its_plan_s_end_to_be_written_and_stays_if_it_is_not() -> None:
    bus = Queues()
    queues = PlanQueues(bus)  # type: ignore[arg-type]
    (first, stop_first), (second, stop_second) = await queues.take(), await queues.take()
    ending = asyncio.get_running_loop().create_future()
    queues.give_back(first, stop_first, ending)
    failing = asyncio.get_running_loop().create_future()
    queues.give_back(second, stop_second, failing)
    waiting = (len(queues), list(bus.released))
    ending.set_result(None)
    failing.set_exception(ConnectionLost("the journal's write failed"))
    await asyncio.sleep(0)  # the callbacks
    await queues.aclose()

    assert waiting == (0, [])
    assert bus.released == [first]  # the failed one keeps what it holds for the next leader
    assert second not in bus.deleted  # nor is it deleted: it is the plan's, for whoever goes on


def _written() -> asyncio.Future[None]:
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done

"""A leader's plan queues: an ended plan's queue serves the next, up to a bound."""

from __future__ import annotations

from typing import Any

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
        queues.give_back(name, stop)
    again = await queues.take()
    await queues.aclose()

    names = [name for name, _ in taken]
    assert bus.released == names  # what a queue held for its last plan went first
    assert again[0] == names[IDLE_MAX - 1]  # the last one kept, not a new one
    # Two over the bound went at once; the rest (and the one opened ahead) at the close.
    assert sorted(bus.deleted) == sorted(set(bus.opened) - {again[0]})
    assert len(bus.opened) == IDLE_MAX + 3

"""Who reads a step's files: the service of the step that takes its result, or the plan's
requester.

Under a broker user per service an artifact is readable by the two users it is stored
between (docs/artifacts.md), so a step's files are stored for whoever reads them next:
the service of the one step that takes the result (as an input, or as the list it maps
over), or, for a step no other takes, the user of the plan's requester. A service's user
is the service (the generated definitions'). The leader names that user in the step's
request (``metadata.artifact_reader``) when it is not its own; a result that services of
several users take, or whose taker's service is not known yet, is stored for the leader
as before.
"""

from __future__ import annotations

from agentbus._exceptions import AgentBusError
from agentbus.leader._directory import SkillDirectory
from agentbus.leader._plan import Plan, Subtask

__all__ = ["StepReaders"]


class StepReaders:
    """The broker user each step of ``plan`` stores its files for.

    Args:
        plan: The plan (or fragment) whose steps are run.
        directory: Where the service of a step that names only a skill is found.
        requester: The user of the plan's requester; None: the leader's own.
        own: The leader's own broker user.
    """

    def __init__(
        self, plan: Plan, *, directory: SkillDirectory, requester: str | None, own: str
    ) -> None:
        self._directory = directory
        self._requester = requester
        self._own = own
        takers: dict[str, list[Subtask]] = {}
        for step in plan.subtasks:
            for source in dict.fromkeys(_sources(step)):
                takers.setdefault(source, []).append(step)
        # Equal tuples shared: the thousands of sources of a fan-in hold one between them.
        shared: dict[tuple[int, ...], tuple[Subtask, ...]] = {}
        self._takers = {
            source: shared.setdefault(tuple(map(id, steps)), tuple(steps))
            for source, steps in takers.items()
        }

    async def reader(self, step_id: str) -> str | None:
        """The user to name in ``step_id``'s request; None: the leader's own (say nothing)."""
        takers = self._takers.get(step_id)
        if takers is None:
            user = self._requester
        else:
            users = {await self._service(step) for step in takers}
            user = users.pop() if len(users) == 1 else None
        return None if user == self._own else user

    async def _service(self, step: Subtask) -> str | None:
        if step.service is not None:
            return step.service
        try:  # cached: the step that takes the result asks the same a moment later
            agents = await self._directory.capable(step.skill)
        except AgentBusError:
            return None
        services = {agent.service for agent in agents}
        return services.pop() if len(services) == 1 else None


def _sources(step: Subtask) -> list[str]:
    # The steps whose results ``step`` reads: its inputs, and the list it maps over.
    references = [
        reference
        for value in step.inputs.values()
        for reference in (value if isinstance(value, list) else [value])
    ]
    if step.map is not None:
        references.append(step.map.over)
    return [reference.split(".", 1)[0] for reference in references]

"""The plan: subtasks, their dependencies and inputs, validated before anything is sent."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.dataclasses import dataclass

from agentbus.envelopes import AgentId, utcnow
from agentbus.leader._conditions import check_condition

__all__ = ["Fragment", "MapSpec", "Plan", "Subtask", "resolve_input"]

InputRef = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,128}(\.[^.]+)*$")]
MAX_ITEMS: Final = 100_000
"""The most items a mapped step may run (its ``map.limit`` is at most this)."""


class MapSpec(BaseModel):
    """Run the step once per item of an earlier result, gathering the results in order."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    over: InputRef = Field(
        description=(
            "The list to map over: a dependency's result or a path into it ('list', "
            "'listing.files'); '*' takes a field of every element ('list.*.path')."
        )
    )
    as_: AgentId = Field(
        alias="as", description="The parameter each item is given to the skill as."
    )
    limit: int = Field(
        default=10_000, ge=0, le=MAX_ITEMS, description="More items than this fail the step."
    )
    concurrency: int = Field(default=16, ge=1, le=1_000, description="Items running at once.")
    items: Literal["critical", "optional"] = Field(
        default="critical",
        description=(
            "critical: an item that fails fails the step (the others are cancelled); "
            "optional: its result is null and the step goes on."
        ),
    )
    flatten: bool = Field(
        default=False,
        description="Map over the concatenation of a list of lists (the result of a mapped step).",
    )


# A slotted (pydantic) dataclass, validated like a model: half a model's memory in a plan
# of thousands of subtasks. The docstring is the schema's description.
@dataclass(slots=True, config=ConfigDict(extra="forbid"))
class Subtask:
    """One unit of work: a skill to call with parameters, after its dependencies."""

    id: AgentId
    skill: AgentId
    parameters: dict[str, Any] = Field(default_factory=dict)
    depends_on: tuple[AgentId, ...] = ()
    inputs: dict[str, InputRef | list[InputRef]] = Field(
        default_factory=dict,
        description=(
            "Parameter name to a dependency's result: 'draft' passes the whole result of "
            "subtask draft, 'outline.sections' a dotted path inside it, and a list of such "
            "references passes the list of their values (a fan-in)."
        ),
    )
    critical: bool = True
    timeout: float = Field(default=30.0, gt=0, description="Seconds per attempt.")
    retries: int = Field(default=0, ge=0, le=20)
    service: AgentId | None = Field(
        default=None,
        description="Send to this service without asking the registry who offers the skill.",
    )
    map: MapSpec | None = Field(
        default=None,
        description="Run once per item of an earlier result; the result is their list, in order.",
    )
    fragment: bool = Field(
        default=False,
        description=(
            "The skill plans: its result is a fragment ({'subtasks': [...], 'max_parallel': "
            "n}) the leader runs inside the plan; this step's result is then the fragment's "
            "results, by step id."
        ),
    )
    when: dict[str, Any] | None = Field(
        default=None,
        description=(
            "Run only when this condition on earlier results holds (a JSON-logic expression: "
            "var, ==, !=, <, <=, >, >=, !, !!, and, or, in, if); else it is skipped, its "
            "result null, and its dependents still run."
        ),
    )


class Plan(BaseModel):
    """A task split into subtasks: a DAG run by the leader."""

    model_config = ConfigDict(extra="forbid")

    id: AgentId = Field(default_factory=lambda: f"plan-{uuid.uuid4().hex[:12]}")
    description: str = ""
    subtasks: list[Subtask] = Field(min_length=1)
    deadline: datetime | float | None = Field(
        default=None,
        description="When the whole plan must be done: an ISO time, or seconds from its start.",
    )
    max_parallel: int = Field(default=16, ge=1, le=10_000)
    budget: dict[str, Annotated[float, Field(gt=0)]] | None = Field(
        default=None,
        description="Caps on what the subtasks may use, by unit (as skills report it): once "
        "one is reached, no further attempt starts, as when the deadline passes.",
    )

    @model_validator(mode="after")
    def _check_graph(self) -> Plan:
        ids: set[str] = set()
        for subtask in self.subtasks:
            if subtask.id in ids:
                raise ValueError(f"duplicate subtask id {subtask.id!r}")
            ids.add(subtask.id)
        for subtask in self.subtasks:
            _check_links(subtask, ids)
        cycle = _find_cycle({s.id: s.depends_on for s in self.subtasks})
        if cycle:
            raise ValueError(f"the plan has a cycle: {' -> '.join(cycle)}")
        return self

    def fragment(self, subtask_id: str, fragment: Fragment) -> Plan:
        """The plan a step's fragment runs as: its steps, under this plan's id."""
        return Plan.model_validate(
            {
                "id": self.id,
                "description": f"the fragment of {subtask_id}",
                "subtasks": fragment.subtasks,
                "max_parallel": fragment.max_parallel,
            }
        )

    def deadline_at(self, started: datetime | None = None) -> datetime | None:
        """Return the plan's deadline as an absolute UTC time."""
        if self.deadline is None:
            return None
        if isinstance(self.deadline, datetime):
            return self.deadline
        return (started or utcnow()) + timedelta(seconds=self.deadline)

    def dependents(self) -> dict[str, tuple[str, ...]]:
        """Return, for each subtask id, the ids of the subtasks that depend on it."""
        found: dict[str, list[str]] = {}
        for subtask in self.subtasks:
            for dependency in dict.fromkeys(subtask.depends_on):
                found.setdefault(dependency, []).append(subtask.id)
        # Equal tuples shared: the thousands of sources of a fan-in hold one between them.
        shared: dict[tuple[str, ...], tuple[str, ...]] = {}
        return {
            subtask.id: shared.setdefault(ids, ids)
            for subtask in self.subtasks
            for ids in (tuple(found.get(subtask.id, ())),)
        }


class Fragment(BaseModel):
    """A part of a plan a step's skill made at run time (``Subtask.fragment``): run inside
    the plan, validated as a plan is, bounded in size (and in depth, and by the plan's
    deadline and budget, by the leader)."""

    model_config = ConfigDict(extra="forbid")

    subtasks: list[dict[str, Any]] = Field(min_length=1, max_length=1_000)
    max_parallel: int = Field(default=16, ge=1, le=1_000)


def _check_links(subtask: Subtask, ids: set[str]) -> None:
    # Dependencies name other subtasks of the plan; inputs come from dependencies only.
    depends_on = set(subtask.depends_on)  # a fan-in of thousands: no list scans
    _check_shape(subtask, depends_on)
    for dependency in depends_on:
        if dependency not in ids:
            raise ValueError(f"subtask {subtask.id!r} depends on unknown subtask {dependency!r}")
        if dependency == subtask.id:
            raise ValueError(f"subtask {subtask.id!r} depends on itself")
    for parameter, references in subtask.inputs.items():
        for reference in _as_list(references):
            source = reference.split(".", 1)[0]
            if source not in depends_on:
                raise ValueError(
                    f"subtask {subtask.id!r} input {parameter!r} refers to {source!r}, "
                    "which it does not depend on"
                )
        if parameter in subtask.parameters:
            raise ValueError(
                f"subtask {subtask.id!r} sets {parameter!r} both in parameters and inputs"
            )


def _check_shape(subtask: Subtask, depends_on: set[str]) -> None:
    # A map reads a dependency's result, into a parameter of its own; a condition reads
    # dependencies' results, with operators it knows.
    if subtask.map is not None:
        source = subtask.map.over.split(".", 1)[0]
        if source not in depends_on:
            raise ValueError(
                f"subtask {subtask.id!r} maps over {source!r}, which it does not depend on"
            )
        if subtask.map.as_ in subtask.parameters or subtask.map.as_ in subtask.inputs:
            raise ValueError(
                f"subtask {subtask.id!r} maps into {subtask.map.as_!r}, which it sets already"
            )
    if subtask.when is not None:
        for source in check_condition(subtask.when):
            if source.split(".", 1)[0] not in depends_on:
                raise ValueError(
                    f"subtask {subtask.id!r}'s condition reads {source!r}, "
                    "which it does not depend on"
                )


def _find_cycle(graph: dict[str, tuple[str, ...]]) -> list[str] | None:
    # Iterative depth-first search with colours; returns the cycle as a closed path.
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    for root in graph:
        if colour[root] != white:
            continue
        path: list[str] = [root]
        stack = [iter(graph[root])]
        colour[root] = grey
        while stack:
            node = next(stack[-1], None)
            if node is None:
                colour[path.pop()] = black
                stack.pop()
                continue
            if colour[node] == grey:
                return [*path[path.index(node) :], node]
            if colour[node] == white:
                colour[node] = grey
                path.append(node)
                stack.append(iter(graph[node]))
    return None


def _as_list(references: str | list[str]) -> list[str]:
    return [references] if isinstance(references, str) else references


def resolve_input(reference: str | list[str], results: dict[str, Any]) -> Any:
    """Return the value ``reference`` names: a subtask's result, or a dotted path inside it.

    A list of references gives the list of their values.

    A ``*`` in the path takes the rest of the path in every element of the list there
    (``list.*.path``: each element's ``path``; a null element gives null).

    Raises:
        KeyError: the path does not exist in the result.
    """
    if not isinstance(reference, str):
        return [resolve_input(item, results) for item in reference]
    source, *path = reference.split(".")
    return _walk(results[source], path, source)


def _walk(value: Any, path: list[str], walked: str) -> Any:
    # Down the path; '*' takes the rest of the path in every element of a list.
    for at, part in enumerate(path):
        walked += f".{part}"
        if part == "*" and isinstance(value, list):
            # A null element (an optional item of a map that failed) stays null.
            rest = path[at + 1 :]
            return [None if element is None else _walk(element, rest, walked) for element in value]
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and _is_index(part, len(value)):
            value = value[int(part)]
        else:
            raise KeyError(walked)
    return value


def _is_index(part: str, length: int) -> bool:
    return part.lstrip("-").isdigit() and -length <= int(part) < length

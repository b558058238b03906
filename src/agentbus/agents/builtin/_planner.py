"""The ``planner`` agent: splits a task into steps from the skills the registry knows.

Deterministic, without a language model: the task is cut into clauses (``then``, ``and``,
commas, semicolons), each clause goes to the live skill whose name and description share
the most words with it and that takes a ``text`` (the text the plan works on), and the
steps form a fragment a leader runs inside the plan (a plan step with ``"fragment":
true``). It stands for what an LLM planner does; the shape of its answer is the same.
"""

from __future__ import annotations

import re
from typing import Any, Final

from pydantic import BaseModel

from agentbus._exceptions import AgentBusError, InvalidParameters
from agentbus.agents._agent import Agent
from agentbus.agents._card import AgentCard
from agentbus.agents._skills import skill
from agentbus.envelopes import ErrorCode

__all__ = ["PlannedStep", "PlannerAgent"]

_CLAUSES: Final = re.compile(r"\s*(?:,|;|\bthen\b|\band\b)\s*", re.IGNORECASE)
_WORDS: Final = re.compile(r"[a-z]+")
_STOP: Final = frozenset({"a", "an", "the", "of", "it", "its", "to", "in", "on", "for", "me"})


class PlannedStep(BaseModel):
    """One step of a plan the planner made: which skill, for which clause of the task."""

    id: str
    skill: str
    service: str
    clause: str


class PlannerAgent(Agent):
    """Plans: splits a task into steps, one live skill per clause of it."""

    name = "planner"
    description = "Splits a task into steps, from the skills the registry knows"

    def __init__(self, *, registry: str = "registry", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._registry = registry

    @skill
    async def plan(self, task: str, text: str) -> dict[str, Any]:
        """Split ``task`` into steps over ``text``: a plan fragment (``{"subtasks": ...}``)
        whose steps run in parallel, one per clause, each on the best matching skill."""
        clauses = [clause for clause in _CLAUSES.split(task) if _words(clause)]
        if not clauses:
            raise InvalidParameters("the task names nothing to do", details={"task": task})
        skills = await self._skills()
        steps = [self._step(n, clause, skills) for n, clause in enumerate(clauses)]
        return {
            "subtasks": [
                {"id": s.id, "skill": s.skill, "service": s.service, "parameters": {"text": text}}
                for s in steps
            ],
            "max_parallel": len(steps),
        }

    async def _skills(self) -> list[tuple[str, str, set[str]]]:
        # (service, skill, its words) of each live skill that takes a text.
        listed = await self.bus.request(self._registry, "list_agents", timeout=10)
        first = {row["service"]: row["agent_id"] for row in reversed(listed.result)}
        found = []
        for service, agent_id in sorted(first.items()):
            reply = await self.bus.request(
                self._registry, "get_card", {"agent_id": agent_id}, timeout=10
            )
            card = AgentCard.model_validate(reply.result)
            for spec in card.skills:
                if "text" in spec.parameters.get("properties", {}):
                    words = _words(f"{spec.name.replace('_', ' ')} {spec.description}")
                    found.append((service, spec.name, words))
        return found

    def _step(self, n: int, clause: str, skills: list[tuple[str, str, set[str]]]) -> PlannedStep:
        wanted = _words(clause)
        scored = [(len(wanted & words), service, name) for service, name, words in skills]
        best = max(scored, default=(0, "", ""))
        if best[0] == 0:
            raise AgentBusError(
                f"no live skill does {clause!r}",
                code=ErrorCode.NO_CAPABLE_AGENT,
                details={"clause": clause},
            )
        return PlannedStep(id=f"step{n}-{best[2]}", skill=best[2], service=best[1], clause=clause)


def _words(text: str) -> set[str]:
    # Lower case, British and American spellings alike, plurals as singulars.
    found = set()
    for word in _WORDS.findall(text.lower()):
        if word not in _STOP:
            word = word.replace("ise", "ize")
            found.add(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return found

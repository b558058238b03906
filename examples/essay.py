"""The design notes' content chain: outline -> draft -> summary, three agents, no model.

Each step is deterministic text work, so a plan gives the same essay every time:

    agentbus run examples.essay:Outliner &
    agentbus run examples.essay:Drafter &
    agentbus run examples.essay:Summarizer &
    agentbus plan run examples/essay.json
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from agentbus import Agent, InvalidParameters, skill

# What an essay says about anything, one angle per section, in this order.
ANGLES = (
    "What {topic} are",
    "How {topic} work",
    "Why {topic} matter",
    "What threatens {topic}",
    "What comes next for {topic}",
)


class Outline(BaseModel):
    topic: str
    sections: list[str]


class Digest(BaseModel):
    summary: str
    sections: int
    words: int


class Outliner(Agent):
    name = "outliner"
    description = "Plans an essay: one heading per section"

    @skill
    async def outline(
        self, topic: str, sections: Annotated[int, Field(ge=1, le=len(ANGLES))] = 3
    ) -> Outline:
        """Headings for an essay on ``topic``."""
        subject = topic.strip()
        if not subject:
            raise InvalidParameters("topic is empty")
        return Outline(
            topic=subject, sections=[angle.format(topic=subject) for angle in ANGLES[:sections]]
        )


class Drafter(Agent):
    name = "drafter"
    description = "Writes a paragraph under each heading"

    @skill
    async def draft(self, sections: list[str]) -> str:
        """Markdown: each heading and a paragraph built from its words."""
        if not sections:
            raise InvalidParameters("no sections to draft")
        return "\n\n".join(f"## {heading}\n\n{_paragraph(heading)}" for heading in sections)


class Summarizer(Agent):
    name = "summarizer"
    description = "Sums up a draft: the first sentence of each section"

    @skill
    async def summary(self, text: str) -> Digest:
        """The first sentence under each heading, and the draft's size."""
        paragraphs = [block.strip() for block in text.split("\n\n") if not block.startswith("#")]
        firsts = [block.split(". ")[0].rstrip(".") + "." for block in paragraphs if block]
        return Digest(summary=" ".join(firsts), sections=len(firsts), words=len(text.split()))


def _paragraph(heading: str) -> str:
    subject = heading[0].lower() + heading[1:]
    return (
        f"This section asks {subject}. "
        f"It answers in three steps: the facts, the reasons behind them, and what follows. "
        f"Each step builds on the section before it, so the essay reads as one argument."
    )

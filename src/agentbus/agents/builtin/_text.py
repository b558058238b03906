"""The ``text`` agent: text statistics, keywords and extractive summaries."""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated, Final

from pydantic import BaseModel, Field

from agentbus.agents._agent import Agent
from agentbus.agents._skills import skill

__all__ = [
    "STOP_WORDS",
    "Keyword",
    "Summary",
    "TextAgent",
    "TextStats",
    "split_paragraphs",
    "split_sentences",
    "split_words",
]

_STOP_WORDS_TEXT: Final = """
    a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have haven't
    having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll
    i'm i've if in into is isn't it it's its itself just let's may me might more most must mustn't
    my myself no nor not now of off on once only or other ought our ours ourselves out over own
    same shall shan't she she'd she'll she's should shouldn't so some such than that that's the
    their theirs them themselves then there there's these they they'd they'll they're they've
    this those through to too under until up upon us very was wasn't we we'd we'll we're we've
    were weren't what what's when when's where where's which while who who's whom why why's will
    with won't would wouldn't yet you you'd you'll you're you've your yours yourself yourselves
    """
STOP_WORDS: Final = frozenset(_STOP_WORDS_TEXT.split())
"""English words too common to be keywords, lowercase, with ASCII apostrophes."""

_WORD: Final = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_PARAGRAPH_BREAK: Final = re.compile(r"\n[^\S\n]*\n")
# A sentence runs to ., ! or ? (and closing quotes or brackets) before a space or the
# end, so "3.14" and "example.com" do not end one; nor does a common abbreviation.
_ABBREVIATIONS: Final = frozenset(
    {"cf.", "dr.", "e.g.", "i.e.", "jr.", "mr.", "mrs.", "ms.", "prof.", "sr.", "st.", "vs."}
)
_SENTENCE: Final = re.compile(r"\S.*?(?:[.!?]+[\"'\u201d\u2019)\]]*(?=\s|$)|$)", re.DOTALL)


def split_words(text: str) -> list[str]:
    """Return the words of a text: runs of letters and digits, inner apostrophes kept."""
    return _WORD.findall(text)


def split_paragraphs(text: str) -> list[str]:
    """Return the paragraphs of a text: blocks separated by blank lines."""
    return [block for block in _PARAGRAPH_BREAK.split(text) if block.strip()]


def split_sentences(text: str) -> list[str]:
    """Return the sentences of a text, whitespace collapsed; none spans two paragraphs."""
    found: list[str] = []
    for block in split_paragraphs(text):
        pending = ""
        for match in _SENTENCE.finditer(block):
            sentence = f"{pending} {' '.join(match.group().split())}".lstrip()
            pending = sentence if sentence.rsplit(" ", 1)[-1].lower() in _ABBREVIATIONS else ""
            if not pending and _WORD.search(sentence):
                found.append(sentence)
        if pending and _WORD.search(pending):
            found.append(pending)
    return found


def _content_words(tokens: list[str]) -> list[str]:
    lowered = (token.lower().replace("\u2019", "'") for token in tokens)
    return [
        word for word in lowered if word not in STOP_WORDS and len(word) > 1 and not word.isdigit()
    ]


class TextStats(BaseModel):
    """Counts and averages of a text.

    Averages are rounded to 2 places, lexical diversity (distinct words over
    words, case-insensitive) to 4.
    """

    characters: int
    words: int
    unique_words: int
    sentences: int
    paragraphs: int
    average_word_length: float
    average_sentence_length: float
    lexical_diversity: float


class Keyword(BaseModel):
    """A frequent word that is not a stop word; ``score`` is its share of such words."""

    word: str
    count: int
    score: float


class Summary(BaseModel):
    """An extractive summary: chosen sentences in text order, with their 0-based indices."""

    summary: str
    sentences: list[int]
    total_sentences: int


class Digest(BaseModel):
    """Several texts read as one: a summary, keywords and counts, flat for a report table."""

    summary: str
    keywords: str
    texts: int
    words: int
    sentences: int


class TextAgent(Agent):
    """Text statistics, keywords and extractive summaries; deterministic, English stop words."""

    name = "text"
    description = "Text statistics, keywords and extractive summaries"
    version = "1.0.0"
    tags = ("builtin", "text")

    @skill
    async def stats(self, text: str) -> TextStats:
        """Count characters, words, sentences and paragraphs, with averages and diversity."""
        tokens = split_words(text)
        distinct = {token.lower() for token in tokens}
        sentence_count = len(split_sentences(text))
        return TextStats(
            characters=len(text),
            words=len(tokens),
            unique_words=len(distinct),
            sentences=sentence_count,
            paragraphs=len(split_paragraphs(text)),
            average_word_length=_ratio(sum(map(len, tokens)), len(tokens), 2),
            average_sentence_length=_ratio(len(tokens), sentence_count, 2),
            lexical_diversity=_ratio(len(distinct), len(tokens), 4),
        )

    @skill
    async def keywords(self, text: str, top: Annotated[int, Field(ge=1)] = 10) -> list[Keyword]:
        """Rank the words that are not stop words by frequency, ties alphabetically.

        Words are lowercased; one-letter words and numbers are left out.
        """
        content = _content_words(split_words(text))
        ranked = sorted(Counter(content).items(), key=lambda item: (-item[1], item[0]))
        return [
            Keyword(word=word, count=count, score=_ratio(count, len(content), 4))
            for word, count in ranked[:top]
        ]

    @skill
    async def summarize(self, text: str, sentences: Annotated[int, Field(ge=1)] = 3) -> Summary:
        """Pick the most representative sentences, returned in their original order.

        A sentence scores the summed frequency of its non-stop words (relative to
        the most frequent word), divided by its length in words; ties go to the
        earlier sentence.
        """
        found = split_sentences(text)
        frequency = Counter(_content_words(split_words(text)))
        top = max(frequency.values(), default=1)

        def score(index: int) -> float:
            tokens = split_words(found[index])
            return sum(frequency[w] for w in _content_words(tokens)) / top / len(tokens)

        ranked = sorted(range(len(found)), key=lambda index: (-score(index), index))
        chosen = sorted(ranked[:sentences])
        return Summary(
            summary=" ".join(found[index] for index in chosen),
            sentences=chosen,
            total_sentences=len(found),
        )

    @skill
    async def digest(
        self,
        texts: list[str | None],
        sentences: Annotated[int, Field(ge=1)] = 3,
        top: Annotated[int, Field(ge=1)] = 8,
    ) -> Digest:
        """Summarise several texts (one paragraph each) and name their keywords; a null
        text (a file a mapped step could not read) is passed over."""
        present = [text.strip() for text in texts if text and text.strip()]
        joined = "\n\n".join(present)
        summary = await self.summarize(joined, sentences)
        keywords = await self.keywords(joined, top)
        return Digest(
            summary=summary.summary,
            keywords=", ".join(keyword.word for keyword in keywords),
            texts=len(present),
            words=len(split_words(joined)),
            sentences=summary.total_sentences,
        )


def _ratio(part: int, whole: int, places: int) -> float:
    return round(part / whole, places) if whole else 0.0

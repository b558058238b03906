"""AMQP topic matching, case by case: the table the unit tests and the real broker both check.

Each case is ``(pattern, routing key, whether a queue bound with the pattern gets the
message)``. ``tests/scenarios/test_topic_broker.py`` publishes every key to a real
RabbitMQ topic exchange, so the expectations are RabbitMQ's, not assumed.
"""

from __future__ import annotations

from typing import Final

TopicCase = tuple[str, str, bool]

TOPIC_CASES: Final[list[TopicCase]] = [
    # Literal words: the whole key, word for word.
    ("a.b.c", "a.b.c", True),
    ("a.b.c", "a.b", False),
    ("a.b", "a.b.c", False),
    ("a.b.c", "a.b.x", False),
    ("A", "a", False),
    # `*`: exactly one word.
    ("*", "a", True),
    ("*", "a.b", False),
    ("*.b", "a.b", True),
    ("a.*", "a", False),
    ("a.*", "a.b", True),
    ("a.*", "a.b.c", False),
    ("*.*", "a.b", True),
    ("*.*.*", "a.b", False),
    ("broadcast.event.*", "broadcast.event.news", True),
    ("broadcast.event.*", "broadcast.event", False),
    # `#`: zero or more words, at the end, the start or in the middle.
    ("#", "a", True),
    ("#", "a.b.c", True),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("a.#", "b.a", False),
    ("a.#", "ab", False),
    ("broadcast.event.news.#", "broadcast.event.news", True),
    ("broadcast.#", "broadcast.event.news", True),
    ("#.c", "c", True),
    ("#.c", "a.b.c", True),
    ("#.c", "a.c.d", False),
    ("a.#.c", "a.c", True),
    ("a.#.c", "a.b.c", True),
    ("a.#.c", "a.b.b.c", True),
    ("a.#.c", "a.b", False),
    ("#.a.#", "a", True),
    ("#.a.#", "b.a.c", True),
    ("#.a.#", "b.c", False),
    ("#.#", "a", True),
    ("#.*", "a", True),
    ("*.#", "a.b.c", True),
    ("a.*.#", "a", False),
    ("a.*.#", "a.b", True),
    # Wildcards are whole words only: inside a word they are literal characters.
    ("a*", "ab", False),
    ("a*", "a*", True),
    ("a#", "a", False),
    ("a#", "a#", True),
    # Empty words: `a..b` has three words, the middle one empty.
    ("a..b", "a..b", True),
    ("a..b", "a.b", False),
    ("a.*.b", "a..b", True),
    ("a.", "a.", True),
    ("a.*", "a.", True),
    ("a.#", "a.", True),
    ("*.*", ".", True),
    ("#", ".", True),
    # The empty key has no words at all (RabbitMQ splits "" into zero words).
    ("", "", True),
    ("", "a", False),
    ("a", "", False),
    ("#", "", True),
    ("#.#", "", True),
    ("*", "", False),
    ("*.#", "", False),
    ("#.*", "", False),
]

"""A ledger that proves nothing was lost or done twice: what was sent, what was done.

One SQLite file (WAL mode) shared by the test and its agent processes. Producers record
each message id they sent with its outcome; agents record each effect they executed,
keyed by message id, before they ack; the checker compares the two::

    with Ledger(tmp_path / "ledger.db") as ledger:
        ledger.record_send(envelope.message_id, SendOutcome.CONFIRMED, detail="response")
        ...  # agents: Ledger.from_env().record_effect(request.message_id, self.id)
        report = await ledger.check(url=broker.url, queues=["chaos-1.service.worker"])
        assert report.lost == [] and report.duplicated == {}

Every effect execution is a row (no ``INSERT OR IGNORE``), so a request that ran twice
shows up in ``duplicated``. ``apply_once`` is the user-side guarantee instead: the check
and the effect in one transaction, a second execution recorded as a replay.

Writes commit at once with ``synchronous=NORMAL``: a committed row survives the crash of
the process that wrote it (the faults under test), not a power cut. Calls block briefly
(a local SQLite write); fine for tests, not for a hot path.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final, Self

import aiormq.exceptions

from agentbus._config import Settings
from agentbus._sqlite import connect_shared
from agentbus.bus import open_connection

__all__ = ["LEDGER_ENV", "Ledger", "LedgerReport", "QueueDepth", "SendOutcome", "queue_depths"]

LEDGER_ENV: Final = "AGENTBUS_LEDGER"
"""The environment variable naming the ledger file, for agents in other processes."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS sends (
    message_id TEXT NOT NULL, producer TEXT NOT NULL, kind TEXT NOT NULL,
    outcome TEXT NOT NULL, detail TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS effects (
    message_id TEXT NOT NULL, agent_id TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS replays (
    message_id TEXT NOT NULL, agent_id TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS effects_by_message ON effects (message_id);
CREATE INDEX IF NOT EXISTS sends_by_message ON sends (message_id);
"""
_SENDS_IN_ORDER: Final = "SELECT message_id, outcome, detail FROM sends ORDER BY at, rowid"
_COUNT_EFFECTS: Final = "SELECT message_id, count(*) FROM effects GROUP BY message_id"


class SendOutcome(enum.StrEnum):
    """What a producer knows of a message it sent."""

    CONFIRMED = "confirmed"  # the publish was confirmed, or the request answered
    FAILED = "failed"  # a clear error: it was not sent, or was refused
    UNKNOWN = "unknown"  # undecided: a timeout, a connection lost before the confirm


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """A queue's ready messages and consumers, as a passive declare reports them."""

    messages: int
    consumers: int
    exists: bool = True


@dataclass(frozen=True, slots=True)
class LedgerReport:
    """The checker's findings; the lists and dicts are empty when all is well.

    Attributes:
        sent: Distinct message ids recorded by producers.
        outcomes: Message ids by outcome (``confirmed``, ``failed``, ``unknown``).
        endings: Sends by their ``detail`` (e.g. ``response``, ``timeout``, ``error:...``).
        effects: Effect executions recorded, all of them.
        lost: Confirmed message ids without an effect.
        unexpected: Message ids with an effect that no producer recorded.
        duplicated: Message ids executed more than once, with their execution count.
        recorded_twice: Message ids a producer recorded more than once.
        unknown_done: Unknown outcomes whose message had an effect nonetheless.
        failed_with_effect: Failed message ids that had an effect.
        replays: Executions that ``apply_once`` found done already.
        residue: Ready messages left per queue (see ``queue_depths``).
    """

    sent: int
    outcomes: Mapping[str, int]
    endings: Mapping[str, int]
    effects: int
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    recorded_twice: list[str] = field(default_factory=list)
    unknown_done: int = 0
    failed_with_effect: list[str] = field(default_factory=list)
    replays: int = 0
    residue: dict[str, int] = field(default_factory=dict)

    @property
    def confirmed(self) -> int:
        """How many message ids were confirmed."""
        return self.outcomes.get(SendOutcome.CONFIRMED, 0)

    @property
    def is_clean(self) -> bool:
        """Tell whether nothing was lost, unexpected, duplicated, recorded twice or left."""
        return not (
            self.lost
            or self.unexpected
            or self.duplicated
            or self.recorded_twice
            or any(self.residue.values())
        )

    def summary(self) -> str:
        """One line of the figures, for a test's output."""
        outcomes = " ".join(f"{key}={value}" for key, value in sorted(self.outcomes.items()))
        endings = " ".join(f"{key}={value}" for key, value in sorted(self.endings.items()))
        return (
            f"sent={self.sent} [{outcomes}] endings [{endings}] effects={self.effects} "
            f"lost={len(self.lost)} dup={len(self.duplicated)} unexpected={len(self.unexpected)} "
            f"unknown_done={self.unknown_done} replays={self.replays} "
            f"residue={sum(self.residue.values())}"
        )


class Ledger:
    """The SQLite ledger at ``path``; the file is created (WAL mode) on first use.

    Args:
        path: The database file; every process of a test opens the same one.
        busy_timeout: Seconds a write waits for another process's write lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._connection: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        state = "open" if self._connection is not None else "closed"
        return f"<Ledger {str(self.path)!r} {state}>"

    @classmethod
    def from_env(cls) -> Ledger:
        """Return the ledger named by ``$AGENTBUS_LEDGER``.

        Raises:
            LookupError: the variable is not set.
        """
        path = os.environ.get(LEDGER_ENV)
        if not path:
            raise LookupError(f"{LEDGER_ENV} does not name a ledger file")
        return cls(path)

    def __enter__(self) -> Self:
        self._db()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close this process's connection to the file (the data stays)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def record_send(
        self,
        message_id: str,
        outcome: SendOutcome,
        *,
        producer: str = "",
        kind: str = "request",
        detail: str = "",
    ) -> None:
        """Record a message sent and what the producer knows of it; once per message id."""
        self._db().execute(
            "INSERT INTO sends VALUES (?, ?, ?, ?, ?, ?)",
            (message_id, producer, kind, SendOutcome(outcome).value, detail, time.time()),
        )

    def record_effect(self, message_id: str, agent_id: str) -> None:
        """Record one execution of the effect of ``message_id`` by ``agent_id``."""
        self._db().execute(
            "INSERT INTO effects VALUES (?, ?, ?)", (message_id, agent_id, time.time())
        )

    def apply_once(self, message_id: str, agent_id: str) -> bool:
        """Record the effect unless one is recorded already, atomically; return whether applied.

        An execution that finds the effect done is recorded as a replay instead.
        """
        db = self._db()
        db.execute("BEGIN IMMEDIATE")  # the write lock first: no other process between
        try:
            done = db.execute(
                "SELECT 1 FROM effects WHERE message_id = ? LIMIT 1", (message_id,)
            ).fetchone()
            table = "replays" if done else "effects"
            db.execute(f"INSERT INTO {table} VALUES (?, ?, ?)", (message_id, agent_id, time.time()))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return done is None

    def reruns(self) -> dict[str, list[tuple[str, float, bool]]]:
        """Each message id ``apply_once`` found done at least once: its executions, oldest
        first, as (agent id, time, whether it was a replay)."""
        rows = self._db().execute(
            "SELECT message_id, agent_id, at, 0 FROM effects WHERE message_id IN "
            "(SELECT message_id FROM replays) UNION ALL "
            "SELECT message_id, agent_id, at, 1 FROM replays ORDER BY at"
        )
        found: dict[str, list[tuple[str, float, bool]]] = {}
        for message_id, agent_id, at, replay in rows:
            found.setdefault(str(message_id), []).append((str(agent_id), float(at), bool(replay)))
        return found

    def effects(self, message_id: str | None = None) -> list[tuple[str, str]]:
        """Return the (message id, agent id) of every effect execution, oldest first."""
        query = "SELECT message_id, agent_id FROM effects"
        rows = (
            self._db().execute(f"{query} WHERE message_id = ? ORDER BY at", (message_id,))
            if message_id is not None
            else self._db().execute(f"{query} ORDER BY at")
        )
        return [(str(row[0]), str(row[1])) for row in rows]

    def report(self, residue: Mapping[str, int] | None = None) -> LedgerReport:
        """Compare sends with effects; ``residue`` is the messages left per queue."""
        db = self._db()
        sends = db.execute(_SENDS_IN_ORDER).fetchall()
        done = {str(row[0]): int(row[1]) for row in db.execute(_COUNT_EFFECTS)}
        (replays,) = db.execute("SELECT count(*) FROM replays").fetchone()
        return _compare(sends, done, replays=int(replays), residue=residue or {})

    async def check(self, *, url: str | None = None, queues: Iterable[str] = ()) -> LedgerReport:
        """Measure the residue of ``queues`` on the broker at ``url``, then ``report``.

        Run it after a drain: messages held unacked by a consumer are not counted.
        """
        names = list(queues)
        depths = await queue_depths(url, names) if url is not None and names else {}
        return self.report({name: depth.messages for name, depth in depths.items()})

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            # Autocommit: each record is durable on return; apply_once opens its own.
            self._connection = connect_shared(self.path, self.busy_timeout, _SCHEMA)
        return self._connection


def _compare(
    sends: Iterable[tuple[str, str, str]],
    done: Mapping[str, int],
    *,
    replays: int,
    residue: Mapping[str, int],
) -> LedgerReport:
    # sends: (message id, outcome, detail), oldest first; done: executions per message id.
    outcomes: dict[str, list[str]] = {}
    endings: Counter[str] = Counter()
    for message_id, outcome, detail in sends:
        outcomes.setdefault(message_id, []).append(outcome)
        endings[detail or outcome] += 1
    last = {message_id: recorded[-1] for message_id, recorded in outcomes.items()}
    return LedgerReport(
        sent=len(outcomes),
        outcomes=dict(Counter(last.values())),
        endings=dict(endings),
        effects=sum(done.values()),
        lost=_ended(last, SendOutcome.CONFIRMED, done, executed=False),
        unexpected=sorted(set(done) - set(outcomes)),
        duplicated={m: n for m, n in sorted(done.items()) if n > 1},
        recorded_twice=sorted(m for m, recorded in outcomes.items() if len(recorded) > 1),
        unknown_done=len(_ended(last, SendOutcome.UNKNOWN, done, executed=True)),
        failed_with_effect=_ended(last, SendOutcome.FAILED, done, executed=True),
        replays=replays,
        residue=dict(residue),
    )


def _ended(
    last: Mapping[str, str], outcome: SendOutcome, done: Mapping[str, int], *, executed: bool
) -> list[str]:
    # The message ids whose last outcome is ``outcome`` and that ran (or did not run).
    return sorted(m for m, o in last.items() if o == outcome and (done.get(m, 0) > 0) is executed)


async def queue_depths(url: str, queues: Iterable[str]) -> dict[str, QueueDepth]:
    """Return the ready messages and consumers of each queue, by passive declare.

    A queue that does not exist is reported with ``exists=False`` and zero counts.

    Raises:
        BrokerUnavailable: the broker at ``url`` cannot be reached.
    """
    found: dict[str, QueueDepth] = {}
    connection = await open_connection(Settings(url=url))
    async with connection:
        for name in queues:
            channel = await connection.channel()
            try:
                queue = await channel.declare_queue(name, passive=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                found[name] = QueueDepth(messages=0, consumers=0, exists=False)
                continue  # the broker closed that channel
            finally:
                # A robust channel the broker closed is reopened unless closed here too.
                with contextlib.suppress(aiormq.exceptions.AMQPError, ConnectionError):
                    await channel.close()
            result = queue.declaration_result
            found[name] = QueueDepth(
                messages=result.message_count or 0, consumers=result.consumer_count or 0
            )
    return found

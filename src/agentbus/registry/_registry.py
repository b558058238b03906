"""The registry agent: liveness from heartbeats, discovery requests, online/offline events."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from collections.abc import Coroutine, Mapping
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from agentbus._exceptions import AgentBusError, BusClosed
from agentbus.agents import (
    AGENT_OFFLINE,
    AGENT_ONLINE,
    ANNOUNCE,
    HEARTBEAT,
    Agent,
    AgentCard,
    Heartbeat,
    skill,
)
from agentbus.bus import DEFAULT_FEED_LENGTH, Feed, verifies_sender
from agentbus.envelopes import (
    BROADCAST,
    ErrorCode,
    EventEnvelope,
    RequestEnvelope,
    RequestPayload,
)
from agentbus.registry._shares import DIGEST, DIGEST_EVERY, BeatDigests, beats_of
from agentbus.registry._table import AgentInfo, LivenessTable, Record, Transition

__all__ = ["Registry"]

_HEARTBEATS: Final = f"broadcast.event.{HEARTBEAT}"

_METRICS_EVERY: Final = 1.0  # s: the agent gauges are rebuilt at most this often
_CARD_RETRY_FIRST: Final = 1.0  # s after a failed card fetch; doubles up to:
_CARD_RETRY_MAX: Final = 60.0
# At most this many card fetches and transition events at once: 50,000 agents joining
# together must not queue 50,000 publishes on one channel (a later beat asks again).
_CARD_FETCHES_AT_ONCE: Final = 32
_EVENTS_AT_ONCE: Final = 64
_LAG_SAMPLE_EVERY: Final = 64  # beats: how often a beat's age on arrival is measured
_LAG_WINDOW: Final = 10.0  # s of samples in stats()
_LAG_RECENT: Final = 5  # samples: the feed's current lag is their median
_LAG_SLACK_MAX: Final = 60.0  # s: offline detection waits out at most this much feed lag


class Registry(Agent):
    """Knows who is alive and what each agent can do, from their heartbeats.

    Several registries may run at once: each hears every heartbeat and answers alike.
    With ``share``, the registries that share take a part of the heartbeats each and
    tell each other what they heard: they still answer alike, with the load split.
    ``feed_length``: heartbeats its feed holds, waiting, before it drops the oldest.
    """

    name = "registry"
    description = "Tracks live agents from heartbeats and answers discovery requests"
    version = "1.0.0"
    concurrency = 16

    def __init__(
        self,
        *,
        missed_intervals: int = 3,
        forget_after: float = 300.0,
        feed_length: int = DEFAULT_FEED_LENGTH,
        share: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._feed_length = feed_length
        self.share = share
        self._digests: BeatDigests | None = None
        self.table = LivenessTable(missed=missed_intervals, forget_after=forget_after)
        self._feed: Feed | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._card_fetches: dict[str, asyncio.Task[None]] = {}
        self._emitting = asyncio.Semaphore(_EVENTS_AT_ONCE)
        self._card_retry: dict[str, tuple[float, float]] = {}  # agent id: (not before, delay)
        self._background: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._metrics_at = 0.0
        self._counts: collections.Counter[str] = collections.Counter()
        self._beats = 0
        self._verified = False  # whether the bus verifies senders; read once, on start
        self._lags: collections.deque[tuple[float, float]] = collections.deque(maxlen=4096)
        self._overloaded = False
        self._heard_at = 0.0  # monotonic: when the last beat was taken, off the feed or a digest
        self._peer_lags: dict[str, tuple[float, float]] = {}  # registry: (monotonic, lag)
        self._lost_reported = 0  # table.lost when the metric was last brought up to date

    async def on_start(self) -> None:
        self._verified = verifies_sender(self.bus.settings)
        # Beats are many, soon stale and soon repeated: a feed, not a subscription.
        self._feed = await self.bus.consume_feed(
            _HEARTBEATS,
            self._on_beat,
            name="heartbeats",
            max_length=self._feed_length,
            group=self.name if self.share else None,
        )
        if self.share:
            self._digests = BeatDigests(self.bus, self._own_lag)
            await self.bus.consume_feed(
                f"broadcast.event.{DIGEST}", self._on_digest, name="digests"
            )
            self._digests.start()
        await self.bus.subscribe(f"broadcast.event.{AGENT_OFFLINE}", self._on_goodbye)
        self._sweeper = asyncio.create_task(self._sweep_forever())
        # A fresh registry knows nobody: ask every agent to beat now.
        announce = RequestEnvelope(
            sender_id=self.id,
            receiver_id=BROADCAST,
            payload=RequestPayload(action=ANNOUNCE),
        )
        await self.bus.publish(announce, persistent=False, mandatory=False)

    async def on_stop(self) -> None:
        if self._feed is not None:
            await self._feed.aclose()
        if self._digests is not None:
            await self._digests.aclose()
        tasks = [self._sweeper, *self._card_fetches.values(), *self._background]
        for task in tasks:
            if task is not None:
                task.cancel()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    @skill
    async def list_agents(
        self,
        service: str | None = None,
        status: str | None = None,
        skill: str | None = None,
        include_offline: bool = False,
    ) -> list[AgentInfo]:
        """List known agents, filtered by service, status and skill."""
        return self.table.query(
            service=service, status=status, skill=skill, include_offline=include_offline
        )

    @skill
    async def find_skill(self, skill: str) -> list[AgentInfo]:
        """List live agents offering a skill: ready before busy, least loaded first."""
        return self.table.capable(skill)

    @skill
    async def get_card(self, agent_id: str) -> AgentCard:
        """Return the card of a known agent."""
        record = self.table.get(agent_id)
        if record is None:
            raise AgentBusError(f"no agent {agent_id!r} is known", code=ErrorCode.AGENT_UNAVAILABLE)
        if record.card is None:
            await self._fetch_card(record.agent_id)
        if record.card is None:
            raise AgentBusError(
                f"the card of {agent_id!r} is not known yet", code=ErrorCode.AGENT_UNAVAILABLE
            )
        return record.card

    @skill
    async def stats(self) -> dict[str, Any]:
        """Count heartbeats heard and agents known; how late beats arrive (last 10 s)."""
        now = time.monotonic()
        lags = sorted(lag for at, lag in self._lags if now - at <= _LAG_WINDOW)
        counts = collections.Counter(self._counts)
        if self._feed is not None:  # what the feed dropped before a beat reached us
            counts["heartbeats"] += self._feed.stats.received
            counts["malformed"] += self._feed.stats.invalid
            counts["refused"] += self._feed.stats.refused
        return dict(counts) | {
            "agents": len(self.table),
            "online": sum(record.online for record in self.table.records()),
            "beat_lag_p50_s": lags[len(lags) // 2] if lags else None,
            "beat_lag_max_s": lags[-1] if lags else None,
            "beats_lost": self.table.lost,
            "overloaded": self._overloaded,
        }

    def _on_beat(self, envelope: dict[str, Any]) -> None:
        """Take a heartbeat envelope: the common beat costs a dict look and a digest compare."""
        payload = envelope.get("payload")
        data = payload.get("event_data") if isinstance(payload, dict) else None
        if not isinstance(data, dict):
            self._counts["malformed"] += 1
            self._log.warning("malformed heartbeat ignored", error="not an event envelope")
            return
        sender_id = envelope.get("sender_id")
        # The feed admitted the sender (verify_sender): the beat must be about the sender.
        if self._verified and data.get("agent_id") != sender_id:
            self._refuse_beat(sender_id, "the heartbeat is about another agent")
            return
        self._beats += 1
        if self._beats % _LAG_SAMPLE_EVERY == 0:
            self._sample_lag(envelope.get("timestamp"))
        common = self._take(data, sender_id)
        if self._digests is not None and common is not None:
            self._digests.add(data, common=common)

    def _take(self, data: Mapping[str, Any], sender_id: object) -> bool | None:
        # Whether the beat was a common one (the fast path); None: malformed, dropped.
        self._heard_at = time.monotonic()
        refreshed = self.table.refresh(data)
        if refreshed is None:
            return False if self._observe(data, sender_id) else None
        self._counts["fast"] += 1
        self._after_beat(*refreshed)
        return True

    def _on_digest(self, envelope: dict[str, Any]) -> None:
        """Take another sharing registry's digest: each beat in it as if heard here."""
        sender_id = envelope.get("sender_id")
        if sender_id == self.id:
            return
        # Only a registry says what registries heard (its ids: the registry's user's).
        if not isinstance(sender_id, str) or not (
            sender_id == self.name or sender_id.startswith(f"{self.name}-")
        ):
            self._refuse_beat(sender_id, "a heartbeat digest not from a registry")
            return
        payload = envelope.get("payload")
        data = payload.get("event_data") if isinstance(payload, dict) else None
        if not isinstance(data, dict):
            self._counts["malformed"] += 1
            return
        self._note_peer_lag(sender_id, envelope.get("timestamp"), data.get("lag"))
        for beat in beats_of(data, self._malformed_digest):
            self._counts["shared"] += 1
            self._take(beat, sender_id)

    def _note_peer_lag(self, sender_id: str, timestamp: object, lag: object) -> None:
        # How late the beats in a digest are: the sharing registry's own lag, the time the
        # digest gathered them, and its way here. A registry that falls behind holds the
        # others' verdicts on the agents whose beats it takes.
        if not isinstance(timestamp, str) or not isinstance(lag, int | float):
            return
        with contextlib.suppress(ValueError):
            sent = datetime.fromisoformat(timestamp).timestamp()
            late = max(time.time() - sent, 0.0) + max(float(lag), 0.0) + DIGEST_EVERY
            self._peer_lags[sender_id] = (time.monotonic(), late)

    def _malformed_digest(self, reason: str) -> None:
        self._counts["malformed"] += 1
        self._log.warning("malformed heartbeat digest ignored", error=reason)

    def _refuse_beat(self, sender_id: object, reason: str) -> None:
        self._counts["refused"] += 1
        self._log.warning("heartbeat refused", sender_id=sender_id, reason=reason)

    def _observe(self, data: Mapping[str, Any], sender_id: object) -> bool:
        try:
            beat = Heartbeat.model_validate(data)
        except ValidationError as exc:
            self._counts["malformed"] += 1
            self._log.warning("malformed heartbeat ignored", sender_id=sender_id, error=str(exc))
            return False
        self._after_beat(*self.table.observe(beat))
        return True

    def _after_beat(self, record: Record, transition: Transition | None) -> None:
        if record.card is None:
            self._maybe_fetch_card(record.agent_id)
        if transition is Transition.ONLINE:
            self._wake.set()
            self._spawn(self._announce_transition(AGENT_ONLINE, record, reason="heartbeat"))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _sample_lag(self, timestamp: object) -> None:
        if not isinstance(timestamp, str):
            return
        with contextlib.suppress(ValueError):
            sent = datetime.fromisoformat(timestamp).timestamp()
            self._lags.append((time.monotonic(), time.time() - sent))

    def _feed_lag(self) -> float:
        lag = self._own_lag()
        if self._peer_lags:  # sharing: the latest word of each registry heard lately
            now = time.monotonic()
            # A registry silent since its last digest may have stalled: that counts too.
            fresh = [late + now - at for at, late in self._peer_lags.values()
                     if now - at <= _LAG_WINDOW]  # fmt: skip
            lag = max([lag, *fresh])
        return min(lag, _LAG_SLACK_MAX)

    def _own_lag(self) -> float:
        # How late beats come now (the median of the last samples: one agent's skewed
        # clock moves it little). A registry or broker behind by seconds would otherwise
        # call every agent offline whose beat is still waiting in the queue.
        now = time.monotonic()
        last = itertools.islice(reversed(self._lags), _LAG_RECENT)
        recent = sorted(lag for at, lag in last if now - at <= _LAG_WINDOW)
        lag = max(recent[len(recent) // 2], 0.0) if recent else 0.0
        # A registry that took no beat for longer than the shortest interval has stalled
        # (a host out of CPU): the beats of that time wait unread, and the samples, all
        # from before the stall, cannot say so. The stall counts as lag.
        shortest = self.table.shortest_interval()
        if self._heard_at and shortest is not None:
            lag += max(now - self._heard_at - shortest, 0.0)
        return min(lag, _LAG_SLACK_MAX)

    def _maybe_fetch_card(self, agent_id: str) -> None:
        if agent_id in self._card_fetches or len(self._card_fetches) >= _CARD_FETCHES_AT_ONCE:
            return
        retry = self._card_retry.get(agent_id)
        if retry is not None and time.monotonic() < retry[0]:
            return  # the last fetch failed: wait, not ask again at every beat
        task = asyncio.create_task(self._fetch_card(agent_id))
        self._card_fetches[agent_id] = task
        task.add_done_callback(lambda _: self._card_fetches.pop(agent_id, None))

    async def _on_goodbye(self, event: EventEnvelope) -> None:
        agent_id = event.payload.event_data.get("agent_id")
        # Registries report departures too; only the agent's own word counts here.
        if event.sender_id != agent_id or not isinstance(agent_id, str):
            return
        seq = event.payload.event_data.get("seq")
        record = self.table.depart(agent_id, seq if isinstance(seq, int) else None)
        if record is not None:
            await self._announce_transition(AGENT_OFFLINE, record, reason="shutdown")

    async def _sweep_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.table.next_sweep_in(self._feed_lag())):
                    await self._wake.wait()
            self._wake.clear()
            lag = self._feed_lag()
            if self.share:  # what the others heard comes a digest later
                lag += DIGEST_EVERY
            self._judge_load(lag)
            for record in self.table.sweep(alive=self.id, slack=lag):
                await self._announce_transition(AGENT_OFFLINE, record, reason="timeout")
            self._export_metrics()

    def _judge_load(self, lag: float) -> None:
        # Overloaded: beats are lost on the way (the feed drops its oldest, beats expire
        # waiting) or arrive an interval late. The table holds offline verdicts while
        # beats are lost; this says so, once per episode, in the log, stats and metrics.
        overloaded = self.table.lossy(lag) or lag > self.heartbeat_interval
        if self.metrics is not None:
            self.metrics.heartbeats_lost.inc(self.table.lost - self._lost_reported)
            self._lost_reported = self.table.lost
            self.metrics.registry_overloaded.set(overloaded)
        if overloaded == self._overloaded:
            return
        self._overloaded = overloaded
        if overloaded:
            self._log.warning(
                "registry overloaded: heartbeats lost or late, offline verdicts held",
                beats_lost=self.table.lost,
                beat_lag_s=round(lag, 3),
            )
        else:
            self._log.info("registry keeping up again", beats_lost=self.table.lost)

    def _export_metrics(self, *, now: bool = False) -> None:
        # Rebuilding the gauges visits every agent: at most once a second, whatever
        # the heartbeat rate and however often the sweeper wakes.
        if self.metrics is None:
            return
        moment = time.monotonic()
        if not now and moment - self._metrics_at < _METRICS_EVERY:
            return
        self._metrics_at = moment
        live = [record for record in self.table.records() if record.online]
        self.metrics.set_agents(
            ((record.service, record.status) for record in live),
            ((record.agent_id, record.service, record.in_flight) for record in live),
        )

    async def _announce_transition(self, event_name: str, record: Record, *, reason: str) -> None:
        self._log.info(event_name, subject=record.agent_id, service=record.service, reason=reason)
        if self.metrics is not None:
            self.metrics.agent_transitions.labels(event_name, reason).inc()
            self._export_metrics()
        data = {
            "agent_id": record.agent_id,
            "service": record.service,
            "reason": reason,
            "last_seen": self.table.seen_at(record).isoformat(),
            "reported_by": self.id,
        }
        try:
            async with self._emitting:
                # News its listing also has, unconfirmed: a confirm per transition costs the
                # registry a frame and a wake-up each (50,000 agents joining send 50,000). A
                # lost agent_offline (only on a reconnect) costs a leader time, not work:
                # the broker hands the dead agent's requests back, its attempt times out.
                await self.bus.emit(event_name, data, confirm=False)
        except BusClosed:
            # The registry is stopping: its table goes with it, and so do its news.
            self._log.debug("transition event not sent: the registry is stopping")
        except AgentBusError as exc:
            self._log.warning("transition event not sent", error=str(exc))

    async def _fetch_card(self, agent_id: str) -> None:
        try:
            reply = await self.bus.request(agent_id, "describe", timeout=5)
            self.table.set_card(agent_id, AgentCard.model_validate(reply.result))
        except (AgentBusError, ValidationError) as exc:
            self._log.info("card not fetched", subject=agent_id, error=str(exc))
            retry = self._card_retry.get(agent_id)
            delay = _CARD_RETRY_FIRST if retry is None else min(retry[1] * 2, _CARD_RETRY_MAX)
            self._card_retry[agent_id] = (time.monotonic() + delay, delay)
        else:
            self._card_retry.pop(agent_id, None)

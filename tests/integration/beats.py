"""Simulated agents' heartbeats, numbered as ``Agent.beat`` numbers them, from a thread."""

from __future__ import annotations

import threading
import time

import pika

from agentbus.agents import HEARTBEAT, AgentStatus, Heartbeat
from agentbus.envelopes import BROADCAST, EventEnvelope, EventPayload, encode

__all__ = ["Beats"]


class Beats(threading.Thread):
    """Every agent beats once per interval, numbered from 0, over a blocking pika connection."""

    def __init__(self, url: str, exchange: str, *, agents: int, interval: float,
                 prefix: str) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.url, self.exchange = url, exchange
        self.ids = [f"{prefix}-{i:03d}" for i in range(agents)]
        self.interval = interval
        self.stop = threading.Event()
        self.silenced: set[str] = set()
        self.sent = 0
        self.late: set[str] = set()
        """Agents one of whose beats went out more than an interval late (a starved thread)."""
        self._last: dict[str, float] = {}

    def _body(self, agent_id: str, seq: int) -> bytes:
        data = Heartbeat(agent_id=agent_id, service="sim", status=AgentStatus.READY, in_flight=0,
                         capacity=1, interval=self.interval, card_digest="d", seq=seq)  # fmt: skip
        beat = data.model_dump(mode="json", exclude_none=True)  # as Agent.beat() sends it
        payload = EventPayload(event_name=HEARTBEAT, event_data=beat)
        return encode(EventEnvelope(sender_id=agent_id, receiver_id=BROADCAST, payload=payload))

    def _note(self, agent_id: str) -> None:
        now = time.monotonic()
        if now - self._last.get(agent_id, now) > 2 * self.interval:
            self.late.add(agent_id)
        self._last[agent_id] = now

    def run(self) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        channel = connection.channel()
        ttl = str(int(self.interval * 3 * 1000))  # as Agent.beat() sets it
        properties = pika.BasicProperties(content_type="application/json", expiration=ttl)
        seq, due = 0, time.monotonic()
        try:
            while not self.stop.is_set():
                for agent_id in self.ids:
                    if agent_id not in self.silenced:
                        channel.basic_publish(self.exchange, f"broadcast.event.{HEARTBEAT}",
                                              self._body(agent_id, seq), properties)  # fmt: skip
                        self.sent += 1
                        self._note(agent_id)
                seq += 1
                due += self.interval
                connection.sleep(max(due - time.monotonic(), 0))
        finally:
            connection.close()

"""Prometheus metrics: every family prefixed ``agentbus_``, on an injected registry."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentbus.envelopes import ErrorCode

__all__ = ["Metered", "MeteredStats", "Metrics"]

_LATENCY_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
)  # fmt: skip
_KNOWN_OUTCOMES: Final = frozenset({"success", *ErrorCode})
_PLAN_BUCKETS: Final = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


class MeteredStats(Protocol):
    """The counters a bus keeps (``agentbus.bus.BusStats``), as the metrics read them."""

    @property
    def published_by_type(self) -> Mapping[str, int]: ...
    @property
    def consumed_by(self) -> Mapping[tuple[str, str], int]: ...
    @property
    def errors_sent(self) -> Mapping[str, int]: ...
    @property
    def errors_received(self) -> Mapping[str, int]: ...
    @property
    def refused_by(self) -> Mapping[str, int]: ...
    @property
    def node(self) -> str | None: ...


class Metered(Protocol):
    """What the metrics read of a bus: its id, its counters, what it waits on."""

    @property
    def agent_id(self) -> str: ...
    @property
    def stats(self) -> MeteredStats: ...
    @property
    def in_flight(self) -> int: ...


class Metrics:
    """The agentbus metric families, registered on one ``CollectorRegistry``.

    Pass it to ``Bus(metrics=...)`` (agents pass theirs on) and serve it with
    ``serve(port)``; a test reads ``registry`` directly.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.request_duration = Histogram(
            "agentbus_request_duration_seconds",
            "Requests this process sent, from publish to answer, by action and outcome.",
            ["action", "outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.handler_duration = Histogram(
            "agentbus_handler_duration_seconds",
            "Requests this process served, handler time, by action and outcome.",
            ["action", "outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._served: dict[tuple[str, str], Any] = {}  # handler_duration's children
        self.agents_online = Gauge(
            "agentbus_agents_online",
            "Agents the registry sees alive, by service and status.",
            ["service", "status"],
            registry=r,
        )
        self.agent_load = Gauge(
            "agentbus_agent_in_flight",
            "Work in flight per live agent, as the registry last heard it.",
            ["agent_id", "service"],
            registry=r,
        )
        self.heartbeats_lost = Counter(
            "agentbus_registry_heartbeats_lost",
            "Heartbeats the registry knows were lost on the way (gaps in their numbers).",
            registry=r,
        )
        self.registry_overloaded = Gauge(
            "agentbus_registry_overloaded",
            "1 while the registry loses or lags heartbeats and holds offline verdicts.",
            registry=r,
        )
        self.agent_transitions = Counter(
            "agentbus_agent_transitions_total",
            "Agents going online or offline, by reason.",
            ["transition", "reason"],
            registry=r,
        )
        self.plans = Counter(
            "agentbus_plans_total", "Plans run by this leader, by outcome.", ["status"], registry=r
        )
        self.plan_duration = Histogram(
            "agentbus_plan_duration_seconds",
            "Wall time of plans, by outcome.",
            ["status"],
            buckets=_PLAN_BUCKETS,
            registry=r,
        )
        self.subtasks = Counter(
            "agentbus_subtasks_total",
            "Subtasks ended, by skill and status.",
            ["skill", "status"],
            registry=r,
        )
        self.usage = Counter(
            "agentbus_usage_total",
            "What the skills this process served reported using, by service, action and unit.",
            ["service", "action", "unit"],
            registry=r,
        )
        self._buses = _BusCollector()
        r.register(self._buses)

    def attach(self, bus: Metered) -> None:
        """Report ``bus``'s counters through these families at each scrape."""
        self._buses.buses.append(bus)

    def detach(self, bus: Metered) -> None:
        """Stop reporting ``bus`` (it closed): its series leave the next scrape."""
        if bus in self._buses.buses:
            self._buses.buses.remove(bus)

    def observe_request(self, action: str, outcome: str, seconds: float) -> None:
        """Record one request this process sent."""
        self.request_duration.labels(action, _code(outcome)).observe(seconds)

    def observe_handler(self, action: str, outcome: str, seconds: float) -> None:
        """Record one request this process served."""
        if outcome == ErrorCode.UNKNOWN_ACTION:
            action = "unknown"  # any client can send any action: keep the label set bounded
        # The labelled child is kept: labels() takes a lock and builds a key each call.
        child = self._served.get((action, outcome))
        if child is None:
            child = self._served[action, outcome] = self.handler_duration.labels(
                action, _code(outcome)
            )
        child.observe(seconds)

    def set_agents(
        self, online: Iterable[tuple[str, str]], loads: Iterable[tuple[str, str, int]]
    ) -> None:
        """Replace the registry's view: (service, status) per live agent, and their loads.

        Series of services and agents no longer present are removed, not left at zero.
        """
        counts: dict[tuple[str, str], int] = {}
        for key in online:
            counts[key] = counts.get(key, 0) + 1
        _replace(self.agents_online, {key: float(n) for key, n in counts.items()})
        _replace(
            self.agent_load,
            {(agent_id, service): float(n) for agent_id, service, n in loads},
        )

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` over HTTP on ``port`` in a background thread."""
        start_http_server(port, addr=addr, registry=self.registry)


def _code(outcome: str) -> str:
    # Error codes from other agents are free text: unknown ones share one label value.
    return outcome if outcome in _KNOWN_OUTCOMES else "other"


def _replace(gauge: Gauge, values: dict[tuple[str, ...], float]) -> None:
    [family] = gauge.collect()
    current = {tuple(sample.labels.values()) for sample in family.samples}
    for labels in current - values.keys():
        gauge.remove(*labels)
    for labels, value in values.items():
        gauge.labels(*labels).set(value)


class _BusCollector(Collector):
    """Reads every attached bus's counters at scrape time: nothing extra on the hot path."""

    def __init__(self) -> None:
        self.buses: list[Metered] = []

    def describe(self) -> list[Metric]:
        # Described as nothing: the families are built at each scrape.
        return []

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        published = CounterMetricFamily(
            "agentbus_messages_published",
            "Messages published and confirmed, by message type.",
            labels=["agent_id", "type"],
        )
        consumed = CounterMetricFamily(
            "agentbus_messages_consumed",
            "Deliveries handled, by message type and outcome.",
            labels=["agent_id", "type", "outcome"],
        )
        errors = CounterMetricFamily(
            "agentbus_errors",
            "Error envelopes by code: sent in answer, or received.",
            labels=["agent_id", "code", "direction"],
        )
        simple = {
            "dead_lettered": "Deliveries dead-lettered (rejected without requeue).",
            "poison_dead_lettered": "Deliveries dead-lettered past the classic delivery limit.",
            "late_replies": "Replies that came after their request gave up.",
            "duplicates": "Redelivered requests answered without running again.",
            "dedup_waits": "Copies of a request that waited for its run in another process.",
            "dedup_unavailable": "Failed calls to the shared de-duplication store (fail open).",
            "replies_dropped": "Replies nobody was there to receive.",
            "publish_retries": "Publishes sent again after a reconnect.",
            "handler_errors": "Handler exceptions answered with processing_failed.",
            "rate_limited": "Requests answered rate_limited: their sender was over its rate.",
            "connections": "Connections made to the broker: the first, then one per reconnect.",
        }
        families = {
            name: CounterMetricFamily(f"agentbus_{name}", text, labels=["agent_id"])
            for name, text in simple.items()
        }
        refused = CounterMetricFamily(
            "agentbus_refused",
            "Deliveries refused unread (CC/BCC, off-contract key, sender identity), by reason.",
            labels=["agent_id", "reason"],
        )
        in_flight = GaugeMetricFamily(
            "agentbus_in_flight", "Requests waiting for an answer.", labels=["agent_id"]
        )
        node = GaugeMetricFamily(
            "agentbus_broker_node",
            "The broker node each bus is connected to (1), by its URL without password.",
            labels=["agent_id", "node"],
        )
        for bus in self.buses:
            stats, agent = bus.stats, bus.agent_id
            for message_type, count in stats.published_by_type.items():
                published.add_metric([agent, message_type], count)
            for (message_type, outcome), count in stats.consumed_by.items():
                consumed.add_metric([agent, message_type, outcome], count)
            for code, count in stats.errors_sent.items():
                errors.add_metric([agent, code, "sent"], count)
            received: dict[str, float] = {}
            for code, count in stats.errors_received.items():
                received[_code(code)] = received.get(_code(code), 0) + count
            for code, total in received.items():
                errors.add_metric([agent, code, "received"], total)
            for name, family in families.items():
                family.add_metric([agent], getattr(stats, name))
            for reason, count in stats.refused_by.items():
                refused.add_metric([agent, reason], count)
            in_flight.add_metric([agent], bus.in_flight)
            if stats.node is not None:
                node.add_metric([agent, stats.node], 1)
        yield published
        yield consumed
        yield errors
        yield from families.values()
        yield refused
        yield in_flight
        yield node

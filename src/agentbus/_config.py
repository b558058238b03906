"""Settings, read from ``AGENTBUS_*`` environment variables."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentbus.envelopes import DEFAULT_MAX_SIZE

__all__ = ["DEFAULT_URL", "Settings", "mask_url", "peer_sites"]

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"


class Settings(BaseSettings):
    """Bus settings. Each field reads ``AGENTBUS_<NAME>`` from the environment."""

    model_config = SettingsConfigDict(env_prefix="AGENTBUS_", extra="ignore", frozen=True)

    url: str = DEFAULT_URL
    """The broker: one AMQP URL, or a cluster's nodes joined by ``;`` (kombu's form)."""
    exchange: str = Field(default="agentbus", pattern=r"^[A-Za-z0-9_.:-]{1,200}$")
    """The team's topic exchange; every queue's name derives from it."""
    max_message_size: int = Field(default=DEFAULT_MAX_SIZE, gt=0)
    """The largest envelope sent or accepted, in bytes (1 MiB by default)."""
    prefetch: int = Field(default=32, gt=0, le=65535)
    """The service queue's prefetch when ``serve`` is not given one: requests held at once."""
    request_timeout: float = Field(default=30.0, gt=0)
    """Seconds a request waits for its answer when no ``timeout`` is given."""
    presence_check: float = Field(default=0.5, ge=0)
    """Seconds a request waits for its answer before the bus checks that something
    consumes the receiver's queue; if nothing does, it fails with ``NoInstance``. 0: never."""
    max_outstanding: int = Field(default=1000, gt=0)
    """Requests awaiting an answer, and publishes awaiting a confirm, at most (each);
    further callers wait for a slot (backpressure, within their own timeout)."""
    dedup_window: float = Field(default=600.0, ge=0)
    """Seconds a served request's id is remembered, to answer a redelivered copy."""
    dedup_size: int = Field(default=100_000, ge=0)
    """Request ids remembered at most (the oldest go first)."""
    dedup_path: str | None = None
    """A SQLite file for de-duplication shared by the instances on one host; None: in memory."""
    dedup_url: str | None = None
    """A Redis or Valkey server (``redis://``, ``rediss://``, ``unix://``) for de-duplication
    shared by the instances on every host (the ``redis`` extra); None: ``dedup_path``, else
    in memory. Unreachable, requests are served on each process's window (fail open)."""
    instance_queue_expires: float = Field(default=60.0, gt=0)
    """Seconds an instance queue outlives its agent (one-shot CLI commands: 5)."""
    connect_timeout: float = Field(default=10.0, gt=0)
    """Seconds to connect to the broker before giving up."""
    reconnect_interval: float = Field(default=1.0, gt=0)
    """Seconds between attempts to reconnect after the connection dropped."""
    heartbeat: int = Field(default=5, ge=0)
    """The AMQP heartbeat, seconds: a dead link is noticed in about three of them."""
    shutdown_grace: float = Field(default=10.0, ge=0)
    """Seconds in-flight work may take on shutdown before it is requeued."""
    queue_type: Literal["classic", "quorum"] = "classic"
    """The service queues' type: ``classic`` or ``quorum`` (replicated on a cluster)."""
    instance_queue_type: Literal["classic", "quorum"] | None = None
    """The instance queue's type (replies and direct requests); None: as ``queue_type``.
    Quorum survives the loss of the node that holds it: replies are not dropped meanwhile."""
    delivery_limit: int = Field(default=5, ge=1)
    """Returns to its service queue after which a (poison) request is dead-lettered."""
    plan_delivery_limit: int = Field(default=20, ge=1)
    """The delivery limit of the leaders' service queue. Every fault under a leader (its
    connection, its node, its process) returns the plans it runs, and a durable plan
    resumes from its journal: a plan needs more returns than a request to get through an
    unlucky run of faults. The queue keeps the limit it was first declared with."""
    durable_plans: bool = True
    """Leaders journal each plan on the broker, so another leader finishes a plan whose
    leader died (``Leader(durable=...)``, ``agentbus leader --no-durable`` to turn it off).
    On by default: it costs a plan tens of milliseconds (docs/reliability.md)."""
    plan_park_after: float = Field(default=30.0, ge=0)
    """Seconds a durable plan whose every step left waits for people's answers runs on
    before it parks: its leader lets it go (no delivery held, so a wait of days is
    nothing to the broker), and the answer resumes it on whichever leader takes it."""
    schedules: bool = True
    """Leaders run schedules (``schedule_add``): kept in the journal ``schedules``, each
    tick run by the one leader holding the lease ``schedules`` (docs/guides/schedules.md)."""
    plan_retention: float = Field(default=3600.0, ge=0)
    """Seconds a leader keeps a plan's aggregate after it ended, for ``plan_status``."""
    question_retention: str = Field(default="7D", pattern=r"^[0-9]+(Y|M|D|h|m|s)$")
    """How long a service keeps the questions its skills asked (its conversation journal's
    ``x-max-age``: ``7D``, ``12h``): the longest an answer may take."""
    artifact_store: str | None = None
    """Where artifacts go (docs/artifacts.md). None (the default): the broker's own streams,
    chunked; ``s3://<bucket>/<prefix>``: an S3-compatible object store (the ``s3`` extra),
    its endpoint and keys from ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ... ."""
    artifact_by_reference: bool = True
    """Send the parameters of a request, or the result of a skill, as an artifact when
    their envelope would be over ``max_message_size`` (the receiver fetches and checks
    it); False: such an envelope fails with ``PayloadTooLarge`` as before 1.3."""
    artifact_chunk_size: int = Field(default=1024 * 1024, ge=4096, le=16 * 1024 * 1024)
    """Bytes in each chunk of an artifact on the broker's streams (1 MiB: measured best
    of 64 KiB to 1 MiB, docs/artifacts.md)."""
    artifact_retention: str = Field(default="7D", pattern=r"^[0-9]+(Y|M|D|h|m|s)$")
    """How long artifacts are kept (their streams' ``x-max-age``; an S3 reference's
    ``expires_at``): as long as a plan's record (``7D``) by default."""
    artifact_max_size: int = Field(default=16 * 1024**3, gt=0)
    """The largest artifact stored, in bytes (16 GiB): a bigger one fails while written."""
    artifact_quota: int | None = Field(default=None, gt=0)
    """Bytes of artifacts one owner (an agent instance) may keep within their retention,
    counted by its bus as it writes; over it, ``QuotaExceeded``. None: no quota."""
    artifact_stream_max_bytes: int = Field(default=50 * 1000**3, gt=0)
    """The broker's own cap on each artifact stream (``x-max-length-bytes``): past it, the
    oldest artifacts go before their time (and read as expired)."""
    artifact_read_timeout: float = Field(default=30.0, gt=0)
    """Seconds a reader waits for the next chunk of an artifact before it gives it up as
    missing."""
    tracing: bool = False
    """OpenTelemetry spans for sending, handling and plan steps (the ``otel`` extra)."""
    trace_file: str | None = None
    """With ``tracing``: append finished spans to this file as JSON lines, not to the
    global OpenTelemetry provider (for tests and for a look without a collector)."""
    verify_sender: bool | None = None
    """Set the AMQP user_id (the connection's user) on every publish, and refuse deliveries
    without one or whose sender_id is not that user's (``user`` or ``user-<suffix>``).
    None (the default): on whenever the broker identity is not the shared ``guest``."""
    rate_limit: float | None = Field(default=None, gt=0)
    """Requests a second each sender (broker user) may make of this bus's handlers, on
    average; over it, a request is answered ``rate_limited`` and not run. None: no limit."""
    rate_burst: int = Field(default=20, ge=1)
    """Requests a sender may make at once, above ``rate_limit``'s average."""
    audit: bool | None = None
    """Record every admitted request and every refusal in the audit stream
    (``<exchange>.audit``). True: declare the stream if it is missing; None (the default):
    record if the stream exists (the generated definitions declare it); False: never."""
    tls_ca_file: str | None = None
    """PEM file of the CAs that sign the broker's certificate (``amqps://``); None: the
    system's trusted CAs. The broker's certificate and host name are always verified."""
    tls_cert_file: str | None = None
    """PEM file of this client's certificate (``amqps://``), for brokers that ask for one."""
    tls_key_file: str | None = None
    """PEM file of the private key of ``tls_cert_file``; None: the key is in that file."""
    site: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """The site this participant runs at (docs/sites.md): shown on its card, in its
    heartbeats and in the registry's listing. None: a team of one site."""
    peer_sites: str = Field(default="", pattern=r"^([A-Za-z0-9_-]{1,64}(,[A-Za-z0-9_-]{1,64})*)?$")
    """The other sites a request crosses to when no instance serves it here, comma-separated,
    in the order tried (each over the federation link ``agentbus federation`` sets up).
    Empty: requests never leave this site."""
    auth_mechanism: Literal["auto", "plain", "external"] = "auto"
    """How to log in: ``plain`` (the URL's user and password), ``external`` (the client
    certificate's subject, RabbitMQ's EXTERNAL mechanism), or ``auto``: external when a
    client certificate is set and the URL has no password, plain otherwise."""


def peer_sites(settings: Settings) -> tuple[str, ...]:
    """The sites a request may cross to, in order: none without a ``site`` of our own."""
    if settings.site is None or not settings.peer_sites:
        return ()
    return tuple(site for site in settings.peer_sites.split(",") if site != settings.site)


def mask_url(url: str) -> str:
    """Return ``url`` (one node, or several joined by ``;``) with passwords as ``***``."""
    return ";".join(_mask_node(node) for node in url.split(";"))


def _mask_node(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    credentials, _, host = parts.netloc.rpartition("@")
    user, has_password, _ = credentials.partition(":")
    if not has_password:
        return url
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))

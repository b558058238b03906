"""Admission: refuse a delivery that is not what it claims to be, before anything runs.

The broker enforces who may publish which routing key (topic permissions) and that an
AMQP ``user_id`` is the publishing connection's user. It does not check the envelope
inside, and on RabbitMQ 3.x a ``CC`` / ``BCC`` header carries a copy of a message to
routing keys the publisher may not use. So a receiver refuses:

- a delivery with a ``CC`` or ``BCC`` header (RabbitMQ strips ``BCC`` before delivery;
  its copies are caught by the next two rules);
- a request or event whose routing key is not the one the contract gives its envelope;
- a request addressed to somebody else: on a service queue, not to the service; on an
  instance queue, not to the instance, nor a broadcast of an action it takes on broadcast;
- with ``verify_sender``: a delivery without ``user_id``, or whose envelope ``sender_id``
  does not belong to it: ``sender_id`` is the user name, or the user name followed by
  ``-`` and an instance suffix (user ``billing`` sends as ``billing`` or ``billing-2``;
  see ``sent_by`` for names with ``-``). On by default unless the identity is ``guest``.

Each check is a header or property lookup and a string comparison: cheap on the hot path.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Collection, Mapping
from typing import Final, Protocol
from urllib.parse import unquote, urlsplit

from agentbus._config import Settings
from agentbus._exceptions import ConfigurationError
from agentbus._topology import routing_key
from agentbus.envelopes import BROADCAST, Envelope, RequestEnvelope, is_valid_id
from agentbus.security._tls import certificate_user, login_mechanism

__all__ = [
    "Admissible",
    "Refusal",
    "acting_user",
    "connection_user",
    "identity_refusal",
    "owner_of",
    "publisher_user_id",
    "refusal",
    "sent_by",
    "verifies_sender",
]

_DEFAULT_USER = "guest"  # what aio-pika logs in as when the URL names no user


class Refusal(enum.StrEnum):
    """Why a delivery was refused; the ``reason`` in logs and in ``BusStats.refused_by``."""

    CARBON_COPY = "carbon_copy"
    """A ``CC`` or ``BCC`` header: a copy may have gone where its publisher may not send."""
    ROUTING_KEY = "routing_key"
    """The routing key is not the envelope's own (``agent.<receiver>.<type>``, ...)."""
    RECEIVER = "receiver"
    """A request addressed to another receiver than this queue's."""
    MISSING_USER_ID = "missing_user_id"
    """``verify_sender`` is on and the message has no AMQP ``user_id``."""
    SENDER_MISMATCH = "sender_mismatch"
    """``verify_sender`` is on and ``sender_id`` does not belong to the ``user_id``."""

    @property
    def explanation(self) -> str:
        """Say what was wrong, for the error envelope sent back."""
        return _EXPLANATIONS[self]

    @property
    def is_identity(self) -> bool:
        """Whether the sender's identity is in doubt (so its ``sender_id`` is no address)."""
        return self in (Refusal.MISSING_USER_ID, Refusal.SENDER_MISMATCH)


_EXPLANATIONS: Final = {
    Refusal.CARBON_COPY: "messages with a CC or BCC header are not accepted",
    Refusal.ROUTING_KEY: "the routing key is not the one the envelope must be sent with",
    Refusal.RECEIVER: "the request is addressed to another receiver",
    Refusal.MISSING_USER_ID: "the message has no AMQP user_id",
    Refusal.SENDER_MISMATCH: "sender_id does not belong to the AMQP user_id",
}


class Admissible(Protocol):
    """The parts of a delivery admission reads: aio-pika's, or the in-memory broker's."""

    @property
    def headers(self) -> Mapping[str, object] | None: ...
    @property
    def user_id(self) -> str | None: ...
    @property
    def routing_key(self) -> str | None: ...


def refusal(
    message: Admissible,
    envelope: Envelope,
    *,
    agent_id: str,
    service: str | None,
    shared: bool,
    verify_sender: bool,
    broadcast_actions: Collection[str] = (),
) -> Refusal | None:
    """Return why ``message`` (decoded to ``envelope``) must be refused, or ``None``.

    Args:
        message: The delivery.
        envelope: Its decoded envelope.
        agent_id: This instance's id.
        service: The service this instance serves, if any.
        shared: Whether it came from the service queue (else the instance queue).
        verify_sender: Whether to require ``user_id`` and a ``sender_id`` of that user.
        broadcast_actions: The actions this instance takes when broadcast; a broadcast
            request for any other action is not addressed to it.
    """
    reason = identity_refusal(
        message.headers, message.user_id, envelope.sender_id, verify_sender=verify_sender
    )
    if reason is not None:
        return reason
    kind = envelope.message_type
    if kind == "request" or kind == "event":
        # Replies come through reply_to queues (the default exchange): no contract key.
        if message.routing_key != routing_key(envelope):
            return Refusal.ROUTING_KEY
        if isinstance(envelope, RequestEnvelope) and not _addressed_here(
            envelope,
            agent_id=agent_id,
            service=service,
            shared=shared,
            broadcast_actions=broadcast_actions,
        ):
            return Refusal.RECEIVER
    return None


def identity_refusal(
    headers: Mapping[str, object] | None,
    user_id: str | None,
    sender_id: object,
    *,
    verify_sender: bool,
) -> Refusal | None:
    """Return why a message must be refused for how it was sent, or ``None``.

    The checks that need no decoded envelope: no ``CC`` / ``BCC`` header and, with
    ``verify_sender``, a ``user_id`` that ``sender_id`` belongs to. Feeds, which take
    raw bodies, apply these; ``refusal`` applies them and the envelope's own.
    """
    if headers and ("CC" in headers or "BCC" in headers):
        return Refusal.CARBON_COPY
    if verify_sender:
        if not user_id:
            return Refusal.MISSING_USER_ID
        if not isinstance(sender_id, str) or not sent_by(sender_id, user_id):
            return Refusal.SENDER_MISMATCH
    return None


def _addressed_here(
    request: RequestEnvelope,
    *,
    agent_id: str,
    service: str | None,
    shared: bool,
    broadcast_actions: Collection[str],
) -> bool:
    receiver = request.receiver_id
    if shared:
        return receiver == service
    if receiver == BROADCAST:
        return request.payload.action in broadcast_actions
    return receiver == agent_id


def owner_of(sender_id: str) -> str:
    """Return the broker user that ``sender_id`` belongs to (see ``sent_by``)."""
    owner, dash, suffix = sender_id.rpartition("-")
    return owner if dash and suffix and owner else sender_id


def sent_by(sender_id: str, user: str) -> bool:
    """Tell whether ``sender_id`` belongs to broker user ``user``.

    Every sender id has exactly one owner: an id without ``-`` is its own user's; an id
    with one is the user's named by everything before its last ``-`` (``billing-2`` is
    ``billing``'s, ``billing-eu-2`` is ``billing-eu``'s). So user ``billing`` cannot pass
    for user ``billing-eu``: that id is ``billing``'s own instance ``eu``. A user whose
    name has a ``-`` sends with an instance suffix (``billing-eu-1``), never bare.
    """
    owner, dash, suffix = sender_id.rpartition("-")
    if not dash:
        return sender_id == user
    return owner == user and bool(suffix)


def connection_user(settings: Settings) -> str:
    """Return the broker user a connection with ``settings`` logs in as.

    With the EXTERNAL mechanism, the client certificate's common name (RabbitMQ's
    ``ssl_cert_login_from = common_name``); else the first node URL's user (PLAIN).

    Raises:
        ConfigurationError: EXTERNAL, and the certificate cannot be read.
    """
    if login_mechanism(settings) == "external" and settings.tls_cert_file:
        return certificate_user(settings.tls_cert_file)
    name = urlsplit(settings.url.split(";")[0]).username
    return unquote(name) if name else _DEFAULT_USER


def verifies_sender(settings: Settings) -> bool:
    """Tell whether a bus with ``settings`` verifies senders (and sets ``user_id``).

    ``verify_sender`` when set; by default, whenever the identity is not the shared
    ``guest``: a team that deploys users of its own gets the check without asking.
    """
    if settings.verify_sender is not None:
        return settings.verify_sender
    if login_mechanism(settings) == "external":
        return True
    return connection_user(settings) != _DEFAULT_USER


def publisher_user_id(settings: Settings, agent_id: str) -> str | None:
    """Return the AMQP ``user_id`` a bus sets on what it publishes: when it verifies senders.

    Raises:
        ConfigurationError: senders are verified and ``agent_id`` does not belong to
            the connection's user, so every receiver would refuse this bus's messages.
    """
    if not verifies_sender(settings):
        return None
    user = connection_user(settings)
    if not sent_by(agent_id, user):
        form = f"{user}-<suffix>" if "-" in user else f"{user!r} or '{user}-<suffix>'"
        raise ConfigurationError(
            f"agent id {agent_id!r} does not belong to broker user {user!r}: sender "
            f"verification is on (verify_sender, or a user other than guest); use {form}"
        )
    return user


def acting_user(settings: Settings, agent_id: str) -> str:
    """Return the broker user a bus with ``settings`` and ``agent_id`` acts as.

    With senders verified, its connection's user; else the user its id would belong to
    (``owner_of``): what names the artifact streams it writes and reads.
    """
    if verifies_sender(settings):
        return connection_user(settings)
    return owner_of(agent_id)


def default_id(settings: Settings, role: str) -> str:
    """Return a fresh id for an instance of ``role`` that its broker user owns.

    ``role`` is what the process is: its service (``registry``, ``billing``), or
    ``client``, ``gateway``, ``dashboard``. The id stays readable (the role shows in it)
    and passes the sender check (``sent_by``) under any login:

    - no sender verification (the shared ``guest``): ``<role>-<random>``;
    - a user per service (the user is the role): ``<role>-<random>``;
    - any other user (a shared ``ops``, a certificate's common name):
      ``<user>-<role>_<random>``, a ``-`` in the role written ``_``, since the last ``-``
      of an id separates its owner from the instance.

    Raises:
        ConfigurationError: senders are verified and the broker user's name cannot begin
            an id (ids are 1 to 128 of ``[A-Za-z0-9_-]``): the id must be given.
    """
    suffix = secrets.token_hex(4)
    if not verifies_sender(settings):
        return f"{role}-{suffix}"
    user = connection_user(settings)
    if not is_valid_id(user):
        raise ConfigurationError(
            f"broker user {user!r} cannot own agent ids (1 to 128 of [A-Za-z0-9_-]) and "
            "sender verification is on: give the id (--id) of a user that can, or log in "
            "as another user"
        )
    if user == role:
        return f"{role}-{suffix}"
    return f"{user}-{role.replace('-', '_')}_{suffix}"

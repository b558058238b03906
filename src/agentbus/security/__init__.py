"""Security in one place: what the bus enforces, and what operators generate.

The bus calls it, never the reverse: admission of each delivery (``refusal``,
``identity_refusal``, ``verifies_sender``, ``publisher_user_id``), per-sender rate
limits (``SenderRates``), the audit trail (``AuditTrail`` writing records built by
``audit_record`` to an ``AuditStream`` the bus gives), and the TLS context and login
mechanism a connection uses (``tls_context``, ``login_mechanism``, ``tls_failure``).
Operators generate the broker's definitions for a team (``team_grants``,
``definitions``; as the messaging topology operator's resources, ``topology_resources``
and ``credential_secrets``), the federation of sites (``federation_definitions``; as the
operator's resources, ``federation_resources`` of ``link_definitions``, and
``uri_secrets``) and read the audit trail (``agentbus.bus.read_audit`` yields
``AuditEntry``).

It imports only the envelopes and agentbus's internal modules (settings, exceptions,
logging, the topology's names): no aio-pika, no bus.
"""

from agentbus.security._admission import (
    Admissible,
    Refusal,
    connection_user,
    default_id,
    identity_refusal,
    publisher_user_id,
    refusal,
    sent_by,
    verifies_sender,
)
from agentbus.security._audit import (
    AUDIT_FORMAT,
    AuditEntry,
    AuditPosition,
    StreamOffset,
    audit_entries,
    audit_record,
    envelope_fields,
    raw_fields,
)
from agentbus.security._audit_trail import AuditSink, AuditStream, AuditTrail
from agentbus.security._definitions import Grant, definitions, team_grants
from agentbus.security._k8s import credential_secrets, secret_name, topology_resources
from agentbus.security._k8s_sites import federation_resources, uri_secrets
from agentbus.security._rates import SenderRates
from agentbus.security._sites import federation_definitions, link_definitions
from agentbus.security._tls import login_mechanism, tls_context, tls_failure

__all__ = [
    "AUDIT_FORMAT",
    "Admissible",
    "AuditEntry",
    "AuditPosition",
    "AuditSink",
    "AuditStream",
    "AuditTrail",
    "Grant",
    "Refusal",
    "SenderRates",
    "StreamOffset",
    "audit_entries",
    "audit_record",
    "connection_user",
    "credential_secrets",
    "default_id",
    "definitions",
    "envelope_fields",
    "federation_definitions",
    "federation_resources",
    "identity_refusal",
    "link_definitions",
    "login_mechanism",
    "publisher_user_id",
    "raw_fields",
    "refusal",
    "secret_name",
    "sent_by",
    "team_grants",
    "tls_context",
    "tls_failure",
    "topology_resources",
    "uri_secrets",
    "verifies_sender",
]

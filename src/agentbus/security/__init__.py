"""What the bus enforces: admission, identities, rates, TLS and the audit trail.

The bus calls it, never the reverse: admission of each delivery (``refusal``,
``identity_refusal``, ``verifies_sender``, ``publisher_user_id``; ``default_id``, an
instance's id that passes the sender check under any login), per-sender rate limits
(``SenderRates``), the audit trail (the dispatcher appends records built by
``audit_record`` to an ``AuditSink``; ``AuditTrail`` writes them to the stream the bus
gives; ``audit_entries`` reads them back as ``AuditEntry`` from an ``AuditPosition`` or a
``StreamOffset``, for ``agentbus.bus.read_audit``), and the TLS context and login
mechanism a connection uses (``tls_context``, ``login_mechanism``, ``tls_failure``).
What operators generate for the broker (definitions, users, federation, Kubernetes
resources) lives in ``agentbus.definitions``.

It imports only the envelopes and agentbus's internal modules (settings, exceptions,
logging, the topology's names): no aio-pika, no bus.
"""

from agentbus.security._admission import (
    Refusal,
    acting_user,
    default_id,
    identity_refusal,
    owner_of,
    publisher_user_id,
    refusal,
    verifies_sender,
)
from agentbus.security._audit import (
    AuditEntry,
    AuditPosition,
    StreamOffset,
    audit_entries,
    audit_record,
    envelope_fields,
    raw_fields,
)
from agentbus.security._audit_trail import AuditSink, AuditTrail
from agentbus.security._rates import SenderRates
from agentbus.security._tls import login_mechanism, tls_context, tls_failure

__all__ = [
    "AuditEntry",
    "AuditPosition",
    "AuditSink",
    "AuditTrail",
    "Refusal",
    "SenderRates",
    "StreamOffset",
    "acting_user",
    "audit_entries",
    "audit_record",
    "default_id",
    "envelope_fields",
    "identity_refusal",
    "login_mechanism",
    "owner_of",
    "publisher_user_id",
    "raw_fields",
    "refusal",
    "tls_context",
    "tls_failure",
    "verifies_sender",
]

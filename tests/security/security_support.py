"""The security tier's team: the generated definitions of a few users, and how each connects."""

from __future__ import annotations

import json
import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tls_support import CertificateAuthority

from agentbus import Settings
from agentbus.definitions import Grant, definitions
from agentbus.testing.chaos import PrivateBroker

__all__ = ["SecuredTeam"]


@dataclass(frozen=True, slots=True)
class SecuredTeam:
    """A team whose broker users and permissions come from ``agentbus definitions``.

    Services ``work`` and ``admin``; clients ``caller`` (calls work), ``caller-eu`` (calls
    work: a name that extends ``caller``'s) and ``mallory`` (calls work, and nothing else).
    Each logs in with a certificate from ``ca`` (EXTERNAL).
    """

    node: PrivateBroker
    ca: CertificateAuthority
    exchange: str
    document: dict[str, Any]

    @classmethod
    def imported(
        cls, node: PrivateBroker, ca: CertificateAuthority, folder: Path, grants: list[Grant]
    ) -> SecuredTeam:
        """The team of ``grants`` on a fresh exchange, its definitions imported into ``node``."""
        exchange = f"team-{secrets.token_hex(3)}"
        document = definitions(grants, exchange=exchange, queue_type="classic")
        path = folder / "definitions.json"
        path.write_text(json.dumps(document))
        node.rabbitmqctl("import_definitions", str(path))
        return cls(node, ca, exchange, document)

    def settings(self, user: str, **extra: Any) -> Settings:
        """Settings of ``user``: the TLS URL, its certificate, this team's exchange."""
        issued = self.ca.client(user)
        values = {
            "url": self.node.tls_url(),
            "exchange": self.exchange,
            "tls_ca_file": str(self.ca.ca_file),
            "tls_cert_file": str(issued.cert_file),
            "tls_key_file": str(issued.key_file),
            "connect_timeout": 5.0,
            **extra,
        }
        return Settings.model_validate(values)

    def ssl_context(self, user: str) -> ssl.SSLContext:
        """A TLS context presenting ``user``'s certificate, for raw aio-pika clients."""
        issued = self.ca.client(user)
        context = ssl.create_default_context(cafile=str(self.ca.ca_file))
        context.load_cert_chain(issued.cert_file, issued.key_file)
        return context

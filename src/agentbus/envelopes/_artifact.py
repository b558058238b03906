"""An artifact reference as the wire carries it (since 1.3): what and where an object is.

An artifact is a file or a payload too large for an envelope, stored once (by default
chunked on a RabbitMQ stream) and passed by reference: the reference names the store,
where in it the object's chunks start, and the size and SHA-256 digest a reader checks
before it trusts the bytes (docs/wire.md, "Artifacts").
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentbus.envelopes._codes import ARTIFACTS_SINCE, PROTOCOL_MAJOR, is_valid_id
from agentbus.envelopes._models import RequestEnvelope

__all__ = [
    "ARTIFACT_PIECE",
    "ARTIFACT_READER",
    "BY_REFERENCE",
    "READ_ARTIFACT",
    "ArtifactRef",
    "artifact_reader",
    "is_artifact_ref",
    "reads_by_reference",
]

BY_REFERENCE: Final = "by_reference"
"""Metadata key: ``true`` on a request whose ``parameters``, or a response whose
``result``, is an artifact reference to the JSON it stands for (an envelope over the cap)."""

ARTIFACT_READER: Final = "artifact_reader"
"""Metadata key on a request: the broker user its answer's files are stored for, in place
of the sender's (a plan's leader names the service of the step that takes them). An agent
that does not know the key stores them for the sender."""

READ_ARTIFACT: Final = "read_artifact"
"""The built-in action that sends an artifact's bytes to a reader at another site, as
progress notices (``{"state": "artifact.piece", "seq": n, "data": <base64>}``)."""

ARTIFACT_PIECE: Final = "artifact.piece"
"""The ``state`` of a progress notice that carries a piece of an artifact."""

_VERSION: Final = re.compile(r"^(\d+)\.(\d+)$")
_SHA256: Final = r"^[0-9a-f]{64}$"


class ArtifactRef(BaseModel):
    """Where an artifact is and what it holds: the reference an envelope carries.

    ``location`` is the store's: on the broker's streams ``<stream>@<offset>`` (the queue
    that holds the chunks, and the offset of the first); on S3 ``s3://<bucket>/<key>``.
    Unknown fields are kept (a tolerant reader).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: Literal["artifact"] = "artifact"
    id: str = Field(pattern=r"^[0-9a-f]{32}$")
    """The object's id: 32 hex digits, in every chunk's ``agentbus-artifact`` header."""
    store: str = Field(min_length=1, max_length=32)
    """Which store holds it: ``stream`` (the broker's), ``s3``, ``memory``."""
    location: str = Field(min_length=1, max_length=1024)
    name: str = Field(min_length=1, max_length=255)
    media_type: str = Field(default="application/octet-stream", min_length=1, max_length=255)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=_SHA256)
    owner: str = Field(min_length=1, max_length=255)
    """The agent id that stored it."""
    reader: str | None = None
    """The broker user it was stored for (who may read it), where the store says."""
    created_at: datetime
    expires_at: datetime | None = None
    """After this it is gone (the store's retention), or may be at any moment."""
    site: str | None = None
    """The site whose broker's stream holds it (docs/sites.md); a reader at another site
    fetches it across from the agent that stored it (``read_artifact``)."""

    def wire(self) -> dict[str, Any]:
        """The reference as JSON data, for an envelope."""
        return self.model_dump(mode="json", exclude_none=True)


def is_artifact_ref(value: object) -> bool:
    """Tell whether ``value`` (JSON data) looks like an artifact reference."""
    return (
        isinstance(value, dict)
        and value.get("kind") == "artifact"
        and isinstance(value.get("sha256"), str)
        and isinstance(value.get("location"), str)
    )


def artifact_reader(request: RequestEnvelope) -> str | None:
    """Return the broker user ``request`` names for its answer's files, or None.

    Raises:
        ValueError: ``metadata.artifact_reader`` is there but not a user's name (an id).
    """
    extra = request.metadata.model_extra
    reader = None if extra is None else extra.get(ARTIFACT_READER)
    if reader is None:
        return None
    if not isinstance(reader, str) or not is_valid_id(reader):
        raise ValueError(f"metadata.{ARTIFACT_READER} must be a broker user's name, not {reader!r}")
    return reader


def reads_by_reference(request: RequestEnvelope) -> bool:
    """Tell whether ``request``'s sender takes a result sent by reference (1.3 or later).

    An older sender is answered ``payload_too_large`` instead, as before 1.3.
    """
    match = _VERSION.match(request.protocol_version)
    if match is None:
        return False
    version = (int(match[1]), int(match[2]))
    return version >= ARTIFACTS_SINCE or version[0] > PROTOCOL_MAJOR

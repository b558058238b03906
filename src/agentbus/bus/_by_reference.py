"""Parameters and results too large for an envelope, sent by reference (since 1.3); and
the encoding of a reply, which is where a result is found too large.

The sender's bus stores the JSON as an artifact for the receiver's broker user and sends
the reference in its place, with ``metadata.by_reference`` set; the receiver's bus reads
it back, checks its digest, and hands the JSON on as if it had come inline.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentbus._exceptions import AgentBusError, EnvelopeError, InvalidParameters, PayloadTooLarge
from agentbus._logging import get_logger
from agentbus.bus._artifacts import Artifacts, artifact_of, reader_of
from agentbus.bus._stats import BusStats
from agentbus.envelopes import (
    BY_REFERENCE,
    ErrorCode,
    ErrorEnvelope,
    RequestEnvelope,
    ResponseEnvelope,
    encode,
    reads_by_reference,
)

__all__ = [
    "encoded_reply",
    "is_by_reference",
    "outsized_reply",
    "parameters_by_reference",
    "resolve_parameters",
    "resolve_result",
    "result_by_reference",
]

_JSON = "application/json"
Reply = ResponseEnvelope | ErrorEnvelope
_log = get_logger("agentbus.bus")


def is_by_reference(envelope: RequestEnvelope | ResponseEnvelope) -> bool:
    """Tell whether ``envelope``'s parameters (or result) are a reference to their JSON."""
    extra = envelope.metadata.model_extra
    return extra is not None and extra.get(BY_REFERENCE) is True


async def _stored(artifacts: Artifacts, envelope: Any, field: str, name: str, reader: str) -> Any:
    """``envelope`` with its payload's ``field`` stored as JSON for ``reader`` and sent as
    the reference to it, marked ``by_reference``."""
    body = orjson.dumps(getattr(envelope.payload, field))
    ref = await artifacts.put(body, name=name, media_type=_JSON, reader=reader)
    payload = envelope.payload.model_copy(update={field: ref.wire()})
    metadata = envelope.metadata.model_copy(update={BY_REFERENCE: True})
    return envelope.model_copy(update={"payload": payload, "metadata": metadata})


async def parameters_by_reference(
    artifacts: Artifacts, request: RequestEnvelope
) -> RequestEnvelope:
    """``request`` with its parameters stored for its receiver, and sent as a reference."""
    name = f"{request.payload.action}.parameters.json"
    # A service's user is the service (the generated definitions').
    stored: RequestEnvelope = await _stored(
        artifacts, request, "parameters", name, request.receiver_id
    )
    return stored


async def resolve_parameters(artifacts: Artifacts, request: RequestEnvelope) -> RequestEnvelope:
    """``request`` with the parameters its reference names, read back and checked.

    Raises:
        ArtifactMissing, ArtifactExpired, ArtifactCorrupt: as ``Artifacts.open``.
        InvalidParameters: the reference, or what it holds, is not a parameters object.
    """
    ref = artifact_of(request.payload.parameters)
    parameters = orjson.loads(await artifacts.read(ref))
    if not isinstance(parameters, dict):
        raise InvalidParameters("the parameters sent by reference are not a JSON object")
    payload = request.payload.model_copy(update={"parameters": parameters})
    return request.model_copy(update={"payload": payload})


async def result_by_reference(
    artifacts: Artifacts, request: RequestEnvelope, reply: ResponseEnvelope
) -> ResponseEnvelope:
    """``reply`` with its result stored for the requester's user, sent as a reference."""
    name = f"{request.payload.action}.result.json"
    stored: ResponseEnvelope = await _stored(
        artifacts, reply, "result", name, reader_of(request.sender_id)
    )
    return stored


async def resolve_result(artifacts: Artifacts, reply: ResponseEnvelope) -> ResponseEnvelope:
    """``reply`` with the result its reference names, read back and checked.

    Raises:
        ArtifactMissing, ArtifactExpired, ArtifactCorrupt: as ``Artifacts.open``.
    """
    result = orjson.loads(await artifacts.read(artifact_of(reply.payload.result)))
    payload = reply.payload.model_copy(update={"result": result})
    metadata = reply.metadata.model_copy(update={BY_REFERENCE: None})
    return reply.model_copy(update={"payload": payload, "metadata": metadata})


async def outsized_reply(
    artifacts: Artifacts | None, request: RequestEnvelope, reply: Reply, agent_id: str
) -> Reply:
    """What to send instead of ``reply``, whose envelope is over the cap: its result by
    reference, to a requester of 1.3 or later; else ``reply`` itself (which then fails as
    ``payload_too_large``); an error if storing the result failed."""
    if (
        artifacts is None
        or not isinstance(reply, ResponseEnvelope)
        or not reads_by_reference(request)
    ):
        return reply
    try:
        return await result_by_reference(artifacts, request, reply)
    except AgentBusError as exc:
        _log.warning("result not stored by reference", error=str(exc))
        return request.error(exc.code, exc.message, sender_id=agent_id, details=exc.details)


async def encoded_reply(
    request: RequestEnvelope,
    reply: Reply,
    max_size: int,
    agent_id: str,
    artifacts: Artifacts | None,
    stats: BusStats,
) -> tuple[Reply, bytes | None]:
    """Return the reply to send to ``request`` and its bytes; None: not even an error fits
    the cap. A result over the cap goes by reference where it can (``outsized_reply``)."""
    try:
        return reply, encode(reply, max_size=max_size)
    except PayloadTooLarge:
        reply = await outsized_reply(artifacts, request, reply, agent_id)
    except EnvelopeError:
        pass  # not JSON: said below
    try:
        return reply, encode(reply, max_size=max_size)
    except EnvelopeError as exc:
        # The result cannot be sent (not JSON, or over the size cap): say so instead.
        # The request was fine, so this is a processing failure, not a bad envelope.
        stats.handler_errors += 1
        code = exc.code if exc.code == ErrorCode.PAYLOAD_TOO_LARGE else None
        error = request.error(
            code or ErrorCode.PROCESSING_FAILED,
            f"the result cannot be sent: {exc.message}",
            sender_id=agent_id,
        )
        try:
            return error, encode(error, max_size=max_size)
        except EnvelopeError:
            return error, None

"""Artifacts on S3-compatible object storage (the ``s3`` extra: obstore).

For users who have a store already (AWS S3, MinIO, Ceph, R2, ...): set
``AGENTBUS_ARTIFACT_STORE=s3://<bucket>/<prefix>``; the endpoint, region and keys come
from the usual ``AWS_*`` variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``). An object is written as a multipart upload
from the chunks as they come, and read back as a stream of ranges of the body: a few
chunks in memory either way. Its key is ``<prefix>/<writer>.<reader>/<id>``, the pair of
broker users as on the broker's streams, for bucket policies by prefix.

obstore (the Rust ``object_store`` crate, as Apache Arrow and DataFusion use it) is
asynchronous, streams both ways, is typed, and is one wheel with no dependencies;
aiobotocore would bring botocore and aiohttp (tens of megabytes) for the same calls.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from agentbus._config import Settings
from agentbus._exceptions import (
    AccessRefused,
    AgentBusError,
    ArtifactMissing,
    ConfigurationError,
    ConnectionLost,
)
from agentbus.bus._stores._artifact_store import (
    ArtifactStore,
    Placement,
    Tally,
    describe,
    new_artifact_id,
)
from agentbus.envelopes import ArtifactRef

if TYPE_CHECKING:
    from obstore.store import ClientConfig, S3Store

__all__ = ["S3ArtifactStore", "configured_store"]

_PART: Final = 5 * 1024 * 1024  # S3's smallest part of a multipart upload
_PARTS_IN_FLIGHT: Final = 2
_READ_PIECE: Final = 1024 * 1024


def configured_store(settings: Settings) -> ArtifactStore | None:
    """The store the ``artifact_store`` setting names, or None for the broker's own.

    Raises:
        ConfigurationError: a store agentbus does not know, or the ``s3`` extra missing.
    """
    if settings.artifact_store is None:
        return None
    parts = urlsplit(settings.artifact_store)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigurationError(
            f"artifact_store {settings.artifact_store!r} is not s3://<bucket>[/<prefix>]"
        )
    return S3ArtifactStore(parts.netloc, parts.path.strip("/"))


class S3ArtifactStore:
    """Artifacts as objects in an S3 bucket (the ``s3`` extra)."""

    kind = "s3"
    chunk_size = _PART

    def __init__(self, bucket: str, prefix: str = "", **options: Any) -> None:
        try:
            from obstore.store import S3Store
        except ImportError as exc:  # pragma: no cover - the extra is installed in tests
            raise ConfigurationError(
                "an S3 artifact store needs the s3 extra: pip install 'agentbus[s3]'"
            ) from exc
        endpoint = options.pop("endpoint", None) or os.environ.get("AWS_ENDPOINT_URL")
        client: ClientConfig | None = None
        if endpoint and endpoint.startswith("http:"):
            client = {"allow_http": True}
        if endpoint:
            options["endpoint"] = endpoint
        self.bucket = bucket
        self.prefix = prefix
        self._store: S3Store = S3Store(bucket, client_options=client, **options)

    def __repr__(self) -> str:
        return f"<S3ArtifactStore bucket={self.bucket!r} prefix={self.prefix!r}>"

    async def put(self, chunks: AsyncIterator[bytes], placement: Placement) -> ArtifactRef:
        """Upload the object as it comes (multipart past one part); return its reference."""
        import obstore

        artifact_id = new_artifact_id()
        key = "/".join(
            part
            for part in (self.prefix, f"{placement.writer}.{placement.reader}", artifact_id)
            if part
        )
        tally = Tally(placement.max_size)

        async def counted() -> AsyncIterator[bytes]:
            async for chunk in chunks:
                tally.add(chunk)
                yield chunk

        with _mapped(None):
            await obstore.put_async(
                self._store,
                key,
                counted(),
                attributes={"Content-Type": placement.media_type},
                chunk_size=_PART,
                max_concurrency=_PARTS_IN_FLIGHT,
            )
        return placement.ref(artifact_id, self.kind, f"s3://{self.bucket}/{key}", tally)

    async def chunks(self, ref: ArtifactRef) -> AsyncIterator[bytes]:
        """Stream the object's body."""
        import obstore

        key = self._key(ref)
        with _mapped(ref):
            response = await obstore.get_async(self._store, key)
            async for chunk in response.stream(min_chunk_size=_READ_PIECE):
                yield bytes(chunk)

    async def delete(self, ref: ArtifactRef) -> bool:
        """Delete the object; return True."""
        import obstore

        with _mapped(ref):
            await obstore.delete_async(self._store, self._key(ref))
        return True

    async def aclose(self) -> None:
        """Nothing is held open."""

    def _key(self, ref: ArtifactRef) -> str:
        start = f"s3://{self.bucket}/"
        if not ref.location.startswith(start):
            raise ArtifactMissing(
                f"artifact {ref.id} is at {ref.location!r}, not in this store ({start})",
                details={**describe(ref), "reason": "missing"},
            )
        return ref.location.removeprefix(start)


@contextlib.contextmanager
def _mapped(ref: ArtifactRef | None) -> Iterator[None]:
    """Raise obstore's errors as agentbus's."""
    from obstore.exceptions import (
        BaseError,
        NotFoundError,
        PermissionDeniedError,
        UnauthenticatedError,
    )

    try:
        yield
    except AgentBusError:
        raise
    except (NotFoundError, FileNotFoundError) as exc:
        details = {"reason": "missing", **(describe(ref) if ref else {})}
        raise ArtifactMissing(f"the artifact is not in the bucket: {exc}", details=details) from exc
    except (PermissionDeniedError, UnauthenticatedError) as exc:
        raise AccessRefused(f"the object store refused access: {exc}") from exc
    except (BaseError, OSError) as exc:
        raise ConnectionLost(f"the object store failed: {exc}") from exc

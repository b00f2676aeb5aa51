"""The bundle manifest: the one root of trust of a bundle.

It lists every top-level artifact (kind, name, ref, media type, digest, size) and the release
metadata. Its bytes are canonical (sorted keys, fixed indentation) so the same inputs give the
same manifest and the same digest; signatures are detached files over those bytes, so adding one
changes nothing that is hashed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sealift.documents import load_schema, validate
from sealift.errors import IntegrityError
from sealift.hashing import sha256_bytes

API_VERSION = "sealift.dev/v1alpha1"
KIND = "BundleManifest"
SCHEMA_NAME = "bundle-manifest.v1alpha1.json"


@dataclass(frozen=True)
class Artifact:
    """One top-level artifact: an image, chart, model, file or the SBOM."""

    kind: str
    name: str
    ref: str
    media_type: str
    digest: str
    size: int
    version: str = ""
    source: str = ""
    platforms: tuple[str, ...] = ()

    @property
    def repository(self) -> str:
        """The repository part of ``ref`` (``vllm/vllm-openai`` of ``vllm/vllm-openai:v1``)."""
        return self.ref.rpartition(":")[0]

    @property
    def tag(self) -> str:
        """The tag part of ``ref``."""
        return self.ref.rpartition(":")[2]

    def is_repository(self, path: str) -> bool:
        """Whether the repository is ``path``, or ends with ``/path`` (a vendor's own prefix)."""
        return self.repository == path or self.repository.endswith("/" + path)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; empty optional fields are left out so they do not churn the digest."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "ref": self.ref,
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.version:
            out["version"] = self.version
        if self.source:
            out["source"] = self.source
        if self.platforms:
            out["platforms"] = list(self.platforms)
        return out


@dataclass(frozen=True)
class BundleManifest:
    """Release metadata, the artifacts and the totals that a verifier reports."""

    name: str
    version: str
    vendor: str
    description: str
    tool_version: str
    artifacts: tuple[Artifact, ...]
    blob_count: int
    total_bytes: int
    raw: bytes = field(default=b"", repr=False, compare=False)

    def to_json(self) -> bytes:
        """Canonical bytes: what is written, hashed and signed."""
        metadata: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.vendor:
            metadata["vendor"] = self.vendor
        if self.description:
            metadata["description"] = self.description
        document = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": metadata,
            "tool": {"name": "sealift", "version": self.tool_version},
            "artifacts": [artifact.to_dict() for artifact in self.artifacts],
            "totals": {"blobs": self.blob_count, "bytes": self.total_bytes},
        }
        return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()

    @property
    def digest(self) -> str:
        """Digest of the manifest's bytes as stored (or as it would be written)."""
        return sha256_bytes(self.raw or self.to_json())

    def artifact(self, kind: str, name: str) -> Artifact | None:
        """The artifact of ``kind`` called ``name``, if any."""
        for artifact in self.artifacts:
            if artifact.kind == kind and artifact.name == name:
                return artifact
        return None


def parse_bundle_manifest(content: bytes, *, source: str) -> BundleManifest:
    """Parse and validate a stored bundle manifest; the raw bytes are kept for signatures."""
    try:
        document = json.loads(content)
    except (ValueError, UnicodeDecodeError) as bad:
        raise IntegrityError(
            f"{source}: the bundle manifest is not valid JSON",
            hint="the bundle is damaged; copy it again from the source media",
        ) from bad
    try:
        validate(document, load_schema("sealift.bundles", SCHEMA_NAME), source=source)
    except Exception as bad:
        raise IntegrityError(
            f"bundle manifest {bad}",
            hint="the bundle is damaged or was made by an incompatible sealift",
        ) from bad
    meta = document["metadata"]
    artifacts = tuple(
        Artifact(
            kind=entry["kind"],
            name=entry["name"],
            ref=entry["ref"],
            media_type=entry["mediaType"],
            digest=entry["digest"],
            size=entry["size"],
            version=entry.get("version", ""),
            source=entry.get("source", ""),
            platforms=tuple(entry.get("platforms", ())),
        )
        for entry in document["artifacts"]
    )
    return BundleManifest(
        name=meta["name"],
        version=meta["version"],
        vendor=meta.get("vendor", ""),
        description=meta.get("description", ""),
        tool_version=document["tool"]["version"],
        artifacts=artifacts,
        blob_count=document["totals"]["blobs"],
        total_bytes=document["totals"]["bytes"],
        raw=content,
    )

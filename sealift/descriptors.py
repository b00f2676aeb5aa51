"""OCI descriptors and the graph they form: index → manifests → config and layers.

Pure functions over manifest bytes, shared by create (what to copy), verify (what must be
present) and install (what to push, children before parents).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sealift import media_types
from sealift.errors import IntegrityError
from sealift.hashing import check_digest, sha256_bytes


@dataclass(frozen=True)
class Descriptor:
    """A typed pointer to content: media type, digest and size (plus optional extras)."""

    media_type: str
    digest: str
    size: int
    platform: str = ""
    annotations: tuple[tuple[str, str], ...] = ()
    artifact_type: str = ""

    @property
    def is_index(self) -> bool:
        """Whether the content is an image index / manifest list."""
        return self.media_type in media_types.INDEXES

    @property
    def is_manifest(self) -> bool:
        """Whether the content is an image or artifact manifest."""
        return self.media_type in media_types.MANIFESTS

    def annotation(self, key: str) -> str:
        """The value of one annotation, or an empty string."""
        return dict(self.annotations).get(key, "")

    def to_dict(self) -> dict[str, Any]:
        """The descriptor as OCI JSON."""
        out: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.artifact_type:
            out["artifactType"] = self.artifact_type
        if self.platform:
            os_name, _, rest = self.platform.partition("/")
            arch, _, variant = rest.partition("/")
            platform = {"architecture": arch, "os": os_name}
            if variant:
                platform["variant"] = variant
            out["platform"] = platform
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


def platform_string(platform: dict[str, Any] | None) -> str:
    """``os/arch[/variant]`` from an OCI platform object."""
    if not platform:
        return ""
    text = f"{platform.get('os', '')}/{platform.get('architecture', '')}"
    if platform.get("variant"):
        text += f"/{platform['variant']}"
    return text


def descriptor_from_dict(entry: Any, *, where: str) -> Descriptor:
    """Parse one descriptor object; malformed ones are integrity errors naming ``where``."""
    try:
        annotations = entry.get("annotations") or {}
        descriptor = Descriptor(
            media_type=str(entry["mediaType"]),
            digest=check_digest(entry["digest"], what=f"{where} digest"),
            size=int(entry["size"]),
            platform=platform_string(entry.get("platform")),
            annotations=tuple(sorted((str(k), str(v)) for k, v in annotations.items())),
            artifact_type=str(entry.get("artifactType", "")),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as bad:
        raise IntegrityError(
            f"{where}: malformed descriptor ({type(bad).__name__}: {bad})",
            hint="the manifest is damaged or not an OCI/Docker manifest",
        ) from bad
    except Exception as bad:
        raise IntegrityError(f"{where}: malformed descriptor ({bad})") from bad
    if descriptor.size < 0:
        raise IntegrityError(f"{where}: negative size in descriptor {descriptor.digest}")
    return descriptor


def load_json(content: bytes, *, where: str) -> dict[str, Any]:
    """Parse a manifest/index/config document."""
    try:
        document = json.loads(content)
    except (ValueError, UnicodeDecodeError) as bad:
        raise IntegrityError(f"{where} is not valid JSON", hint="the content is damaged") from bad
    if not isinstance(document, dict):
        raise IntegrityError(f"{where} is not a JSON object", hint="the content is damaged")
    return document


def media_type_of(content: bytes, declared: str, *, where: str) -> str:
    """The media type of a manifest: its own ``mediaType`` field, else what was declared."""
    document = load_json(content, where=where)
    own = document.get("mediaType")
    if own:
        return str(own)
    if "manifests" in document:
        return media_types.OCI_INDEX
    if "layers" in document or "config" in document:
        return media_types.OCI_MANIFEST
    return declared


@dataclass(frozen=True)
class Children:
    """What a manifest or index points at."""

    manifests: tuple[Descriptor, ...] = ()
    config: Descriptor | None = None
    layers: tuple[Descriptor, ...] = ()
    subject: Descriptor | None = None
    blobs: tuple[Descriptor, ...] = field(default=())

    @property
    def all(self) -> tuple[Descriptor, ...]:
        """Every child descriptor, config first."""
        out: list[Descriptor] = list(self.manifests)
        if self.config is not None:
            out.append(self.config)
        out.extend(self.layers)
        return tuple(out)


def children_of(content: bytes, media_type: str, *, where: str) -> Children:
    """Parse a manifest or index and list its children; anything else has none."""
    if media_type in media_types.INDEXES:
        document = load_json(content, where=where)
        entries = document.get("manifests")
        if not isinstance(entries, list):
            raise IntegrityError(f"{where}: index without a manifests list")
        return Children(
            manifests=tuple(
                descriptor_from_dict(e, where=f"{where} manifests[{i}]")
                for i, e in enumerate(entries)
            )
        )
    if media_type in media_types.MANIFESTS:
        document = load_json(content, where=where)
        if "config" not in document or not isinstance(document.get("layers", []), list):
            raise IntegrityError(f"{where}: manifest without config or layers")
        return Children(
            config=descriptor_from_dict(document["config"], where=f"{where} config"),
            layers=tuple(
                descriptor_from_dict(e, where=f"{where} layers[{i}]")
                for i, e in enumerate(document.get("layers") or [])
            ),
        )
    return Children()


def canonical_json(document: Any) -> bytes:
    """Deterministic JSON bytes for the manifests sealift writes itself."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


EMPTY_CONFIG = b"{}"


def artifact_manifest(
    *,
    artifact_type: str,
    layers: list[Descriptor],
    config_media_type: str = media_types.OCI_EMPTY,
    config: bytes = EMPTY_CONFIG,
    annotations: dict[str, str] | None = None,
    subject: Descriptor | None = None,
) -> bytes:
    """An OCI 1.1 artifact manifest (an image manifest with ``artifactType``)."""
    document: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": media_types.OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {
            "mediaType": config_media_type,
            "digest": sha256_bytes(config),
            "size": len(config),
        },
        "layers": [layer.to_dict() for layer in layers],
    }
    if annotations:
        document["annotations"] = dict(annotations)
    if subject is not None:
        document["subject"] = subject.to_dict()
    return canonical_json(document)

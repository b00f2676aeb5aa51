"""``sealift bundle inspect``: what a bundle holds, read from its small files only.

Inspect is cheap and does not re-hash blobs (``verify`` does): it reads the bundle manifest, the
SBOM and the parts index, and says which signatures are present.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sealift.bundles import layout
from sealift.bundles.blob_source import BlobSource, TarSource
from sealift.bundles.bundle_manifest import BundleManifest, parse_bundle_manifest
from sealift.descriptors import children_of
from sealift.errors import IntegrityError
from sealift.hashing import sha256_bytes
from sealift.units import format_bytes


@dataclass(frozen=True)
class InspectReport:
    """The contents of a bundle as its manifest declares them."""

    bundle: str
    manifest: BundleManifest
    manifest_digest: str
    form: str
    parts: tuple[tuple[str, int], ...]
    signatures: tuple[str, ...]
    sbom_components: int
    content_bytes: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON for machines."""
        m = self.manifest
        return {
            "bundle": self.bundle,
            "form": self.form,
            "name": m.name,
            "version": m.version,
            "vendor": m.vendor,
            "builtWith": f"sealift {m.tool_version}",
            "bundleManifestDigest": self.manifest_digest,
            "totals": {"blobs": m.blob_count, "bytes": m.total_bytes},
            "artifacts": [
                {**a.to_dict(), "contentBytes": self.content_bytes.get(a.ref, 0)}
                for a in m.artifacts
            ],
            "parts": [{"name": n, "size": s} for n, s in self.parts],
            "signatures": list(self.signatures),
            "sbomComponents": self.sbom_components,
            "verified": False,
        }

    def lines(self) -> list[str]:
        """A table for a person."""
        m = self.manifest
        out = [
            f"bundle    {m.name} {m.version}" + (f" from {m.vendor}" if m.vendor else ""),
            f"form      {self.form}",
            f"manifest  {self.manifest_digest} (built with sealift {m.tool_version})",
            f"content   {len(m.artifacts)} artifacts, {m.blob_count} blobs,"
            f" {format_bytes(m.total_bytes)}",
            f"sbom      CycloneDX 1.6, {self.sbom_components} components",
            "signatures " + (", ".join(self.signatures) if self.signatures else "none"),
            "",
            f"{'KIND':<7} {'REF':<48} {'DIGEST':<19} SIZE",
        ]
        for artifact in m.artifacts:
            out.append(
                f"{artifact.kind:<7} {artifact.ref:<48} {artifact.digest[:19]:<19}"
                f" {format_bytes(self.content_bytes.get(artifact.ref, 0))}"
            )
        if self.parts:
            out.append("")
            out.extend(f"part    {name}  {format_bytes(size)}" for name, size in self.parts)
        out.append("")
        out.append("not verified: run 'sealift bundle verify' to re-hash every blob")
        return out


def _sbom_components(source: BlobSource, manifest: BundleManifest) -> int:
    sbom = next((a for a in manifest.artifacts if a.kind == "sbom"), None)
    if sbom is None:
        return 0
    try:
        content = source.read_small(layout.blob_name(sbom.digest))
        layers = children_of(content, sbom.media_type, where="sbom manifest").layers
        document = json.loads(source.read_small(layout.blob_name(layers[0].digest)))
    except (KeyError, IndexError, ValueError, IntegrityError):
        return 0

    def count(components: list[dict[str, Any]]) -> int:
        return sum(1 + count(c.get("components") or []) for c in components)

    return count(document.get("components") or [])


def _content_bytes(source: BlobSource, digest: str, media_type: str, size: int) -> int:
    """Bytes of an artifact and everything under it, from its manifests alone."""
    seen: set[str] = set()

    def walk(digest: str, media_type: str, size: int) -> int:
        if digest in seen:
            return 0
        seen.add(digest)
        total = size
        try:
            content = source.read_small(layout.blob_name(digest), limit=4 * 1024 * 1024)
        except (KeyError, IntegrityError):
            return total
        try:
            children = children_of(content, media_type, where=digest)
        except IntegrityError:
            return total
        for child in children.all:
            if child.is_index or child.is_manifest:
                total += walk(child.digest, child.media_type, child.size)
            elif child.digest not in seen:
                seen.add(child.digest)
                total += child.size
        return total

    return walk(digest, media_type, size)


def inspect_bundle(source: BlobSource) -> InspectReport:
    """Describe a bundle without re-hashing it."""
    if not source.has(layout.BUNDLE_MANIFEST_FILE):
        raise IntegrityError(
            f"{source.description} has no {layout.BUNDLE_MANIFEST_FILE}: not a complete bundle",
            hint="bundle create may have been interrupted; run it again",
        )
    raw = source.read_small(layout.BUNDLE_MANIFEST_FILE)
    manifest = parse_bundle_manifest(raw, source=source.description)
    parts: tuple[tuple[str, int], ...] = ()
    form = "directory"
    if isinstance(source, TarSource):
        form = "tar"
        if source.parts:
            form = f"split tar, {len(source.parts)} parts"
            parts = tuple((p.name, p.size) for p in source.parts)
    signatures = tuple(n for n in source.names() if layout.is_signature_name(n))
    return InspectReport(
        bundle=source.description,
        manifest=manifest,
        manifest_digest=sha256_bytes(raw),
        form=form,
        parts=parts,
        signatures=signatures,
        sbom_components=_sbom_components(source, manifest),
        content_bytes={
            a.ref: _content_bytes(source, a.digest, a.media_type, a.size)
            for a in manifest.artifacts
        },
    )

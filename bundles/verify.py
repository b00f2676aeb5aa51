"""``sealift bundle verify``: every blob re-hashed once, the whole graph checked, evidence printed.

Reads the bundle in place through a :class:`BlobSource`. The small documents (bundle manifest,
index, manifests) are checked as the graph is walked; every other blob is then hashed once, in
parallel. Every problem names the blob, the artifact that needs it and where it lives (the part
file of a split tar), so one bad part can be found and copied again alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sealift import media_types
from sealift.bundles import layout
from sealift.bundles.blob_source import BlobSource, TarSource
from sealift.bundles.bundle_manifest import Artifact, BundleManifest, parse_bundle_manifest
from sealift.descriptors import Descriptor, children_of, descriptor_from_dict, load_json
from sealift.errors import IntegrityError, SealiftError
from sealift.hashing import copy_stream, sha256_bytes
from sealift.progress import Progress

if TYPE_CHECKING:
    from sealift.signing.trust_policy import TrustPolicy
from sealift.units import format_bytes

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a bundle, with enough context to act on it."""

    kind: str  # missing, extra, size, digest, index, manifest, part
    subject: str  # a digest or a file name
    artifacts: tuple[str, ...]
    location: str
    message: str

    def one_line(self) -> str:
        """The problem as one line for a person."""
        owners = f" (needed by {', '.join(self.artifacts)})" if self.artifacts else ""
        where = f" [{self.location}]" if self.location else ""
        return f"{self.kind}: {self.subject}{owners}{where}: {self.message}"


@dataclass(frozen=True)
class VerifyReport:
    """What verify checked and what it found."""

    bundle: str
    manifest: BundleManifest | None
    manifest_digest: str
    artifacts: int
    blobs: int
    bytes: int
    parts_checked: int
    signatures: tuple[str, ...]
    problems: tuple[Problem, ...]
    trust: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the bundle is complete and intact."""
        return not self.problems

    def summary(self) -> str:
        """The last line: evidence of what was verified, for a security officer."""
        release = f"{self.manifest.name} {self.manifest.version}" if self.manifest else "bundle"
        parts = f", {self.parts_checked} parts" if self.parts_checked else ""
        if self.trust and self.ok:
            parts += f", signatures checked under {self.trust[0]}"
        verdict = "verified" if self.ok else f"FAILED with {len(self.problems)} problem(s)"
        return (
            f"{verdict}: {release}: {self.artifacts} artifacts, {self.blobs} blobs,"
            f" {self.bytes} bytes ({format_bytes(self.bytes)}){parts};"
            f" bundle manifest {self.manifest_digest}"
        )

    def to_dict(self) -> dict[str, object]:
        """The report as JSON for machines."""
        return {
            "bundle": self.bundle,
            "ok": self.ok,
            "name": self.manifest.name if self.manifest else None,
            "version": self.manifest.version if self.manifest else None,
            "bundleManifestDigest": self.manifest_digest,
            "artifacts": self.artifacts,
            "blobs": self.blobs,
            "bytes": self.bytes,
            "partsChecked": self.parts_checked,
            "signatures": list(self.signatures),
            "trust": list(self.trust),
            "problems": [
                {
                    "kind": p.kind,
                    "subject": p.subject,
                    "artifacts": list(p.artifacts),
                    "location": p.location,
                    "message": p.message,
                }
                for p in self.problems
            ],
        }


@dataclass
class _Expected:
    size: int
    media_type: str
    owners: set[str] = field(default_factory=set)
    checked: bool = False


def _label(artifact: Artifact) -> str:
    return f"{artifact.kind} {artifact.ref}"


class _Walker:
    def __init__(self, source: BlobSource) -> None:
        self.source = source
        self.expected: dict[str, _Expected] = {}
        self.problems: list[Problem] = []
        self.named_data: dict[str, str] = {}  # tar data name -> expected digest

    def problem(self, kind: str, subject: str, owners: set[str], message: str) -> None:
        location = ""
        name = layout.blob_name(subject) if subject.startswith("sha256:") else subject
        if self.source.has(name):
            location = self.source.location(name)
        self.problems.append(Problem(kind, subject, tuple(sorted(owners)), location, message))

    def visit(self, descriptor: Descriptor, owner: str) -> None:
        known = self.expected.get(descriptor.digest)
        if known is not None:
            known.owners.add(owner)
            if known.size != descriptor.size:
                self.problem("graph", descriptor.digest, {owner}, "descriptors disagree on size")
            return
        entry = _Expected(descriptor.size, descriptor.media_type, {owner})
        self.expected[descriptor.digest] = entry
        name = layout.blob_name(descriptor.digest)
        if not self.source.has(name):
            self.problem("missing", descriptor.digest, {owner}, f"{descriptor.media_type} blob")
            entry.checked = True
            return
        actual = self.source.size(name)
        if actual != descriptor.size:
            self.problem(
                "size", descriptor.digest, {owner}, f"{actual} bytes, expected {descriptor.size}"
            )
            entry.checked = True
            return
        if descriptor.media_type not in media_types.MANIFESTS | media_types.INDEXES:
            return
        if descriptor.size > MAX_DOCUMENT_BYTES:
            self.problem("manifest", descriptor.digest, {owner}, "manifest is implausibly large")
            entry.checked = True
            return
        content = self.source.read_small(name)
        entry.checked = True
        if sha256_bytes(content) != descriptor.digest:
            self.problem("digest", descriptor.digest, {owner}, "manifest content does not match")
            return
        try:
            children = children_of(content, descriptor.media_type, where=descriptor.digest)
        except SealiftError as bad:
            self.problem("manifest", descriptor.digest, {owner}, bad.message)
            return
        for child in children.all:
            self.visit(child, owner)
        if owner.startswith(("model ", "file ")):
            self._note_named_data(owner, children.layers)

    def _note_named_data(self, owner: str, layers: tuple[Descriptor, ...]) -> None:
        # A tar keeps model and extra files under readable names; map them to their digests.
        ref = owner.split(" ", 1)[1]
        for layer in layers:
            if owner.startswith("model "):
                name, _, version = ref.removeprefix("models/").partition(":")
                path = layer.annotation(media_types.MODEL_FILEPATH_ANNOTATION)
                if path:
                    self.named_data[layout.model_data_name(name, version, path)] = layer.digest
            else:
                title = layer.annotation(media_types.TITLE_ANNOTATION)
                if title:
                    self.named_data[layout.file_data_name(title)] = layer.digest


def _check_index(source: BlobSource, manifest: BundleManifest, walker: _Walker) -> None:
    try:
        index = load_json(source.read_small(layout.INDEX_FILE), where="index.json")
        entries = [
            descriptor_from_dict(e, where=f"index.json manifests[{i}]")
            for i, e in enumerate(index.get("manifests") or [])
        ]
    except (SealiftError, KeyError) as bad:
        walker.problem("index", layout.INDEX_FILE, set(), str(bad))
        return
    by_ref = {e.annotation(media_types.REF_NAME_ANNOTATION): e for e in entries}
    wanted = {a.ref for a in manifest.artifacts}
    for artifact in manifest.artifacts:
        entry = by_ref.get(artifact.ref)
        if entry is None:
            walker.problem("index", layout.INDEX_FILE, {_label(artifact)}, "artifact not listed")
        elif (entry.digest, entry.size) != (artifact.digest, artifact.size):
            walker.problem(
                "index",
                layout.INDEX_FILE,
                {_label(artifact)},
                f"lists {entry.digest}, the bundle manifest says {artifact.digest}",
            )
    for ref in sorted(set(by_ref) - wanted):
        walker.problem("index", layout.INDEX_FILE, set(), f"lists {ref!r}, which is not signed")


def _hash_parts(source: TarSource, jobs: int, progress: Progress) -> list[Problem]:
    problems = []
    total = sum(part.size for part in source.parts)
    with progress.task("verify parts", total) as bar, ThreadPoolExecutor(jobs) as pool:

        def one(path: Path, expected: str) -> str | None:
            hasher = hashlib.sha256()
            with path.open("rb") as handle:
                while chunk := handle.read(4 << 20):
                    hasher.update(chunk)
                    bar.update(len(chunk))
            return None if hasher.hexdigest() == expected else hasher.hexdigest()

        futures = {
            path: pool.submit(one, path, part.sha256)
            for path, part in zip(source.part_paths, source.parts, strict=True)
        }
        for path, future in futures.items():
            actual = future.result()
            if actual is not None:
                problems.append(
                    Problem(
                        "part", path.name, (), str(path), f"sha256 {actual} differs; copy again"
                    )
                )
    return problems


def _check_trust(
    source: BlobSource,
    manifest: BundleManifest,
    policy: TrustPolicy,
    *,
    allow_rollback: bool,
    progress: Progress,
) -> tuple[list[str], list[Problem]]:
    """Signatures under the policy; the blobs were already hashed, so nothing is read twice."""
    from sealift.signing.trust_policy import check_minimum_version
    from sealift.signing.weights import check_bundle_signatures, check_model_signatures

    lines = [policy.source]
    problems: list[Problem] = []

    def record(subject: str, action: Callable[[], str]) -> None:
        try:
            lines.append(action())
        except SealiftError as bad:
            problems.append(Problem("signature", subject, (), "", bad.one_line()))

    if policy.bundles.required or policy.bundles.optional:

        def bundle_check() -> str:
            verdict = check_bundle_signatures(source, manifest, policy)
            return f"bundle manifest signed by {', '.join(verdict.signers())}"

        record(layout.BUNDLE_MANIFEST_FILE, bundle_check)
    if policy.weights.required or policy.weights.optional:
        for artifact in manifest.artifacts:
            if artifact.kind != "model":
                continue

            def model_check(artifact: Artifact = artifact) -> str:
                _, verdict, _ = check_model_signatures(source, artifact, policy.weights, policy)
                signers = ", ".join(verdict.signers())
                return f"model {artifact.name} {artifact.version} signed by {signers}"

            record(f"model {artifact.name} {artifact.version}", model_check)
    try:
        check_minimum_version(policy, manifest.name, manifest.version)
    except SealiftError as bad:
        if not allow_rollback:
            problems.append(Problem("rollback", manifest.version, (), "", bad.one_line()))
        else:
            progress.note(f"rollback allowed by --allow-rollback: {bad.message}", level="warning")
    return lines, problems


def verify_bundle(
    source: BlobSource,
    *,
    jobs: int = 2,
    progress: Progress | None = None,
    parts: bool = False,
    policy: TrustPolicy | None = None,
    allow_rollback: bool = False,
    hash_blobs: bool = True,
) -> VerifyReport:
    """Verify a bundle completely; problems are collected, not raised, so all are reported.

    With ``hash_blobs=False`` only the graph (presence, sizes, small documents) and the
    signatures are checked: install hashes each blob while it moves instead of reading it twice.
    """
    progress = progress or Progress()
    if not source.has(layout.BUNDLE_MANIFEST_FILE):
        raise IntegrityError(
            f"{source.description} has no {layout.BUNDLE_MANIFEST_FILE}: not a complete bundle",
            hint="bundle create may have been interrupted; run it again, or copy the bundle again",
        )
    raw = source.read_small(layout.BUNDLE_MANIFEST_FILE)
    manifest = parse_bundle_manifest(raw, source=source.description)
    walker = _Walker(source)
    if not source.has(layout.OCI_LAYOUT_FILE):
        walker.problem("missing", layout.OCI_LAYOUT_FILE, set(), "not an OCI image layout")
    else:
        try:
            json.loads(source.read_small(layout.OCI_LAYOUT_FILE))["imageLayoutVersion"]
        except (ValueError, KeyError, TypeError):
            walker.problem("index", layout.OCI_LAYOUT_FILE, set(), "unreadable oci-layout file")
    _check_index(source, manifest, walker)
    for artifact in manifest.artifacts:
        walker.visit(
            Descriptor(artifact.media_type, artifact.digest, artifact.size), _label(artifact)
        )

    signatures: list[str] = []
    for name in source.names():
        digest = layout.digest_of_blob_name(name)
        if digest is not None:
            if digest not in walker.expected:
                walker.problem("extra", digest, set(), "blob not referenced by any artifact")
        elif layout.is_signature_name(name):
            signatures.append(name)
        elif layout.is_named_data(name) and name in walker.named_data:
            blob = layout.blob_name(walker.named_data[name])
            if source.has(blob) and source.same_storage(name, blob):
                continue
            # A second stored copy (the same file in two models): check it too.
            walker.expected.setdefault(
                name, _Expected(source.size(name), "", {f"stored copy {name}"})
            )
        elif name not in layout.TOP_LEVEL_FILES:
            walker.problem("extra", name, set(), "file that does not belong to a bundle")

    # Largest first, so the workers finish together instead of one core hashing the last big blob.
    to_hash = sorted(
        ((d, e) for d, e in walker.expected.items() if not e.checked),
        key=lambda item: -item[1].size,
    )
    if not hash_blobs:
        to_hash = []
    total = sum(e.size for _, e in to_hash)

    def check(item: tuple[str, _Expected], on_bytes: Callable[[int], None]) -> Problem | None:
        key, entry = item
        name = layout.blob_name(key) if key.startswith("sha256:") else key
        expected_digest = key if key.startswith("sha256:") else walker.named_data[key]
        try:
            with source.open(name) as reader:
                copy_stream(
                    reader,
                    (),
                    expected_digest=expected_digest,
                    expected_size=entry.size,
                    what=name,
                    on_bytes=on_bytes,
                )
        except IntegrityError as bad:
            return Problem(
                "digest", key, tuple(sorted(entry.owners)), source.location(name), bad.message
            )
        except OSError as unreadable:
            # Damaged transfer media: say which blob and where, and go on with the others.
            return Problem(
                "read",
                key,
                tuple(sorted(entry.owners)),
                source.location(name),
                f"cannot be read ({unreadable.strerror or unreadable})",
            )
        return None

    if to_hash:
        with progress.task("verify", total) as bar, ThreadPoolExecutor(max(jobs, 1)) as pool:
            for found in pool.map(lambda item: check(item, bar.update), to_hash):
                if found is not None:
                    walker.problems.append(found)

    parts_checked = 0
    if parts and isinstance(source, TarSource) and source.parts:
        walker.problems.extend(_hash_parts(source, jobs, progress))
        parts_checked = len(source.parts)

    blob_digests = [d for d in walker.expected if d.startswith("sha256:")]
    blob_bytes = sum(walker.expected[d].size for d in blob_digests)
    if (len(blob_digests), blob_bytes) != (manifest.blob_count, manifest.total_bytes):
        walker.problem(
            "manifest",
            layout.BUNDLE_MANIFEST_FILE,
            set(),
            f"totals say {manifest.blob_count} blobs / {manifest.total_bytes} bytes, the graph"
            f" has {len(blob_digests)} / {blob_bytes}",
        )
    trust: list[str] = []
    if policy is not None:
        trust, signature_problems = _check_trust(
            source, manifest, policy, allow_rollback=allow_rollback, progress=progress
        )
        walker.problems.extend(signature_problems)
    return VerifyReport(
        trust=tuple(trust),
        bundle=source.description,
        manifest=manifest,
        manifest_digest=sha256_bytes(raw),
        artifacts=len(manifest.artifacts),
        blobs=len(blob_digests),
        bytes=blob_bytes,
        parts_checked=parts_checked,
        signatures=tuple(signatures),
        problems=tuple(walker.problems),
    )

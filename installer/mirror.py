"""Load the customer's registry mirror from a bundle: every blob once, hashed as it moves.

For each image and chart (and, on request, model artifact) of the bundle: the tag is checked
first (already there with the same digest: nothing to do; another digest: the tag policy
decides), then every blob is HEADed, mounted from another repository of the mirror that has it,
or uploaded in one streaming PUT that hashes it on the way; blobs go in parallel under an
adaptive limit that halves when the registry pushes back. Manifests go after their blobs and the
tag last, so the mirror never shows a tag whose blobs are incomplete. Re-running after a kill
moves only what is missing.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import BinaryIO

from sealift import media_types
from sealift.audit_log import AuditLog
from sealift.bundles import layout
from sealift.bundles.blob_source import BlobSource
from sealift.bundles.bundle_manifest import Artifact, BundleManifest
from sealift.descriptors import EMPTY_CONFIG, Descriptor, artifact_manifest, children_of
from sealift.errors import InputError, IntegrityError
from sealift.hashing import sha256_bytes
from sealift.image_reference import parse_reference
from sealift.progress import Progress
from sealift.registry_client import RegistryClient
from sealift.retry import AdaptiveConcurrency

TAG_POLICIES = ("skip", "overwrite", "error")


@dataclass(frozen=True)
class MirrorTarget:
    """``registry.corp.internal[:port][/prefix]``."""

    registry: str
    prefix: str = ""

    def repository(self, name: str) -> str:
        """The mirror repository for a bundle repository name."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def __str__(self) -> str:
        return f"{self.registry}/{self.prefix}" if self.prefix else self.registry


def mirror_reference(target: MirrorTarget, artifact: Artifact) -> str:
    """Where ``install`` puts a bundle image: ``host/prefix/repository@digest``, pinned."""
    return f"{target.registry}/{target.repository(artifact.repository)}@{artifact.digest}"


def parse_mirror_target(text: str) -> MirrorTarget:
    """Parse ``--registry``; the host is required, the prefix optional."""
    host, _, prefix = text.strip().partition("/")
    if not host or "://" in text or " " in text:
        raise InputError(
            f"--registry {text!r} is not host[:port][/prefix]",
            hint="e.g. registry.corp.internal/llm, without https://",
        )
    if prefix:
        parse_reference(f"{prefix}/x:1", local=True, what=f"--registry prefix {prefix!r}")
    return MirrorTarget(host, prefix.strip("/"))


@dataclass
class ArtifactPush:
    """What one artifact needs in the mirror, children first."""

    artifact: Artifact
    repository: str
    tag: str
    documents: list[Descriptor] = field(default_factory=list)  # manifests, children first
    blobs: list[Descriptor] = field(default_factory=list)
    contents: dict[str, bytes] = field(default_factory=dict)
    # Small blobs that are not in the bundle's layout (signature files, an empty config).
    inline: dict[str, bytes] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.artifact.kind} {self.artifact.ref}"


@dataclass(frozen=True)
class MirrorResult:
    """Counts for the summary."""

    artifacts: int
    tags_written: int
    tags_unchanged: int
    blobs_uploaded: int
    blobs_present: int
    blobs_mounted: int
    bytes_uploaded: int


def _plan_artifact(source: BlobSource, artifact: Artifact, target: MirrorTarget) -> ArtifactPush:
    repository_name, _, tag = artifact.ref.rpartition(":")
    push = ArtifactPush(artifact, target.repository(repository_name), tag)
    seen: set[str] = set()

    def read(descriptor: Descriptor) -> bytes:
        name = layout.blob_name(descriptor.digest)
        content = source.read_small(name)
        if sha256_bytes(content) != descriptor.digest:
            raise IntegrityError(
                f"{push.label}: manifest {descriptor.digest} does not match its digest"
                f" [{source.location(name)}]",
                hint="the bundle is damaged; run bundle verify",
            )
        return content

    def walk(descriptor: Descriptor) -> None:
        if descriptor.digest in seen:
            return
        seen.add(descriptor.digest)
        if descriptor.is_index or descriptor.is_manifest:
            content = read(descriptor)
            push.contents[descriptor.digest] = content
            for child in children_of(content, descriptor.media_type, where=push.label).all:
                walk(child)
            push.documents.append(descriptor)  # after its children
            return
        name = layout.blob_name(descriptor.digest)
        if not source.has(name) or source.size(name) != descriptor.size:
            raise IntegrityError(
                f"{push.label}: blob {descriptor.digest} is missing or has the wrong size",
                hint="the bundle is incomplete; run bundle verify",
            )
        push.blobs.append(descriptor)

    walk(Descriptor(artifact.media_type, artifact.digest, artifact.size))
    return push


def signature_tag(model_digest: str) -> str:
    """The tag a model's signatures are kept under in a registry (cosign's fallback scheme for
    registries without the referrers API)."""
    return model_digest.replace(":", "-") + ".sig"


def _plan_signatures(
    source: BlobSource, model: Artifact, push: ArtifactPush
) -> ArtifactPush | None:
    """The model's signature files as an OCI artifact whose subject is the model."""
    prefix = layout.model_signature_prefix(model.name, model.version)
    files = [
        (n, source.read_signature(n)) for n in source.signature_names() if n.startswith(prefix)
    ]
    if not files:
        return None
    layers = [
        Descriptor(
            media_types.SIGSTORE_BUNDLE,
            sha256_bytes(body),
            len(body),
            annotations=((media_types.TITLE_ANNOTATION, name[len(prefix) :]),),
        )
        for name, body in files
    ]
    subject = Descriptor(model.media_type, model.digest, model.size)
    content = artifact_manifest(
        artifact_type=media_types.SIGSTORE_BUNDLE, layers=layers, subject=subject
    )
    digest = sha256_bytes(content)
    tag = signature_tag(model.digest)
    document = Descriptor(media_types.OCI_MANIFEST, digest, len(content))
    config = Descriptor(media_types.OCI_EMPTY, sha256_bytes(EMPTY_CONFIG), len(EMPTY_CONFIG))
    inline = {layer.digest: body for layer, (_, body) in zip(layers, files, strict=True)}
    inline[config.digest] = EMPTY_CONFIG
    return ArtifactPush(
        artifact=Artifact(
            "signatures",
            model.name,
            f"{model.ref}.sig",
            media_types.OCI_MANIFEST,
            digest,
            len(content),
        ),
        repository=push.repository,
        tag=tag,
        documents=[document],
        blobs=[config, *layers],
        contents={digest: content},
        inline=inline,
    )


def plan_mirror(
    source: BlobSource, manifest: BundleManifest, target: MirrorTarget, *, models: bool
) -> list[ArtifactPush]:
    """Every artifact to push with its documents and blobs (reads manifests only).

    Models (on request) go with their signatures, so a node can prefetch from the registry
    under the same trust policy as from the object store.
    """
    kinds = {"image", "chart", "sbom"} | ({"model"} if models else set())
    plans = []
    for artifact in manifest.artifacts:
        if artifact.kind not in kinds:
            continue
        push = _plan_artifact(source, artifact, target)
        plans.append(push)
        if artifact.kind == "model":
            signatures = _plan_signatures(source, artifact, push)
            if signatures is not None:
                plans.append(signatures)
    return plans


def push_mirror(
    source: BlobSource,
    plans: list[ArtifactPush],
    client: RegistryClient,
    *,
    jobs: int,
    tag_policy: str,
    progress: Progress,
    audit: AuditLog,
    before_tags: Callable[[], None] = lambda: None,
) -> MirrorResult:
    """Push the planned artifacts; blobs in parallel, manifests after, tags last.

    ``before_tags`` runs once every blob is in place and before any manifest is written, so a
    failure in it (the weight upload) still leaves no tag behind.
    """
    if tag_policy not in TAG_POLICIES:
        raise InputError(f"--existing-tags {tag_policy!r}", hint="one of: skip, overwrite, error")
    pending: list[ArtifactPush] = []
    unchanged = 0
    for push in plans:
        current = client.manifest_digest(push.repository, push.tag)
        if current == push.artifact.digest:
            unchanged += 1
            audit.record("tag-unchanged", repository=push.repository, tag=push.tag, digest=current)
            continue
        if current is not None and tag_policy == "error":
            raise InputError(
                f"{client.registry}/{push.repository}:{push.tag} already points at {current}",
                hint="pass --existing-tags overwrite to replace it, or skip to keep it",
            )
        if current is not None and tag_policy == "skip":
            progress.note(
                f"keeping {push.repository}:{push.tag} ({current}); the bundle has"
                f" {push.artifact.digest}",
                level="warning",
            )
            audit.record("tag-kept", repository=push.repository, tag=push.tag, digest=current)
            unchanged += 1
            continue
        pending.append(push)

    # Which repositories need which blob; each blob is uploaded once and mounted elsewhere.
    inline = {digest: body for push in pending for digest, body in push.inline.items()}
    needs: dict[str, list[tuple[str, Descriptor, str]]] = {}
    for push in pending:
        for blob in push.blobs:
            needs.setdefault(blob.digest, []).append((push.repository, blob, push.label))
    counts = {"uploaded": 0, "present": 0, "mounted": 0, "bytes": 0}
    lock = threading.Lock()
    limiter = AdaptiveConcurrency(jobs)
    # Each retry the client makes is a registry pushing back: fewer parallel uploads.
    client.retry_listeners.append(lambda _text: limiter.back_off())
    try:
        total = sum(entries[0][1].size for entries in needs.values())
        with progress.task("push", total) as bar:

            def one_blob(digest: str) -> None:
                entries = needs[digest]
                home: str | None = None
                for repository, blob, label in entries:
                    if client.blob_size(repository, digest) is not None:
                        home = home or repository
                        with lock:
                            counts["present"] += 1
                        audit.record(
                            "blob-present", repository=repository, digest=digest, size=blob.size
                        )
                        continue
                    if home is not None and client.mount_blob(repository, digest, home):
                        with lock:
                            counts["mounted"] += 1
                        audit.record(
                            "blob-mounted", repository=repository, digest=digest, source=home
                        )
                        continue
                    if digest in inline:
                        where, opener = "signature", _bytes_opener(inline[digest])
                    else:
                        where = source.location(layout.blob_name(digest))
                        opener = _opener(source, digest)
                    with limiter:
                        client.upload_blob(
                            repository,
                            digest,
                            blob.size,
                            opener,
                            what=f"blob {digest} of {label} [{where}]",
                            on_bytes=bar.update,
                        )
                    home = repository
                    with lock:
                        counts["uploaded"] += 1
                        counts["bytes"] += blob.size
                    audit.record(
                        "blob-uploaded", repository=repository, digest=digest, size=blob.size
                    )

            with ThreadPoolExecutor(max(jobs, 1), thread_name_prefix="push") as pool:
                for future in [pool.submit(one_blob, digest) for digest in needs]:
                    future.result()
    finally:
        client.retry_listeners.pop()

    before_tags()
    tags = 0
    for push in pending:
        for document in push.documents:
            is_root = document.digest == push.artifact.digest
            client.put_manifest(
                push.repository,
                document.digest,
                push.contents[document.digest],
                document.media_type,
            )
            if is_root:
                # The tag last: only now is everything it points at in place.
                client.put_manifest(
                    push.repository, push.tag, push.contents[document.digest], document.media_type
                )
                tags += 1
                audit.record(
                    "tag-written", repository=push.repository, tag=push.tag, digest=document.digest
                )
    return MirrorResult(
        artifacts=len(plans),
        tags_written=tags,
        tags_unchanged=unchanged,
        blobs_uploaded=counts["uploaded"],
        blobs_present=counts["present"],
        blobs_mounted=counts["mounted"],
        bytes_uploaded=counts["bytes"],
    )


def _bytes_opener(content: bytes) -> Callable[[], BinaryIO]:
    return lambda: io.BytesIO(content)


def _opener(source: BlobSource, digest: str) -> Callable[[], BinaryIO]:
    name = layout.blob_name(digest)
    return lambda: source.open(name)

"""Where images come from: a registry, an OCI layout folder, or an image archive tarball.

Each source is reduced to the same thing, a :class:`ResolvedImage`: the root descriptor stored in
the bundle, the small manifest documents (already verified), and the blobs to stream. Multi-arch
indexes are reduced to the requested platforms here, unless the image asks to keep them whole.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from sealift import media_types
from sealift.bundles import layout
from sealift.bundles.blob_source import BlobSource, DirectorySource, TarSource
from sealift.bundles.bundle_file import ImageSpec
from sealift.descriptors import (
    Descriptor,
    canonical_json,
    children_of,
    descriptor_from_dict,
    load_json,
    media_type_of,
)
from sealift.errors import InputError, IntegrityError
from sealift.hashing import sha256_bytes
from sealift.registry_client import RegistryClient

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class BlobTask:
    """One blob to copy into the bundle. ``digest`` is None until a model file is hashed."""

    what: str
    digest: str | None
    size: int
    media_type: str
    open: Callable[[], BinaryIO]
    data_name: str | None = None
    scan: bool = False
    # A local file (model, extra file): lets a resumed directory create skip re-hashing it.
    source_path: Path | None = None


@dataclass(frozen=True)
class ResolvedImage:
    """An image ready to copy: its root, its documents and its blobs."""

    spec: ImageSpec
    root: Descriptor
    documents: dict[str, bytes]
    blobs: tuple[BlobTask, ...]
    platforms: tuple[str, ...]
    # Layer digests of each platform manifest, lowest first, for the SBOM's package merge.
    layers_by_manifest: dict[str, tuple[str, ...]]
    source: str


class ContentProvider(Protocol):
    """Reads documents and blobs of one image source by descriptor."""

    description: str

    def read_document(self, descriptor: Descriptor) -> bytes:
        """A small document (manifest, index), verified against its descriptor."""
        ...

    def opener(self, descriptor: Descriptor) -> Callable[[], BinaryIO]:
        """A function that opens a stream over one blob."""
        ...


def _verify_document(content: bytes, descriptor: Descriptor, where: str) -> bytes:
    digest = sha256_bytes(content)
    if digest != descriptor.digest or len(content) != descriptor.size:
        raise IntegrityError(
            f"{where}: {descriptor.digest} has digest {digest} and {len(content)} bytes",
            hint="the source image is damaged or was changed; fetch it again",
        )
    return content


class RegistryProvider:
    """An image repository in a registry."""

    def __init__(self, client: RegistryClient, repository: str) -> None:
        self._client = client
        self._repository = repository
        self.description = f"{client.registry}/{repository}"

    def read_document(self, descriptor: Descriptor) -> bytes:
        manifest = self._client.get_manifest(self._repository, descriptor.digest)
        return _verify_document(manifest.content, descriptor, self.description)

    def opener(self, descriptor: Descriptor) -> Callable[[], BinaryIO]:
        def open_blob() -> BinaryIO:
            reader = self._client.open_blob(self._repository, descriptor.digest, descriptor.size)
            return reader  # type: ignore[return-value]

        return open_blob


class LayoutProvider:
    """An OCI image layout, as a folder or inside a tar (read in place through a BlobSource)."""

    def __init__(self, source: BlobSource) -> None:
        self._source = source
        self.description = source.description

    def _name(self, descriptor: Descriptor) -> str:
        name = layout.blob_name(descriptor.digest)
        if not self._source.has(name):
            raise InputError(
                f"{self.description}: blob {descriptor.digest} is missing",
                hint="the layout is incomplete; export the image again",
            )
        return name

    def read_document(self, descriptor: Descriptor) -> bytes:
        if descriptor.size > MAX_DOCUMENT_BYTES:
            raise IntegrityError(f"{self.description}: document {descriptor.digest} is too large")
        content = self._source.read_small(self._name(descriptor))
        return _verify_document(content, descriptor, self.description)

    def opener(self, descriptor: Descriptor) -> Callable[[], BinaryIO]:
        name = self._name(descriptor)
        return lambda: self._source.open(name)


class _DocumentsProvider:
    """Documents synthesized in memory, blobs from another provider (legacy docker archives)."""

    def __init__(
        self,
        documents: dict[str, bytes],
        blobs: dict[str, Callable[[], BinaryIO]],
        description: str,
    ):
        self._documents = documents
        self._blobs = blobs
        self.description = description

    def read_document(self, descriptor: Descriptor) -> bytes:
        return _verify_document(self._documents[descriptor.digest], descriptor, self.description)

    def opener(self, descriptor: Descriptor) -> Callable[[], BinaryIO]:
        if descriptor.digest in self._documents:
            content = self._documents[descriptor.digest]
            return lambda: _bytes_reader(content)
        return self._blobs[descriptor.digest]


def _bytes_reader(content: bytes) -> BinaryIO:
    return io.BytesIO(content)


def _select_index_entry(source: BlobSource, spec: ImageSpec) -> Descriptor:
    index = load_json(
        source.read_small(layout.INDEX_FILE), where=f"{source.description} index.json"
    )
    entries = [
        descriptor_from_dict(entry, where=f"{source.description} index.json manifests[{i}]")
        for i, entry in enumerate(index.get("manifests") or [])
    ]
    if not entries:
        raise InputError(f"{source.description} holds no image", hint="export the image again")
    names = {
        e.digest: e.annotation(media_types.REF_NAME_ANNOTATION)
        or e.annotation("io.containerd.image.name")
        for e in entries
    }
    if spec.source_ref:
        wanted = spec.source_ref
        matches = [
            e
            for e in entries
            if names[e.digest] == wanted or names[e.digest].endswith("/" + wanted)
        ]
        if not matches:
            available = ", ".join(sorted(n for n in names.values() if n)) or "none named"
            raise InputError(
                f"{source.description} has no image named {wanted!r}",
                hint=f"images in it: {available}",
            )
        return matches[0]
    if len(entries) > 1:
        available = ", ".join(sorted(n for n in names.values() if n)) or "unnamed"
        raise InputError(
            f"{source.description} holds {len(entries)} images; which one?",
            hint=f"set sourceRef to one of: {available}",
        )
    return entries[0]


def _docker_archive(source: TarSource, spec: ImageSpec) -> tuple[_DocumentsProvider, Descriptor]:
    """Turn a legacy ``docker save`` tar into an OCI manifest over its uncompressed layers."""
    try:
        entries = json.loads(source.read_small("manifest.json"))
        if spec.source_ref:
            chosen = [e for e in entries if spec.source_ref in (e.get("RepoTags") or [])]
        else:
            chosen = entries
        if len(chosen) != 1:
            tags = sorted(t for e in entries for t in (e.get("RepoTags") or []))
            raise InputError(
                f"{source.description}: cannot choose one image ({len(chosen)} match)",
                hint="set sourceRef to one of: " + (", ".join(tags) or "no tags"),
            )
        entry = chosen[0]
        config = source.read_small(entry["Config"])
        diff_ids = json.loads(config)["rootfs"]["diff_ids"]
        layer_names = list(entry["Layers"])
    except (KeyError, ValueError, TypeError) as bad:
        raise InputError(
            f"{source.description} is not a docker save archive ({type(bad).__name__})",
            hint="create it with docker save or skopeo copy ... docker-archive:FILE",
        ) from bad
    if len(diff_ids) != len(layer_names):
        raise IntegrityError(
            f"{source.description}: config and manifest disagree on layers",
            hint="the archive is damaged; export the image again with docker save",
        )
    config_digest = sha256_bytes(config)
    layers = []
    blobs: dict[str, Callable[[], BinaryIO]] = {}
    for name, diff_id in zip(layer_names, diff_ids, strict=True):
        if not source.has(name):
            raise IntegrityError(
                f"{source.description}: layer {name} is missing",
                hint="the archive is incomplete; export the image again with docker save",
            )
        layers.append(
            {"mediaType": media_types.OCI_LAYER, "digest": diff_id, "size": source.size(name)}
        )
        blobs[diff_id] = lambda n=name: source.open(n)  # type: ignore[misc]
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": media_types.OCI_MANIFEST,
            "config": {
                "mediaType": media_types.OCI_CONFIG,
                "digest": config_digest,
                "size": len(config),
            },
            "layers": layers,
        }
    )
    root = Descriptor(media_types.OCI_MANIFEST, sha256_bytes(manifest), len(manifest))
    documents = {root.digest: manifest, config_digest: config}
    return _DocumentsProvider(documents, blobs, source.description), root


def _platform_matches(platform: str, wanted: tuple[str, ...]) -> bool:
    for candidate in wanted:
        if platform == candidate or (
            candidate.count("/") == 1 and platform.startswith(candidate + "/")
        ):
            return True
    return False


def resolve_image(
    spec: ImageSpec,
    *,
    client_for: Callable[[str], RegistryClient],
    opened: list[BlobSource],
) -> ResolvedImage:
    """Resolve an image spec to its root, documents and blobs (reads only small documents).

    Archives and layouts opened here are appended to ``opened`` for the caller to close after
    the copy.
    """
    provider: ContentProvider
    if spec.kind == "registry":
        assert spec.registry_ref is not None
        reference = spec.registry_ref
        client = client_for(reference.registry)
        manifest = client.get_manifest(reference.repository, reference.reference)
        provider = RegistryProvider(client, reference.repository)
        media_type = media_type_of(manifest.content, manifest.media_type, where=str(reference))
        root = Descriptor(media_type, manifest.digest, len(manifest.content))
        first_documents = {root.digest: manifest.content}
        source_text = f"{reference.registry}/{reference.repository}@{manifest.digest}"
    else:
        assert spec.path is not None
        if spec.kind == "layout":
            if not (spec.path / layout.OCI_LAYOUT_FILE).is_file():
                raise InputError(
                    f"image layout {spec.path} is not an OCI image layout (no oci-layout file)",
                    hint="export with skopeo copy ... oci:DIR:TAG",
                )
            source: BlobSource = DirectorySource(spec.path)
        else:
            if not spec.path.is_file():
                raise InputError(f"image archive {spec.path} does not exist", hint="check the path")
            source = TarSource([spec.path], description=f"image archive {spec.path}")
        opened.append(source)
        if source.has(layout.INDEX_FILE) and source.has(layout.OCI_LAYOUT_FILE):
            provider = LayoutProvider(source)
            root = _select_index_entry(source, spec)
        elif source.has("manifest.json"):
            assert isinstance(source, TarSource)
            provider, root = _docker_archive(source, spec)
        else:
            raise InputError(
                f"{source.description} is neither an OCI layout nor a docker save archive",
                hint="use skopeo copy to oci:DIR, oci-archive:FILE or docker-archive:FILE",
            )
        first_documents = {root.digest: provider.read_document(root)}
        source_text = f"{spec.kind}:{spec.path.name}"
    return _walk(spec, provider, root, first_documents, source_text)


def _walk(
    spec: ImageSpec,
    provider: ContentProvider,
    root: Descriptor,
    documents: dict[str, bytes],
    source_text: str,
) -> ResolvedImage:
    where = f"image {spec.name} ({provider.description})"
    content = documents[root.digest]
    media_type = media_type_of(content, root.media_type, where=where)
    root = Descriptor(media_type, root.digest, root.size, platform=root.platform)
    manifests: list[Descriptor]
    kept_documents = dict(documents)
    if root.is_index:
        children = children_of(content, media_type, where=where).manifests
        images = [
            c for c in children if c.is_manifest and c.platform and c.platform != "unknown/unknown"
        ]
        if spec.all_platforms:
            manifests = [c for c in children if c.is_manifest]
        else:
            manifests = [c for c in images if _platform_matches(c.platform, spec.platforms)]
            if not manifests:
                available = ", ".join(sorted({c.platform for c in images})) or "none"
                raise InputError(
                    f"{where} has no manifest for {', '.join(spec.platforms)}",
                    hint=f"available platforms: {available}; set platforms in the bundle file",
                )
            if len(manifests) == 1:
                only = manifests[0]
                del kept_documents[root.digest]
                root = only
            elif len(manifests) < len(children):
                # A reduced index: a new document listing only the kept platforms.
                index = load_json(content, where=where)
                index["manifests"] = [
                    m
                    for m in index["manifests"]
                    if m.get("digest") in {d.digest for d in manifests}
                ]
                reduced = canonical_json(index)
                del kept_documents[root.digest]
                root = Descriptor(media_type, sha256_bytes(reduced), len(reduced))
                kept_documents[root.digest] = reduced
    elif root.is_manifest:
        manifests = [root]
    else:
        raise InputError(
            f"{where} has unsupported media type {media_type!r}",
            hint="sealift carries OCI and Docker schema 2 images",
        )
    blobs: list[BlobTask] = []
    layers_by_manifest: dict[str, tuple[str, ...]] = {}
    platforms: list[str] = []
    for manifest in manifests:
        if manifest.digest not in kept_documents:
            kept_documents[manifest.digest] = provider.read_document(manifest)
        manifest_type = media_type_of(
            kept_documents[manifest.digest], manifest.media_type, where=where
        )
        children = children_of(kept_documents[manifest.digest], manifest_type, where=where)
        if children.config is None:
            raise IntegrityError(
                f"{where}: manifest {manifest.digest} has no config",
                hint="the source image is damaged; push or export it again",
            )
        if manifest.platform:
            platforms.append(manifest.platform)
        blobs.append(
            BlobTask(
                what=f"config of {spec.name}",
                digest=children.config.digest,
                size=children.config.size,
                media_type=children.config.media_type,
                open=provider.opener(children.config),
            )
        )
        for number, layer in enumerate(children.layers, 1):
            if layer.media_type not in media_types.IMAGE_LAYERS:
                raise InputError(
                    f"{where}: layer {number} has unsupported media type {layer.media_type!r}",
                    hint="foreign or non-distributable layers cannot be carried offline",
                )
            blobs.append(
                BlobTask(
                    what=f"layer {number} of {spec.name}",
                    digest=layer.digest,
                    size=layer.size,
                    media_type=layer.media_type,
                    open=provider.opener(layer),
                    scan=True,
                )
            )
        layers_by_manifest[manifest.digest] = tuple(layer.digest for layer in children.layers)
    return ResolvedImage(
        spec=spec,
        root=root,
        documents=kept_documents,
        blobs=tuple(blobs),
        platforms=tuple(sorted(set(platforms))),
        layers_by_manifest=layers_by_manifest,
        source=source_text,
    )

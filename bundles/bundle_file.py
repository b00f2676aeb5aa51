"""The bundle file (``sealift.yaml``): what one release carries, loaded into frozen dataclasses.

Paths in the file are relative to the file's folder. Validation is strict: unknown keys, bad
values and duplicate names are errors that name the file, the key and a hint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sealift.documents import load_document
from sealift.errors import InputError
from sealift.image_reference import ImageReference, parse_reference

API_VERSION = "sealift.dev/v1alpha1"
SCHEMA_NAME = "bundle-file.v1alpha1.json"
DEFAULT_PLATFORMS = ("linux/amd64",)
DEFAULT_MODEL_EXCLUDES = (".git/**", ".cache/**")


@dataclass(frozen=True)
class ReleaseMetadata:
    """The release: name, version and vendor, as recorded in the bundle manifest."""

    name: str
    version: str
    vendor: str = ""
    description: str = ""


@dataclass(frozen=True)
class ImageSpec:
    """One image: from a registry (``source`` is the registry reference), a layout or an archive."""

    name: str  # repository:tag inside the bundle, e.g. vllm/vllm-openai:v0.28.0
    kind: str  # registry | layout | archive
    registry_ref: ImageReference | None = None
    path: Path | None = None
    source_ref: str | None = None
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS
    all_platforms: bool = False

    @property
    def origin(self) -> str:
        """Where the image comes from, for messages."""
        if self.registry_ref is not None:
            return str(self.registry_ref)
        return f"{self.kind} {self.path}"


@dataclass(frozen=True)
class ChartSpec:
    """One Helm chart: a .tgz or a chart folder (``path``), or a chart in a registry (``ref``)."""

    path: Path | None = None
    ref: ImageReference | None = None

    @property
    def origin(self) -> str:
        """Where the chart comes from, for messages."""
        return f"oci://{self.ref}" if self.ref is not None else str(self.path)


@dataclass(frozen=True)
class ModelSpec:
    """One model folder (safetensors shards, config, tokenizer)."""

    name: str
    version: str
    path: Path
    exclude: tuple[str, ...] = DEFAULT_MODEL_EXCLUDES


@dataclass(frozen=True)
class FileSpec:
    """One extra file (a CA certificate, a licence) with an optional expected digest."""

    path: Path
    name: str
    sha256: str | None = None


@dataclass(frozen=True)
class BundleSpec:
    """A whole bundle file, validated and with paths resolved."""

    source: Path
    metadata: ReleaseMetadata
    images: tuple[ImageSpec, ...]
    charts: tuple[ChartSpec, ...]
    models: tuple[ModelSpec, ...]
    files: tuple[FileSpec, ...]


def _duplicate(values: list[str], source: Path, what: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise InputError(
                f"{source}: {what} {value!r} appears twice", hint=f"give each {what} once"
            )
        seen.add(value)


def load_bundle_file(path: Path) -> BundleSpec:
    """Load and validate a bundle file; every problem is one InputError naming the key."""
    document = load_document(
        path, package="sealift.bundles", schema_name=SCHEMA_NAME, what="bundle file"
    )
    base = path.resolve().parent
    meta = document["metadata"]
    platforms = tuple(document.get("platforms") or DEFAULT_PLATFORMS)

    images: list[ImageSpec] = []
    for position, entry in enumerate(document.get("images") or []):
        where = f"{path}: images[{position}]"
        image_platforms = tuple(entry.get("platforms") or platforms)
        all_platforms = bool(entry.get("allPlatforms", False))
        if "layout" in entry or "archive" in entry:
            kind = "layout" if "layout" in entry else "archive"
            local = parse_reference(entry["ref"], what=f"{where}.ref", local=True)
            images.append(
                ImageSpec(
                    name=local.name,
                    kind=kind,
                    path=base / entry[kind],
                    source_ref=entry.get("sourceRef"),
                    platforms=image_platforms,
                    all_platforms=all_platforms,
                )
            )
            continue
        if "sourceRef" in entry:
            raise InputError(
                f"{where}.sourceRef: only used with layout or archive",
                hint="for a registry image, put the whole reference in ref",
            )
        remote = parse_reference(entry["ref"], what=f"{where}.ref")
        # Pinned by digest only: the bundle still needs a tag for tools that list by name.
        tag = remote.tag or "sha256-" + (remote.digest or "")[7:23]
        local_name = ImageReference("", remote.repository, tag, None).name
        images.append(
            ImageSpec(
                name=local_name,
                kind="registry",
                registry_ref=remote,
                platforms=image_platforms,
                all_platforms=all_platforms,
            )
        )
    _duplicate([image.name for image in images], path, "image name")

    charts = tuple(
        ChartSpec(path=base / entry["path"])
        if "path" in entry
        else ChartSpec(
            ref=parse_reference(
                entry["ref"].removeprefix("oci://").replace("+", "_"),
                what=f"{path}: charts[{position}].ref",
            )
        )
        for position, entry in enumerate(document.get("charts") or [])
    )
    models = tuple(
        ModelSpec(
            name=entry["name"],
            version=str(entry["version"]),
            path=base / entry["path"],
            exclude=tuple(entry.get("exclude", DEFAULT_MODEL_EXCLUDES)),
        )
        for entry in document.get("models") or []
    )
    _duplicate([f"{m.name}:{m.version}" for m in models], path, "model name:version")
    files: list[FileSpec] = []
    for entry in document.get("files") or []:
        file_path = base / entry["path"]
        expected = entry.get("sha256")
        if expected and not expected.startswith("sha256:"):
            expected = "sha256:" + expected
        files.append(
            FileSpec(path=file_path, name=entry.get("name", file_path.name), sha256=expected)
        )
    _duplicate([f.name for f in files], path, "file name")

    return BundleSpec(
        source=path,
        metadata=ReleaseMetadata(
            name=meta["name"],
            version=str(meta["version"]),
            vendor=meta.get("vendor", ""),
            description=meta.get("description", ""),
        ),
        images=tuple(images),
        charts=charts,
        models=models,
        files=tuple(files),
    )

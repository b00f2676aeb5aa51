"""The bundle file (``sealift.yaml``): what one release carries, loaded into frozen dataclasses.

Paths in the file are relative to the file's folder. Validation is strict: unknown keys, bad
values and duplicate names are errors that name the file, the key and a hint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sealift import __version__
from sealift.bundles import layout
from sealift.documents import load_document
from sealift.errors import InputError
from sealift.image_reference import ImageReference, parse_reference

API_VERSION = "sealift.dev/v1alpha1"
SCHEMA_NAME = "bundle-file.v1alpha1.json"
DEFAULT_PLATFORMS = ("linux/amd64",)
DEFAULT_MODEL_EXCLUDES = (".git/**", ".cache/**")
# manylinux_2_28: what the wheels of sealift's dependencies need at most, and older than the
# glibc of every current base image with Python 3.11 (Debian 12: 2.36, UBI 9: 2.34).
DEFAULT_PREFETCH_GLIBC = "2.28"
MIN_PYTHON_MINOR = 11  # sealift's requires-python
MIN_GLIBC_MINOR = 17  # manylinux2014, the oldest tag wheels are built for today


def prefetch_image_name(version: str = __version__) -> str:
    """The prefetch image's name in the bundle: ``sealift/prefetch:<sealift version>``."""
    # A local version (1.0+dev) has characters a tag cannot hold.
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", version)
    return f"{layout.PREFETCH_IMAGE_REPOSITORY}:{tag}"


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
    kind: str  # registry | layout | archive | built (the prefetch image)
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
        if self.path is None:
            return f"{self.kind} by sealift"
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
class PrefetchImageSpec:
    """The prefetch image to build: sealift from ``wheels`` as one layer on the ``base`` image."""

    base: str  # the base image's name in the bundle (an images[] entry)
    wheels: Path
    python: str  # major.minor of the base image's Python
    platform: str
    glibc: str = DEFAULT_PREFETCH_GLIBC
    extras: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The built image's name in the bundle."""
        return prefetch_image_name()


@dataclass(frozen=True)
class BundleSpec:
    """A whole bundle file, validated and with paths resolved."""

    source: Path
    metadata: ReleaseMetadata
    images: tuple[ImageSpec, ...]
    charts: tuple[ChartSpec, ...]
    models: tuple[ModelSpec, ...]
    files: tuple[FileSpec, ...]
    prefetch_image: PrefetchImageSpec | None = None


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
    prefetch = None
    if "prefetchImage" in document:
        refs = [entry["ref"] for entry in document.get("images") or []]
        prefetch = _prefetch_image(path, document["prefetchImage"], images, refs, platforms)

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
        prefetch_image=prefetch,
    )


def _prefetch_image(
    path: Path,
    entry: dict[str, object],
    images: list[ImageSpec],
    refs: list[str],
    platforms: tuple[str, ...],
) -> PrefetchImageSpec:
    where = f"{path}: prefetchImage"
    base_ref = str(entry["base"])
    # The base is named as its images[] entry writes it, or by its name inside the bundle.
    matches = [
        image for image, ref in zip(images, refs, strict=True) if base_ref in (ref, image.name)
    ]
    if not matches:
        listed = ", ".join(refs) or "none"
        raise InputError(
            f"{where}.base: {base_ref!r} is not one of the images this bundle file lists",
            hint=f"list the base image under images and name it here; images: {listed}",
        )
    built = prefetch_image_name()
    for position, image in enumerate(images):
        if image.name == built:
            raise InputError(
                f"{path}: images[{position}] is named {built}, the name of the prefetch image"
                " that prefetchImage builds",
                hint="drop that entry or rename it (ref: NAME:TAG)",
            )
    python = str(entry["python"])
    if int(python.split(".")[1]) < MIN_PYTHON_MINOR:
        raise InputError(
            f"{where}.python: sealift needs Python 3.{MIN_PYTHON_MINOR} or newer, not {python}",
            hint=f"use a base image with Python 3.{MIN_PYTHON_MINOR} or newer",
        )
    glibc = str(entry.get("glibc", DEFAULT_PREFETCH_GLIBC))
    if int(glibc.split(".")[1]) < MIN_GLIBC_MINOR:
        raise InputError(
            f"{where}.glibc: {glibc} is older than any manylinux wheel (2.{MIN_GLIBC_MINOR})",
            hint=f"use a base image with glibc 2.{MIN_GLIBC_MINOR} or newer",
        )
    return PrefetchImageSpec(
        base=matches[0].name,
        wheels=path.resolve().parent / str(entry["wheels"]),
        python=python,
        platform=str(entry.get("platform") or platforms[0]),
        glibc=glibc,
        extras=tuple(sorted(entry.get("extras") or [])),  # type: ignore[call-overload]
    )

"""CycloneDX 1.6 SBOM for an offline bundle.

The document is built with cyclonedx-python-lib and is reproducible: the same
inputs give byte-identical output.  That takes three things the library does
not do by default: a serial number derived from the content (uuid5) instead of
a random uuid4, no wall-clock timestamp (the caller's, SOURCE_DATE_EPOCH's, or
none), and an explicit bom-ref on every component (the library otherwise
invents random ones while serialising).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.contact import OrganizationalEntity
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from .package_scan import FoundPackage

__all__ = [
    "SbomBundle",
    "SbomChart",
    "SbomFile",
    "SbomImage",
    "SbomModel",
    "SbomModelFile",
    "build_sbom",
]

#: Namespace for the uuid5 serial numbers; fixed forever so serials stay stable.
SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:sealift:sbom")

# Property names live under a "sealift:" prefix, per CycloneDX's property taxonomy advice.
PROP_PLATFORM = "sealift:image:platform"
PROP_MEDIA_TYPE = "sealift:image:media-type"
PROP_UNSCANNED_LAYER = "sealift:image:unscanned-layer"
PROP_CHART_IMAGE = "sealift:chart:image"
PROP_SIZE = "sealift:file:size"
PROP_BUNDLE_DIGEST = "sealift:bundle:digest"

_HASH_ALGORITHMS: dict[str, tuple[HashAlgorithm, int]] = {
    "sha256": (HashAlgorithm.SHA_256, 64),
    "sha384": (HashAlgorithm.SHA_384, 96),
    "sha512": (HashAlgorithm.SHA_512, 128),
}
_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class SbomBundle:
    """The bundle the SBOM describes."""

    name: str
    version: str
    vendor: str


@dataclass(frozen=True)
class SbomImage:
    """A container image in the bundle (``digest`` of the manifest or index)."""

    ref: str
    digest: str
    media_type: str
    platforms: tuple[str, ...] = ()
    packages: tuple[FoundPackage, ...] = ()
    unscanned_layers: tuple[str, ...] = ()


@dataclass(frozen=True)
class SbomChart:
    """A Helm chart in the bundle and the image references it uses."""

    name: str
    version: str
    digest: str
    images: tuple[str, ...] = ()


@dataclass(frozen=True)
class SbomModelFile:
    """One file of a model, by path inside the model and its SHA-256 (hex)."""

    path: str
    sha256hex: str
    size: int


@dataclass(frozen=True)
class SbomModel:
    """A machine-learning model in the bundle."""

    name: str
    version: str
    digest: str
    files: tuple[SbomModelFile, ...] = ()


@dataclass(frozen=True)
class SbomFile:
    """Any other file carried in the bundle."""

    path: str
    digest: str
    size: int


def _hash(digest: str, what: str) -> HashType:
    """Turn an ``algorithm:hex`` digest into a CycloneDX hash, refusing malformed ones."""
    algorithm, sep, hexdigest = digest.partition(":")
    known = _HASH_ALGORITHMS.get(algorithm.lower()) if sep else None
    hexdigest = hexdigest.lower()
    if known is None or len(hexdigest) != known[1] or not _HEX.match(hexdigest):
        raise ValueError(f"{what}: {digest!r} is not a sha256/sha384/sha512 'algorithm:hex' digest")
    return HashType(alg=known[0], content=hexdigest)


def _image_purl(ref: str, digest: str) -> PackageURL:
    """``pkg:oci/NAME@DIGEST?repository_url=REGISTRY/REPO&tag=TAG`` for an image reference."""
    repository = ref.split("@", 1)[0]
    tag = ""
    last_slash, last_colon = repository.rfind("/"), repository.rfind(":")
    # A colon after the last slash starts a tag; before it, it is a registry port.
    if last_colon > last_slash:
        repository, tag = repository[:last_colon], repository[last_colon + 1 :]
    first, _, remainder = repository.partition("/")
    if not remainder:
        repository = f"docker.io/library/{repository}"
    elif "." not in first and ":" not in first and first != "localhost":
        repository = f"docker.io/{repository}"
    qualifiers = {"repository_url": repository}
    if tag:
        qualifiers["tag"] = tag
    name = repository.rsplit("/", 1)[-1].lower()
    return PackageURL(type="oci", name=name, version=digest, qualifiers=qualifiers)


def _properties(pairs: Iterable[tuple[str, str]]) -> list[Property]:
    return [Property(name=name, value=value) for name, value in pairs]


class _RefAllocator:
    """Hands out unique bom-refs; inputs are sorted first, so the suffixes are stable."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def __call__(self, wanted: str) -> str:
        ref, counter = wanted, 1
        while ref in self._used:
            counter += 1
            ref = f"{wanted}~{counter}"
        self._used.add(ref)
        return ref


def _package_component(package: FoundPackage, parent_ref: str, refs: _RefAllocator) -> Component:
    purl = package.purl
    return Component(
        # OS packages are libraries in CycloneDX terms; "operating-system" is for
        # the distribution itself.
        type=ComponentType.LIBRARY,
        name=package.name,
        version=package.version or None,
        purl=PackageURL.from_string(purl),
        bom_ref=refs(f"{parent_ref}#{purl}"),
    )


def _image_component(image: SbomImage, refs: _RefAllocator) -> Component:
    digest_hash = _hash(image.digest, f"image {image.ref}")
    pinned = image.ref.endswith("@" + image.digest)
    bom_ref = refs(f"image:{image.ref}" if pinned else f"image:{image.ref}@{image.digest}")
    by_purl: dict[str, FoundPackage] = {}
    for package in sorted(image.packages, key=FoundPackage.sort_key):
        by_purl.setdefault(package.purl, package)
    packages = [_package_component(by_purl[p], bom_ref, refs) for p in sorted(by_purl)]
    props = [(PROP_PLATFORM, p) for p in sorted(set(image.platforms))]
    props += [(PROP_UNSCANNED_LAYER, layer) for layer in sorted(set(image.unscanned_layers))]
    # Not Component.mime_type: cyclonedx-python-lib 11.12 serialises it as
    # "mimeType" while the 1.6 schema only allows "mime-type", so the document
    # would fail validation.
    props.append((PROP_MEDIA_TYPE, image.media_type))
    return Component(
        type=ComponentType.CONTAINER,
        name=image.ref,
        version=image.digest,
        hashes=[digest_hash],
        purl=_image_purl(image.ref, image.digest),
        bom_ref=bom_ref,
        properties=_properties(props),
        components=packages,
    )


def _chart_component(chart: SbomChart, refs: _RefAllocator) -> Component:
    return Component(
        type=ComponentType.APPLICATION,
        name=chart.name,
        version=chart.version,
        hashes=[_hash(chart.digest, f"chart {chart.name}")],
        bom_ref=refs(f"chart:{chart.name}@{chart.version}"),
        properties=_properties((PROP_CHART_IMAGE, i) for i in sorted(set(chart.images))),
    )


def _model_component(model: SbomModel, refs: _RefAllocator) -> Component:
    bom_ref = refs(f"model:{model.name}@{model.version}")
    files = [
        Component(
            type=ComponentType.FILE,
            name=f.path,
            hashes=[_hash(f"sha256:{f.sha256hex}", f"model {model.name} file {f.path}")],
            bom_ref=refs(f"{bom_ref}#{f.path}"),
            properties=_properties([(PROP_SIZE, str(f.size))]),
        )
        for f in sorted(set(model.files), key=lambda f: (f.path, f.sha256hex, f.size))
    ]
    return Component(
        type=ComponentType.MACHINE_LEARNING_MODEL,
        name=model.name,
        version=model.version,
        hashes=[_hash(model.digest, f"model {model.name}")],
        bom_ref=bom_ref,
        components=files,
    )


def _file_component(item: SbomFile, refs: _RefAllocator) -> Component:
    return Component(
        type=ComponentType.FILE,
        name=item.path,
        hashes=[_hash(item.digest, f"file {item.path}")],
        bom_ref=refs(f"file:{item.path}"),
        properties=_properties([(PROP_SIZE, str(item.size))]),
    )


def _resolve_timestamp(timestamp: datetime | None) -> datetime | None:
    if timestamp is not None:
        # A naive datetime is taken to be UTC rather than local time, which would
        # make the output depend on the machine's zone.
        return timestamp if timestamp.tzinfo else timestamp.replace(tzinfo=UTC)
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not epoch:
        return None
    if not epoch.isdigit():
        # reproducible-builds.org: a malformed value must be an error, not ignored.
        raise ValueError(f"SOURCE_DATE_EPOCH={epoch!r} is not a non-negative integer")
    return datetime.fromtimestamp(int(epoch), tz=UTC)


def build_sbom(
    bundle: SbomBundle,
    images: Iterable[SbomImage],
    charts: Iterable[SbomChart],
    models: Iterable[SbomModel],
    files: Iterable[SbomFile],
    *,
    tool_name: str = "sealift",
    tool_version: str,
    bundle_digest_hint: str | None = None,
    timestamp: datetime | None = None,
) -> bytes:
    """Return the bundle's CycloneDX 1.6 JSON SBOM as UTF-8 bytes.

    Output depends only on the arguments (and SOURCE_DATE_EPOCH when
    ``timestamp`` is None): input order does not matter, identical duplicates are
    dropped, the serial number is a uuid5 of the rest of the document, and the
    timestamp is ``timestamp``, else SOURCE_DATE_EPOCH, else omitted.
    ``bundle_digest_hint`` (e.g. the digest of the bundle's manifest, when known
    before the SBOM is written) is recorded as a property of the bundle
    component.  Raises ValueError for malformed digests.
    """
    when = _resolve_timestamp(timestamp)
    refs = _RefAllocator()
    root_props = [(PROP_BUNDLE_DIGEST, bundle_digest_hint)] if bundle_digest_hint else []
    root = Component(
        type=ComponentType.APPLICATION,
        name=bundle.name,
        version=bundle.version,
        supplier=OrganizationalEntity(name=bundle.vendor) if bundle.vendor else None,
        bom_ref=refs(f"bundle:{bundle.name}@{bundle.version}"),
        properties=_properties(root_props),
    )
    tool = Component(type=ComponentType.APPLICATION, name=tool_name, version=tool_version)

    # Sorting the de-duplicated inputs fixes the order in which bom-refs are
    # handed out, so collision suffixes never depend on the caller's order.
    image_list = sorted(set(images), key=lambda i: (i.ref, i.digest, repr(i)))
    image_components = [_image_component(i, refs) for i in image_list]
    chart_list = sorted(set(charts), key=lambda c: (c.name, c.version, c.digest, repr(c)))
    chart_components = [_chart_component(c, refs) for c in chart_list]
    model_list = sorted(set(models), key=lambda m: (m.name, m.version, m.digest, repr(m)))
    model_components = [_model_component(m, refs) for m in model_list]
    file_list = sorted(set(files), key=lambda f: (f.path, f.digest, f.size))
    file_components = [_file_component(f, refs) for f in file_list]

    top_level = image_components + chart_components + model_components + file_components
    bom = Bom(
        # Placeholder: the real serial is derived from the rendered content below.
        serial_number=uuid.UUID(int=0),
        metadata=BomMetaData(
            component=root,
            tools=ToolRepository(components=[tool]),
            # The library insists on a timestamp; a placeholder is removed below
            # when there is none to record.
            timestamp=when or datetime.fromtimestamp(0, tz=UTC),
        ),
        components=top_level,
    )
    bom.register_dependency(root, top_level)
    images_by_ref: dict[str, list[Component]] = {}
    for image, component in zip(image_list, image_components, strict=True):
        images_by_ref.setdefault(image.ref, []).append(component)
    for chart, component in zip(chart_list, chart_components, strict=True):
        used = [c for ref in sorted(set(chart.images)) for c in images_by_ref.get(ref, [])]
        if used:
            bom.register_dependency(component, used)

    document: dict[str, Any] = json.loads(JsonV1Dot6(bom).output_as_string())
    if when is None:
        del document["metadata"]["timestamp"]
    document.pop("serialNumber", None)
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    serial = uuid.uuid5(SERIAL_NAMESPACE, hashlib.sha256(canonical.encode("utf-8")).hexdigest())

    # The library appends $schema/bomFormat/specVersion last; put the
    # identifying keys first so the file reads naturally.
    head = ("$schema", "bomFormat", "specVersion")
    ordered = {key: document[key] for key in head}
    ordered["serialNumber"] = serial.urn
    ordered.update((k, v) for k, v in document.items() if k not in head)
    return (json.dumps(ordered, indent=2, ensure_ascii=False) + "\n").encode("utf-8")

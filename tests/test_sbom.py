"""Tests for sealift.bundles.sbom: schema-valid, reproducible CycloneDX 1.6 output."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from sealift.bundles.package_scan import FoundPackage, merge_image_packages, scan_layer
from sealift.bundles.sbom import (
    SbomBundle,
    SbomChart,
    SbomFile,
    SbomImage,
    SbomModel,
    SbomModelFile,
    build_sbom,
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


BUNDLE = SbomBundle(name="llm-stack", version="2024.06.1", vendor="Example Corp")
VLLM = SbomImage(
    ref="docker.io/vllm/vllm-openai:v0.5.0",
    digest="sha256:" + sha("vllm"),
    media_type="application/vnd.oci.image.index.v1+json",
    platforms=("linux/arm64", "linux/amd64"),
    packages=(
        FoundPackage("deb", "libc6", "2.36-9+deb12u7", "amd64"),
        FoundPackage("deb", "base-files", "12.4+deb12u5", "amd64"),
        FoundPackage("pypi", "vllm", "0.5.0"),
        FoundPackage("pypi", "Torch", "2.3.0+cu121"),
    ),
    unscanned_layers=("sha256:" + sha("layer9") + ": zstd-compressed layer",),
)
GATEWAY = SbomImage(
    ref="nginx:1.27-alpine",
    digest="sha256:" + sha("nginx"),
    media_type="application/vnd.docker.distribution.manifest.v2+json",
    platforms=("linux/amd64",),
    packages=(
        FoundPackage("apk", "musl", "1.2.5-r0", "x86_64"),
        FoundPackage("deb", "libc6", "2.36-9+deb12u7", "amd64"),
    ),
)
CHART = SbomChart(
    name="llm-serving",
    version="0.3.1",
    digest="sha256:" + sha("chart"),
    images=(VLLM.ref, GATEWAY.ref, "registry.local:5000/unlisted/image:1"),
)
MODEL = SbomModel(
    name="tiny-llama",
    version="main",
    digest="sha256:" + sha("model"),
    files=(
        SbomModelFile("model.safetensors", sha("weights"), 2_200_000_000),
        SbomModelFile("config.json", sha("config"), 700),
        SbomModelFile("tokenizer/tokenizer.json", sha("tok"), 1_800_000),
    ),
)
EXTRA = SbomFile(path="bin/sealift-installer", digest="sha256:" + sha("installer"), size=12345)


def build(**overrides: Any) -> bytes:
    arguments: dict[str, Any] = {
        "bundle": BUNDLE,
        "images": [VLLM, GATEWAY],
        "charts": [CHART],
        "models": [MODEL],
        "files": [EXTRA],
        "tool_version": "0.1.0",
    }
    arguments.update(overrides)
    return build_sbom(**arguments)


def validate(document: bytes) -> None:
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(document.decode("utf-8"))
    assert error is None, str(error)


@pytest.fixture(autouse=True)
def no_source_date_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


def by_ref(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}

    def walk(components: list[dict[str, Any]]) -> None:
        for component in components:
            found[component["bom-ref"]] = component
            walk(component.get("components", []))

    walk(document["components"])
    return found


def test_validates_against_cyclonedx_1_6_schema() -> None:
    document = build()
    validate(document)
    parsed = json.loads(document)
    assert parsed["specVersion"] == "1.6"
    assert parsed["bomFormat"] == "CycloneDX"


def test_byte_identical_across_runs_and_input_orders() -> None:
    first = build()
    assert build() == first
    shuffled = build(
        images=[GATEWAY, VLLM, GATEWAY],
        models=[SbomModel(MODEL.name, MODEL.version, MODEL.digest, tuple(reversed(MODEL.files)))],
    )
    assert shuffled == first


def test_serial_number_is_derived_from_content() -> None:
    one = json.loads(build())
    two = json.loads(build(tool_version="0.2.0"))
    for parsed in (one, two):
        serial = uuid.UUID(parsed["serialNumber"].removeprefix("urn:uuid:"))
        assert serial.version == 5
    assert one["serialNumber"] != two["serialNumber"]


def test_timestamp_omitted_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "timestamp" not in json.loads(build())["metadata"]
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    from_env = build()
    validate(from_env)
    assert json.loads(from_env)["metadata"]["timestamp"].startswith("2023-11-14T22:13:20")
    explicit = build(timestamp=datetime(2024, 6, 1, 12, 0, tzinfo=UTC))
    assert json.loads(explicit)["metadata"]["timestamp"].startswith("2024-06-01T12:00:00")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ValueError):
        build()


def test_metadata_describes_bundle_and_tool() -> None:
    metadata = json.loads(build(bundle_digest_hint="sha256:" + sha("b")))["metadata"]
    component = metadata["component"]
    assert (component["type"], component["name"], component["version"]) == (
        "application",
        "llm-stack",
        "2024.06.1",
    )
    assert component["supplier"]["name"] == "Example Corp"
    assert {"name": "sealift:bundle:digest", "value": "sha256:" + sha("b")} in component[
        "properties"
    ]
    assert metadata["tools"]["components"] == [
        {"name": "sealift", "type": "application", "version": "0.1.0"}
    ]


def test_images_carry_packages_hashes_and_unscanned_layers() -> None:
    document = json.loads(build())
    images = [c for c in document["components"] if c["type"] == "container"]
    assert [i["name"] for i in images] == [VLLM.ref, GATEWAY.ref] or [
        i["name"] for i in images
    ] == [GATEWAY.ref, VLLM.ref]
    vllm = next(i for i in images if i["name"] == VLLM.ref)
    assert vllm["version"] == VLLM.digest
    assert vllm["hashes"] == [{"alg": "SHA-256", "content": sha("vllm")}]
    assert vllm["purl"].startswith("pkg:oci/vllm-openai@sha256:")
    assert "repository_url=docker.io/vllm/vllm-openai" in vllm["purl"]
    assert "tag=v0.5.0" in vllm["purl"]
    assert "mimeType" not in vllm and "mime-type" not in vllm
    purls = sorted(c["purl"] for c in vllm["components"])
    assert purls == sorted(p.purl for p in VLLM.packages)
    assert all(c["type"] == "library" for c in vllm["components"])
    props = {(p["name"], p["value"]) for p in vllm["properties"]}
    assert ("sealift:image:unscanned-layer", VLLM.unscanned_layers[0]) in props
    assert ("sealift:image:platform", "linux/arm64") in props
    assert ("sealift:image:media-type", VLLM.media_type) in props
    nginx = next(i for i in images if i["name"] == GATEWAY.ref)
    assert "repository_url=docker.io/library/nginx" in nginx["purl"]


def test_same_package_in_two_images_gets_distinct_bom_refs() -> None:
    refs = by_ref(json.loads(build()))
    libc = [ref for ref, c in refs.items() if c.get("name") == "libc6"]
    assert len(libc) == 2


def test_model_component_has_per_file_hashes() -> None:
    document = json.loads(build())
    models = [c for c in document["components"] if c["type"] == "machine-learning-model"]
    assert len(models) == 1
    model = models[0]
    assert (model["name"], model["version"]) == ("tiny-llama", "main")
    assert model["hashes"] == [{"alg": "SHA-256", "content": sha("model")}]
    files = {f["name"]: f for f in model["components"]}
    assert set(files) == {f.path for f in MODEL.files}
    for item in MODEL.files:
        component = files[item.path]
        assert component["type"] == "file"
        assert component["hashes"] == [{"alg": "SHA-256", "content": item.sha256hex}]
        assert {"name": "sealift:file:size", "value": str(item.size)} in component["properties"]


def test_dependency_graph() -> None:
    document = json.loads(build())
    graph = {d["ref"]: set(d.get("dependsOn", [])) for d in document["dependencies"]}
    root = document["metadata"]["component"]["bom-ref"]
    top_level = {c["bom-ref"] for c in document["components"]}
    assert graph[root] == top_level
    chart_ref = next(c["bom-ref"] for c in document["components"] if c["name"] == "llm-serving")
    image_refs = {c["bom-ref"] for c in document["components"] if c["type"] == "container"}
    assert graph[chart_ref] == image_refs
    chart = next(c for c in document["components"] if c["name"] == "llm-serving")
    assert chart["type"] == "application"
    assert chart["hashes"] == [{"alg": "SHA-256", "content": sha("chart")}]
    extra = next(c for c in document["components"] if c["name"] == EXTRA.path)
    assert extra["type"] == "file"


def test_empty_bundle_is_valid() -> None:
    document = build(images=[], charts=[], models=[], files=[])
    validate(document)


def test_odd_media_type_and_malformed_digest() -> None:
    odd = SbomImage(
        ref="example.com/x:1",
        digest="sha256:" + sha("x"),
        media_type="Application/Weird Type",
        platforms=(),
        packages=(),
        unscanned_layers=(),
    )
    document = build(images=[odd])
    validate(document)
    with pytest.raises(ValueError):
        build(files=[SbomFile(path="x", digest="md5:abc", size=1)])
    with pytest.raises(ValueError):
        build(
            models=[SbomModel("m", "1", "sha256:" + sha("m"), (SbomModelFile("a", "nothex", 1),))]
        )


def test_packages_from_a_scanned_layer_end_up_in_the_sbom() -> None:
    raw = io.BytesIO()
    status = (
        b"Package: bash\nStatus: install ok installed\nVersion: 5.2.15-2+b7\nArchitecture: amd64\n"
    )
    with tarfile.open(fileobj=raw, mode="w:gz") as archive:
        info = tarfile.TarInfo("var/lib/dpkg/status")
        info.size = len(status)
        archive.addfile(info, io.BytesIO(status))
    raw.seek(0)
    packages = merge_image_packages(
        [scan_layer(raw, "application/vnd.oci.image.layer.v1.tar+gzip")]
    )
    image = SbomImage(
        ref="debian:12",
        digest="sha256:" + sha("d"),
        media_type="application/vnd.oci.image.manifest.v1+json",
        platforms=("linux/amd64",),
        packages=packages,
        unscanned_layers=(),
    )
    document = build(images=[image])
    validate(document)
    assert "pkg:deb/debian/bash@5.2.15-2%2Bb7?arch=amd64" in document.decode()

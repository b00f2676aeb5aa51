"""End to end: a vendor release → bundle (directory, tar, split tar) → verify, inspect, skopeo.

Real parts only: Debian's docker-registry on loopback as the source, skopeo to read what we
wrote, CycloneDX's own validator for the SBOM.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from support.content import SKOPEO_BINARY
from support.registry_server import RegistryServer
from support.release import Release, make_release

from sealift import media_types
from sealift.cli import main

pytestmark = [pytest.mark.registry, pytest.mark.skopeo]


def run_cli(*args: str) -> dict:
    """Run the CLI with --json and return its JSON result; fail loudly on a non-zero exit."""
    result = CliRunner().invoke(main, [*args, "--json", "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory, registry: RegistryServer) -> Release:
    return make_release(tmp_path_factory.mktemp("release"), registry.host, repo_prefix="e2e")


@pytest.fixture(scope="module")
def bundle_dir(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out") / "bundle"
    run_cli(
        "bundle", "create", "-f", str(release.bundle_file), "-o", str(out),
        "--plain-http", release.registry_host,
    )  # fmt: skip
    return out


def blob(bundle: Path, digest: str) -> bytes:
    return (bundle / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


def artifact(bundle: Path, ref: str) -> dict:
    manifest = json.loads((bundle / "sealift-bundle.json").read_text())
    return next(a for a in manifest["artifacts"] if a["ref"] == ref)


def tree_digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_directory_bundle_verifies_and_lists_everything(bundle_dir: Path) -> None:
    report = run_cli("bundle", "verify", str(bundle_dir))
    assert report["ok"] and report["problems"] == []
    kinds = sorted(a["kind"] for a in run_cli("bundle", "inspect", str(bundle_dir))["artifacts"])
    assert kinds == sorted(["chart"] * 2 + ["file"] + ["image"] * 5 + ["model", "sbom"])
    # The layout is a plain OCI image layout every entry of which names its artifact.
    index = json.loads((bundle_dir / "index.json").read_text())
    names = {m["annotations"][media_types.REF_NAME_ANNOTATION] for m in index["manifests"]}
    assert "e2e/vllm/vllm-openai:v0.28.0" in names and "models/llama-3.3-70b-instruct:1" in names
    assert json.loads((bundle_dir / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}


def test_multi_arch_image_is_reduced_to_the_requested_platform(bundle_dir: Path) -> None:
    vllm = artifact(bundle_dir, "e2e/vllm/vllm-openai:v0.28.0")
    assert vllm["mediaType"] == media_types.OCI_MANIFEST
    assert vllm["platforms"] == ["linux/amd64"]
    config = json.loads(
        blob(bundle_dir, json.loads(blob(bundle_dir, vllm["digest"]))["config"]["digest"])
    )
    assert config["architecture"] == "amd64"
    assert "@sha256:" in vllm["source"]


def test_model_is_a_modelpack_artifact_whose_layer_digests_are_file_digests(
    bundle_dir: Path, release: Release
) -> None:
    model = artifact(bundle_dir, "models/llama-3.3-70b-instruct:1")
    manifest = json.loads(blob(bundle_dir, model["digest"]))
    assert manifest["artifactType"] == media_types.MODEL_ARTIFACT
    assert manifest["config"]["mediaType"] == media_types.MODEL_CONFIG
    by_path = {
        layer["annotations"][media_types.MODEL_FILEPATH_ANNOTATION]: layer
        for layer in manifest["layers"]
    }
    assert set(by_path) == set(release.model_files)
    for path, sha in release.model_files.items():
        assert by_path[path]["digest"] == f"sha256:{sha}"
    weights = [
        p for p, layer in by_path.items() if layer["mediaType"] == media_types.MODEL_WEIGHT_RAW
    ]
    assert weights and all(p.endswith(".safetensors") for p in weights)


def test_charts_use_helm_media_types_and_missing_chart_images_are_warned(
    release: Release, tmp_path: Path
) -> None:
    result = run_cli(
        "bundle", "create", "-f", str(release.bundle_file), "-o", str(tmp_path / "b"),
        "--plain-http", release.registry_host,
    )  # fmt: skip
    # The operator image is in the bundle (under the vendor's mirror prefix); the driver is not.
    assert result["warnings"] == [
        "chart gpu-operator v26.7.0 names image nvcr.io/nvidia/driver:550.127.08,"
        " which is not in the bundle"
    ]
    chart = artifact(tmp_path / "b", "charts/gpu-operator:v26.7.0")
    manifest = json.loads(blob(tmp_path / "b", chart["digest"]))
    assert manifest["config"]["mediaType"] == media_types.HELM_CONFIG
    assert [layer["mediaType"] for layer in manifest["layers"]] == [media_types.HELM_CHART]
    tgz = blob(tmp_path / "b", manifest["layers"][0]["digest"])
    assert tgz == (release.root / "charts" / "gpu-operator-v26.7.0.tgz").read_bytes()


def test_sbom_is_valid_cyclonedx_1_6_with_packages_images_and_model_hashes(
    bundle_dir: Path, release: Release
) -> None:
    sbom_artifact = artifact(bundle_dir, "sealift/sbom:2026.12.0")
    layer = json.loads(blob(bundle_dir, sbom_artifact["digest"]))["layers"][0]
    text = blob(bundle_dir, layer["digest"]).decode()
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    assert errors is None, errors
    sbom = json.loads(text)
    assert sbom["specVersion"] == "1.6"
    assert sbom["metadata"]["component"]["name"] == "llama-70b-chat"
    components = {c["name"]: c for c in sbom["components"]}
    vllm = components["e2e/vllm/vllm-openai:v0.28.0"]
    assert vllm["type"] == "container"
    purls = {c.get("purl", "") for c in vllm.get("components", [])}
    assert any(p.startswith("pkg:deb/debian/bash@5.2.15-2") for p in purls)
    assert any(p.startswith("pkg:pypi/vllm@0.28.0") for p in purls)
    prefetch = components["sealift/prefetch:1.0"]
    assert any("pkg:apk/alpine/musl@1.2.5-r0" in c.get("purl", "") for c in prefetch["components"])
    model = next(c for c in sbom["components"] if c["type"] == "machine-learning-model")
    files = {c["name"]: c for c in model["components"]}
    for path, sha in release.model_files.items():
        assert files[path]["hashes"] == [{"alg": "SHA-256", "content": sha}]
    tools = json.dumps(sbom["metadata"]["tools"])
    assert "sealift" in tools


def test_every_image_copies_out_with_skopeo_keeping_its_digest(
    bundle_dir: Path, registry: RegistryServer
) -> None:
    manifest = json.loads((bundle_dir / "sealift-bundle.json").read_text())
    for entry in manifest["artifacts"]:
        if entry["kind"] not in ("image", "chart", "model"):
            continue
        target = f"docker://{registry.host}/e2e-out/{entry['ref']}"
        subprocess.run(
            [SKOPEO_BINARY, "--insecure-policy", "copy", "-q", "--preserve-digests",
             "--dest-tls-verify=false", f"oci:{bundle_dir}:{entry['ref']}", target],
            check=True, capture_output=True,
        )  # fmt: skip
        raw = subprocess.run(
            [SKOPEO_BINARY, "inspect", "--raw", "--tls-verify=false", target],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == entry["digest"], entry["ref"]


def test_tar_and_split_tar_hold_the_same_bundle_and_read_in_place(
    release: Release, bundle_dir: Path, tmp_path: Path
) -> None:
    create = [
        "bundle",
        "create",
        "-f",
        str(release.bundle_file),
        "--plain-http",
        release.registry_host,
    ]
    run_cli(*create, "-o", str(tmp_path / "one.tar"))
    split = run_cli(*create, "-o", str(tmp_path / "split.tar"), "--split", "1MiB")
    parts = sorted(p.name for p in tmp_path.glob("split.tar.0*"))
    assert len(parts) >= 2 and all((tmp_path / p).stat().st_size <= 1024 * 1024 for p in parts)
    index = json.loads((tmp_path / "split.tar.parts.json").read_text())
    for part in index["parts"]:
        data = (tmp_path / part["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == part["sha256"]
    expected = (bundle_dir / "sealift-bundle.json").read_bytes()
    with tarfile.open(tmp_path / "one.tar") as archive:
        member = archive.extractfile("sealift-bundle.json")
        assert member is not None and member.read() == expected
    for given in ("one.tar", "split.tar", "split.tar.000", "split.tar.parts.json"):
        report = run_cli("bundle", "verify", str(tmp_path / given), "--parts")
        assert report["ok"], (given, report["problems"])
        assert report["bundleManifestDigest"] == split["bundleManifestDigest"]
    assert run_cli("bundle", "inspect", str(tmp_path / "split.tar"))["form"].startswith("split tar")


def test_an_extracted_tar_is_an_oci_layout_that_skopeo_reads(
    release: Release, tmp_path: Path
) -> None:
    run_cli(
        "bundle", "create", "-f", str(release.bundle_file), "-o", str(tmp_path / "b.tar"),
        "--plain-http", release.registry_host,
    )  # fmt: skip
    extracted = tmp_path / "x"
    extracted.mkdir()
    subprocess.run(["tar", "-xf", str(tmp_path / "b.tar"), "-C", str(extracted)], check=True)
    model = artifact(extracted, "models/llama-3.3-70b-instruct:1")
    for layer in json.loads(blob(extracted, model["digest"]))["layers"]:
        data = blob(extracted, layer["digest"])  # a hard link to models/NAME/VERSION/FILE
        assert "sha256:" + hashlib.sha256(data).hexdigest() == layer["digest"]
    assert run_cli("bundle", "verify", str(extracted))["ok"]
    inspected = subprocess.run(
        [SKOPEO_BINARY, "inspect", "--raw", f"oci:{extracted}:tools/debug:1.0"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    assert json.loads(inspected)["mediaType"] == media_types.OCI_MANIFEST


def test_the_same_inputs_give_a_byte_identical_bundle(release: Release, tmp_path: Path) -> None:
    create = [
        "bundle",
        "create",
        "-f",
        str(release.bundle_file),
        "--plain-http",
        release.registry_host,
    ]
    run_cli(*create, "-o", str(tmp_path / "a"))
    run_cli(*create, "-o", str(tmp_path / "b"))
    assert tree_digests(tmp_path / "a") == tree_digests(tmp_path / "b")
    run_cli(*create, "-o", str(tmp_path / "a.tar"))
    run_cli(*create, "-o", str(tmp_path / "b.tar"))
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


def test_all_platforms_keeps_the_index_whole(release: Release, tmp_path: Path) -> None:
    bundle_file = tmp_path / "multi.yaml"
    bundle_file.write_text(
        f"""apiVersion: sealift.dev/v1alpha1
kind: Bundle
metadata: {{name: multi, version: "1"}}
images:
  - ref: {release.registry_host}/{release.vllm_repo}:v0.28.0
    allPlatforms: true
  - ref: {release.registry_host}/{release.vllm_repo}:v0.28.0
    platforms: [linux/arm64]
"""
    )
    # The same source twice is refused: names inside a bundle are unique.
    result = CliRunner().invoke(
        main, ["bundle", "create", "-f", str(bundle_file), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 2 and "appears twice" in result.stderr
    bundle_file.write_text(bundle_file.read_text().rsplit("  - ref:", 1)[0])
    run_cli(
        "bundle",
        "create",
        "-f",
        str(bundle_file),
        "-o",
        str(tmp_path / "o"),
        "--plain-http",
        release.registry_host,
    )
    vllm = artifact(tmp_path / "o", f"{release.vllm_repo}:v0.28.0".removeprefix(""))
    assert vllm["mediaType"] == media_types.OCI_INDEX
    assert sorted(vllm["platforms"]) == ["linux/amd64", "linux/arm64"]
    assert run_cli("bundle", "verify", str(tmp_path / "o"))["blobs"] > 6


def test_a_chart_pulled_from_a_registry_keeps_its_digest(
    bundle_dir: Path, registry: RegistryServer, tmp_path: Path
) -> None:
    chart = artifact(bundle_dir, "charts/gpu-operator:v26.7.0")
    target = f"{registry.host}/e2e-charts/gpu-operator:v26.7.0"
    subprocess.run(
        [SKOPEO_BINARY, "--insecure-policy", "copy", "-q", "--preserve-digests",
         "--dest-tls-verify=false", f"oci:{bundle_dir}:charts/gpu-operator:v26.7.0",
         f"docker://{target}"],
        check=True, capture_output=True,
    )  # fmt: skip
    spec = tmp_path / "charts.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: c, version: '1'}\n"
        f"charts:\n  - ref: oci://{target}\n"
    )
    run_cli(
        "bundle",
        "create",
        "-f",
        str(spec),
        "-o",
        str(tmp_path / "b"),
        "--plain-http",
        registry.host,
    )
    pulled = artifact(tmp_path / "b", "charts/gpu-operator:v26.7.0")
    assert pulled["digest"] == chart["digest"]
    assert run_cli("bundle", "verify", str(tmp_path / "b"))["ok"]
    # An image is not a chart.
    spec.write_text(
        spec.read_text().replace(
            "e2e-charts/gpu-operator:v26.7.0", "e2e/nvidia/gpu-operator:v26.7.0"
        )
    )
    result = CliRunner().invoke(
        main,
        [
            "bundle",
            "create",
            "-f",
            str(spec),
            "-o",
            str(tmp_path / "c"),
            "--plain-http",
            registry.host,
        ],
    )
    assert result.exit_code == 2 and "is not a Helm chart" in result.stderr

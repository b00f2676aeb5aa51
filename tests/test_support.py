"""Smoke tests for the test-support layer: real registries, real skopeo, real content."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import socket
import struct
import subprocess
import tarfile
from pathlib import Path

import pytest
import requests
import yaml
from support import registry_server
from support.content import (
    MT_OCI_INDEX,
    MT_OCI_MANIFEST,
    SKOPEO_BINARY,
    apk_installed,
    dpkg_status,
    package_chart_tgz,
    push_layout_to_registry,
    python_dist_info,
    sha256_digest,
    skopeo_inspect_raw,
    write_chart,
    write_docker_archive,
    write_model_folder,
    write_oci_archive,
    write_oci_image_layout,
)
from support.registry_server import RegistryServer, RegistryStartError, loopback_session

BASE_LAYER = {
    "var/lib/dpkg/status": dpkg_status([("libc6", "2.36-9+deb12u4", "amd64")]),
    "etc/os-release": b'ID=debian\nVERSION_ID="12"\n',
}
APP_LAYER = {
    **python_dist_info("vllm-test", "0.1.0"),
    "lib/apk/db/installed": apk_installed([("musl", "1.2.4-r2", "x86_64")]),
}
ACCEPT_ALL = ", ".join(
    [
        MT_OCI_MANIFEST,
        MT_OCI_INDEX,
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


def _skopeo_inspect_local(ref: str) -> dict[str, object]:
    out = subprocess.run(
        [SKOPEO_BINARY, "inspect", ref], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout)
    return result


def _head_manifest(reg: RegistryServer, repo: str, ref: str) -> requests.Response:
    with loopback_session() as session:
        return session.head(
            f"{reg.url}/v2/{repo}/manifests/{ref}",
            headers={"Accept": ACCEPT_ALL},
            auth=reg.auth,
            verify=reg.verify,
            timeout=10,
        )


@pytest.mark.registry
def test_plain_registry_answers(registry: RegistryServer) -> None:
    assert registry.url == f"http://{registry.host}"
    with loopback_session() as session:
        resp = session.get(f"{registry.url}/v2/", verify=registry.verify, timeout=5)
    assert resp.status_code == 200


@pytest.mark.registry
def test_auth_registry_challenges(auth_registry: RegistryServer) -> None:
    assert auth_registry.auth is not None
    with loopback_session() as session:
        anon = session.get(f"{auth_registry.url}/v2/", verify=False, timeout=5)
        authed = session.get(
            f"{auth_registry.url}/v2/", auth=auth_registry.auth, verify=False, timeout=5
        )
        wrong = session.get(
            f"{auth_registry.url}/v2/", auth=(auth_registry.auth[0], "nope"), verify=False
        )
    assert anon.status_code == 401
    assert "Basic" in anon.headers["WWW-Authenticate"]
    assert authed.status_code == 200
    assert wrong.status_code == 401


@pytest.mark.registry
def test_tls_registry_needs_its_ca(tls_registry: RegistryServer) -> None:
    assert tls_registry.url.startswith("https://127.0.0.1:")
    assert tls_registry.ca_path is not None and tls_registry.ca_path.is_file()
    with loopback_session() as session:
        ok = session.get(f"{tls_registry.url}/v2/", verify=str(tls_registry.ca_path), timeout=5)
        assert ok.status_code == 200
        # The system trust store must not accept the throwaway CA.
        with pytest.raises(requests.exceptions.SSLError):
            session.get(f"{tls_registry.url}/v2/", verify=True, timeout=5)


@pytest.mark.registry
def test_registry_start_failure_reports_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hold a port and hand it out every time, so each start attempt hits "address in use".
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        monkeypatch.setattr(registry_server, "free_port", lambda: busy.getsockname()[1])
        server = RegistryServer(work_dir=tmp_path, start_timeout_s=5)
        with pytest.raises(RegistryStartError, match="address already in use"):
            server.start()
        server.stop()


def test_oci_layout_is_deterministic_and_shares_blobs(tmp_path: Path) -> None:
    first = write_oci_image_layout(tmp_path / "a", ref_name="base:1", layers=[BASE_LAYER])
    again = write_oci_image_layout(tmp_path / "b", ref_name="base:1", layers=[BASE_LAYER])
    assert first == again

    layout = tmp_path / "a"
    blobs_before = set((layout / "blobs" / "sha256").iterdir())
    second = write_oci_image_layout(layout, ref_name="app:1", layers=[BASE_LAYER, APP_LAYER])
    added = set((layout / "blobs" / "sha256").iterdir()) - blobs_before
    # Only the new layer, config and manifest are new; the base layer blob is shared.
    assert len(added) == 3
    index = json.loads((layout / "index.json").read_bytes())
    refs = {
        m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"]
        for m in index["manifests"]
    }
    assert refs == {"base:1": first, "app:1": second}
    assert json.loads((layout / "oci-layout").read_bytes()) == {"imageLayoutVersion": "1.0.0"}

    manifest = json.loads((layout / "blobs" / "sha256" / second.split(":")[1]).read_bytes())
    config = json.loads(
        (layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]).read_bytes()
    )
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    for layer_desc, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"], strict=True):
        blob = (layout / "blobs" / "sha256" / layer_desc["digest"].split(":")[1]).read_bytes()
        raw = gzip.decompress(blob)
        assert sha256_digest(raw) == diff_id
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        names = tar.getnames()
    assert "usr/lib/python3/dist-packages" in names  # implicit parent directories exist
    assert "lib/apk/db/installed" in names
    assert names == sorted(names)


@pytest.mark.registry
@pytest.mark.skopeo
def test_push_keeps_digest(registry: RegistryServer, tmp_path: Path) -> None:
    digest = write_oci_image_layout(tmp_path, ref_name="app:1", layers=[BASE_LAYER, APP_LAYER])
    pushed = push_layout_to_registry(tmp_path, "app:1", registry.host, "smoke/app:1")
    assert pushed == digest
    head = _head_manifest(registry, "smoke/app", "1")
    assert head.status_code == 200
    assert head.headers["Docker-Content-Digest"] == digest
    assert head.headers["Content-Type"] == MT_OCI_MANIFEST


@pytest.mark.registry
@pytest.mark.skopeo
def test_push_with_auth(auth_registry: RegistryServer, tmp_path: Path) -> None:
    digest = write_oci_image_layout(tmp_path, ref_name="base:1", layers=[BASE_LAYER])
    with pytest.raises(RuntimeError):
        push_layout_to_registry(tmp_path, "base:1", auth_registry.host, "smoke/base:1")
    pushed = push_layout_to_registry(
        tmp_path, "base:1", auth_registry.host, "smoke/base:1", creds=auth_registry.auth
    )
    assert pushed == digest


@pytest.mark.registry
@pytest.mark.skopeo
def test_push_multi_arch_index_over_tls(tls_registry: RegistryServer, tmp_path: Path) -> None:
    digest = write_oci_image_layout(
        tmp_path,
        ref_name="multi:1",
        layers=[BASE_LAYER],
        extra_platforms=[("linux", "arm64", "v8")],
    )
    pushed = push_layout_to_registry(
        tmp_path, "multi:1", tls_registry.host, "smoke/multi:1", ca_path=tls_registry.ca_path
    )
    assert pushed == digest
    index = json.loads(
        skopeo_inspect_raw(
            f"docker://{tls_registry.host}/smoke/multi:1", ca_path=tls_registry.ca_path
        )
    )
    assert index["mediaType"] == MT_OCI_INDEX
    platforms = {(m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"]}
    assert platforms == {("linux", "amd64"), ("linux", "arm64")}
    for entry in index["manifests"]:
        assert _head_manifest(tls_registry, "smoke/multi", entry["digest"]).status_code == 200


@pytest.mark.skopeo
def test_docker_archive_readable_by_skopeo(tmp_path: Path) -> None:
    archive = tmp_path / "img.tar"
    image_id = write_docker_archive(
        archive, repo_tag="example.test/app:1.0", layers=[BASE_LAYER, APP_LAYER]
    )
    info = _skopeo_inspect_local(f"docker-archive:{archive}")
    assert info["Architecture"] == "amd64"
    assert len(info["Layers"]) == 2  # type: ignore[arg-type]
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    assert manifest[0]["RepoTags"] == ["example.test/app:1.0"]
    assert manifest[0]["Config"] == image_id.split(":")[1] + ".json"


@pytest.mark.skopeo
def test_oci_archive_readable_by_skopeo(tmp_path: Path) -> None:
    archive = tmp_path / "img.oci.tar"
    digest = write_oci_archive(archive, ref_name="app:1", layers=[BASE_LAYER])
    info = _skopeo_inspect_local(f"oci-archive:{archive}:app:1")
    assert info["Digest"] == digest


def test_model_folder_safetensors(tmp_path: Path) -> None:
    hashes = write_model_folder(tmp_path, shards=3, shard_size=3 * 1024 * 1024 + 5, seed=7)
    shard_names = [n for n in hashes if n.endswith(".safetensors")]
    assert shard_names == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    for name, expected in hashes.items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == expected
    data = (tmp_path / shard_names[0]).read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    (tensor,) = tensors.values()
    assert tensor["dtype"] == "U8"
    begin, end = tensor["data_offsets"]
    assert end - begin == len(data) - 8 - header_len
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == shard_names
    # Same seed, same bytes; different seed, different bytes.
    assert (
        write_model_folder(tmp_path / "again", shards=3, shard_size=3 * 1024 * 1024 + 5, seed=7)
        == hashes
    )
    assert (
        write_model_folder(tmp_path / "other", shards=3, shard_size=3 * 1024 * 1024 + 5, seed=8)
        != hashes
    )


def test_model_dir_fixture(model_dir: Path) -> None:
    assert (model_dir / "config.json").is_file()
    assert (model_dir / "model-00002-of-00002.safetensors").is_file()


def test_chart_tgz(tmp_path: Path) -> None:
    chart = write_chart(
        tmp_path / "src",
        images=[
            ("nvcr.io/nvidia", "gpu-operator", "v26.7.0"),
            ("nvcr.io/nvidia/cloud-native", "gpu-operator-validator", "v26.7.0"),
        ],
        nfd_image=("registry.k8s.io/nfd/node-feature-discovery", "v0.17.0"),
    )
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert values["operator"]["image"] == "gpu-operator"
    assert values["validator"]["repository"] == "nvcr.io/nvidia/cloud-native"
    assert values["node-feature-discovery"]["image"]["tag"] == "v0.17.0"
    tgz = package_chart_tgz(chart, tmp_path / "gpu-operator-v26.7.0.tgz")
    again = package_chart_tgz(chart, tmp_path / "again.tgz")
    assert tgz.read_bytes() == again.read_bytes()
    with tarfile.open(tgz) as tar:
        names = tar.getnames()
        meta = yaml.safe_load(tar.extractfile("gpu-operator/Chart.yaml"))  # type: ignore[arg-type]
    assert meta["apiVersion"] == "v2" and meta["version"] == "v26.7.0"
    assert all(n.startswith("gpu-operator/") for n in names)
    assert "gpu-operator/crds/nvidia.com_clusterpolicies.yaml" in names
    assert "gpu-operator/charts/node-feature-discovery/values.yaml" in names

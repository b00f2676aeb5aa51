"""A small but complete vendor release, generated for end-to-end tests and the demo.

One of every source kind the bundle file supports: a multi-arch image in a registry, an OCI
layout, a docker-save archive, an OCI archive, a chart .tgz, a chart folder, a model folder and a
plain file, with packages in the layers for the SBOM scanner to find.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from support.content import (
    apk_installed,
    dpkg_status,
    package_chart_tgz,
    push_layout_to_registry,
    python_dist_info,
    write_chart,
    write_docker_archive,
    write_model_folder,
    write_oci_archive,
    write_oci_image_layout,
)


@dataclass(frozen=True)
class Release:
    """Where the generated release lives and what its sources are."""

    root: Path
    bundle_file: Path
    registry_host: str
    vllm_repo: str
    model_files: dict[str, str]


def make_release(
    root: Path,
    registry_host: str,
    *,
    repo_prefix: str = "vendor",
    shard_size: int = 700_000,
    creds: tuple[str, str] | None = None,
    ca_path: Path | None = None,
) -> Release:
    """Write every source of a release under ``root`` and its bundle file; push the images."""
    root.mkdir(parents=True, exist_ok=True)
    staging = root / "staging"
    vllm_layers = [
        {
            "var/lib/dpkg/status": dpkg_status(
                [("bash", "5.2.15-2", "amd64"), ("libc6", "2.36-9", "amd64")]
            )
        },
        python_dist_info("vllm", "0.28.0"),
    ]
    write_oci_image_layout(
        staging, ref_name="vllm", layers=vllm_layers, extra_platforms=[("linux", "arm64")]
    )
    vllm_repo = f"{repo_prefix}/vllm/vllm-openai"
    push_layout_to_registry(
        staging, "vllm", registry_host, f"{vllm_repo}:v0.28.0", creds=creds, ca_path=ca_path
    )
    operator_layers = [{"usr/bin/gpu-operator": b"operator binary\n" * 100}]
    write_oci_image_layout(staging, ref_name="operator", layers=operator_layers)
    push_layout_to_registry(
        staging,
        "operator",
        registry_host,
        f"{repo_prefix}/nvidia/gpu-operator:v26.7.0",
        creds=creds,
        ca_path=ca_path,
    )
    write_oci_image_layout(
        root / "images" / "prefetch",
        ref_name="prefetch:1.0",
        layers=[{"lib/apk/db/installed": apk_installed([("musl", "1.2.5-r0", "x86_64")])}],
    )
    write_docker_archive(
        root / "images" / "tools.tar",
        repo_tag="tools/debug:1.0",
        layers=[{"usr/bin/debug": b"debug tool\n" * 50}, python_dist_info("requests", "2.32.0")],
    )
    write_oci_archive(
        root / "images" / "validator.tar",
        ref_name="validator:v1",
        layers=[{"usr/bin/validator": b"validator\n" * 20}],
    )
    chart_dir = write_chart(
        root / "charts" / "src" / "gpu-operator",
        images={
            "operator": ("nvcr.io/nvidia", "gpu-operator", "v26.7.0"),
            "driver": ("nvcr.io/nvidia", "driver", "550.127.08"),
        },
    )
    package_chart_tgz(chart_dir, root / "charts" / "gpu-operator-v26.7.0.tgz")
    write_chart(root / "charts" / "folder-chart", name="node-tools", version="0.3.1")
    model_files = write_model_folder(
        root / "models" / "llama-3.3-70b-instruct", shards=2, shard_size=shard_size
    )
    (root / "files").mkdir(exist_ok=True)
    (root / "files" / "corp-ca.pem").write_text(
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    )
    bundle_file = root / "sealift.yaml"
    bundle_file.write_text(
        f"""apiVersion: sealift.dev/v1alpha1
kind: Bundle
metadata: {{name: llama-70b-chat, version: 2026.12.0, vendor: Example Corp}}
images:
  - ref: {registry_host}/{vllm_repo}:v0.28.0
  - ref: {registry_host}/{repo_prefix}/nvidia/gpu-operator:v26.7.0
  - layout: ./images/prefetch
    ref: sealift/prefetch:1.0
  - archive: ./images/tools.tar
    ref: tools/debug:1.0
  - archive: ./images/validator.tar
    ref: nvidia/validator:v1
charts:
  - path: ./charts/gpu-operator-v26.7.0.tgz
  - path: ./charts/folder-chart
models:
  - name: llama-3.3-70b-instruct
    version: "1"
    path: ./models/llama-3.3-70b-instruct
files:
  - path: ./files/corp-ca.pem
"""
    )
    return Release(
        root=root,
        bundle_file=bundle_file,
        registry_host=registry_host,
        vllm_repo=vllm_repo,
        model_files=model_files,
    )

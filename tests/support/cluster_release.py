"""A release for the cluster tests: every GPU Operator image, vLLM, the prefetch image, a model.

Images are small OCI layouts (each with a distinct layer, so digests differ); the chart is the
GPU-Operator-shaped chart of support.gpu_operator_chart; the site file, trust policy and keys
are written beside them. ``weights_seed`` changes the model's bytes, so two releases differ in
their weights digest as an upgrade does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from support.content import package_chart_tgz, write_model_folder, write_oci_image_layout
from support.gpu_operator_chart import bundle_image_refs, write_gpu_operator_chart

MODEL_NAME = "llama-3.3-70b-instruct"
VLLM_REF = "vllm/vllm-openai:v0.28.0"
PREFETCH_REF = "sealift/prefetch:1.0"


@dataclass(frozen=True)
class ClusterRelease:
    """Where the generated release's files are."""

    root: Path
    bundle_file: Path
    chart: Path


def make_cluster_release(root: Path, *, version: str, weights_seed: int = 0) -> ClusterRelease:
    """Write the release's sources and its bundle file under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    layout = root / "images"
    refs = [*bundle_image_refs(), VLLM_REF, PREFETCH_REF]
    entries = []
    for ref in refs:
        write_oci_image_layout(layout, ref_name=ref, layers=[{f"usr/share/{ref}": ref.encode()}])
        entries.append(f"  - layout: ./images\n    sourceRef: {ref}\n    ref: {ref}\n")
    chart_dir = write_gpu_operator_chart(root / "charts" / "gpu-operator")
    chart = package_chart_tgz(chart_dir, root / "charts" / "gpu-operator-v26.7.0.tgz")
    write_model_folder(root / "models" / MODEL_NAME, shards=2, shard_size=4096, seed=weights_seed)
    bundle_file = root / "sealift.yaml"
    bundle_file.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\n"
        f"metadata: {{name: llama-70b-chat, version: {version}, vendor: Example Corp}}\n"
        "images:\n" + "".join(entries) + "charts:\n  - path: ./charts/gpu-operator-v26.7.0.tgz\n"
        f'models:\n  - name: {MODEL_NAME}\n    version: "{version}"\n'
        f"    path: ./models/{MODEL_NAME}\n"
    )
    return ClusterRelease(root=root, bundle_file=bundle_file, chart=chart)


SITE_YAML = """\
apiVersion: sealift.dev/v1alpha1
kind: Site
metadata: {{name: dc1}}
namespace: {namespace}
prefetchNamespace: {namespace}-prefetch
gpuOperator:
  namespace: {operator_namespace}
  driver:
    strategy: precompiled
    tags: [580-5.15.0-78-generic-ubuntu22.04, 580-5.14.0-427.13.1.el9_4-rhel9.4]
nodePools:
  - name: h100
    gpuProduct: {product}
    gpusPerNode: 8
weights:
  credentialsSecret: sealift-weights-reader
  endpoint: http://127.0.0.1:9000
  pathStyle: true
models:
  - name: llama-3.3-70b-instruct
    pool: h100
    servedModelName: llama-70b
    tensorParallelSize: {tp}
    maxModelLen: 8192
    maxNumSeqs: 128
    gpuMemoryUtilization: 0.92
    kvCacheDtype: fp8_e4m3
    replicas: {replicas}
    expectedLoadTime: 5m
    memory: 200Gi
    apiKeySecret: {{name: vllm-api-key}}
timeouts: {{operator: {timeout}, prefetch: {timeout}, rollout: {timeout}}}
"""


def write_site(
    path: Path,
    *,
    namespace: str = "llm",
    operator_namespace: str = "gpu-operator",
    tp: int = 4,
    replicas: int = 2,
    timeout: str = "60s",
    product: str = "NVIDIA-H100-SXM5-80GB",
) -> Path:
    """A site file for the generated release."""
    path.write_text(
        SITE_YAML.format(
            namespace=namespace,
            operator_namespace=operator_namespace,
            tp=tp,
            replicas=replicas,
            timeout=timeout,
            product=product,
        )
    )
    return path

"""`make demo`: the main job end to end on small local data.

Starts Debian's docker-registry and an S3 server (moto) on loopback, generates a small vendor
release (a multi-arch vLLM-like image, the operator image, a layout, two archives, two charts, a
model and a CA file), then runs what each party would run:

* the vendor builds a signed bundle, as a directory and as a tar cut into parts, with the
  prefetch image built in (sealift's own layer on a Python base, from the wheelhouse);
* the customer's security team verifies it offline and re-signs the weights with its own key;
* the platform team verifies everything under the trust policy and installs it into the
  registry mirror and the weight store;
* a GPU node prefetches the weights to its local disk, verified against the policy;
* the platform team renders the cluster objects for GitOps, then brings the stack up in a real
  Kubernetes control plane (kube-apiserver, controller-manager, scheduler) whose GPU nodes kwok
  fakes, and install waits until vLLM is rolled out. The operator's status and the agents' node
  labels are played by tests/support/fake_gpu_stack.py, since no container runs under kwok.

Everything stays on this machine under ./demo-out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.content import write_python_base_image  # noqa: E402 - after the path set-up
from support.fake_gpu_stack import FakeGpuStack  # noqa: E402
from support.k8s_cluster import KubeCluster, missing_k8s_tools  # noqa: E402
from support.pki import write_key_pair  # noqa: E402
from support.registry_server import RegistryServer  # noqa: E402
from support.release import make_release  # noqa: E402
from support.s3_server import CREDENTIALS, S3Server  # noqa: E402

OUT = ROOT / "demo-out"
SEALIFT = str(Path(sys.executable).with_name("sealift"))


def step(title: str, *args: str) -> None:
    """Show and run one sealift command; stop the demo if it fails."""
    print(f"\n$ sealift {' '.join(args)}\n  # {title}", flush=True)
    subprocess.run([SEALIFT, *args], check=True, env={**os.environ, **CREDENTIALS}, cwd=OUT)


def main() -> None:
    """Run the demo."""
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir()
    vendor = write_key_pair(OUT, "vendor")
    customer = write_key_pair(OUT, "customer", curve="P-384")
    policy = OUT / "trust-policy.yaml"
    policy.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: TrustPolicy\nsigners:\n"
        "  - {name: vendor, key: vendor.pub}\n  - {name: customer, key: customer.pub}\n"
        "weights: {required: [customer], optional: [vendor]}\n"
        "bundles: {required: [customer]}\n"
        "releases:\n  - {name: llama-70b-chat, minimumVersion: 2026.12.0}\n"
    )
    with RegistryServer(work_dir=OUT / "registry") as registry, S3Server() as s3:
        s3.client().create_bucket(Bucket="models")
        print(f"registry on {registry.url}, S3 on {s3.endpoint}; generating a small release ...")
        release = make_release(OUT / "release", registry.host, shard_size=8 * 1024 * 1024)
        with_prefetch_image(release.bundle_file)
        print(release.bundle_file.read_text())
        common = ["-f", str(release.bundle_file), "--plain-http", registry.host]
        bundle = str(OUT / "llama70b-2026.12")
        step("vendor: build a signed directory bundle",
             "bundle", "create", *common, "-o", bundle, "--sign-key", str(vendor.key))  # fmt: skip
        step("vendor: the same bundle as a tar cut into parts for transfer media",
             "bundle", "create", *common, "-o", str(OUT / "llama70b.tar"), "--split", "8MiB",
             "--sign-key", str(vendor.key))  # fmt: skip
        step("customer: verify every hash, reading the parts in place",
             "bundle", "verify", str(OUT / "llama70b.tar.000"), "--parts",
             "--trust", str(vendor.public))  # fmt: skip
        step("security team: check the vendor's signature and sign the weights again",
             "weights", "resign", bundle, "--trust", str(vendor.public),
             "--key", str(customer.key))  # fmt: skip
        step("platform team: everything, under the trust policy",
             "bundle", "verify", bundle, "--policy", str(policy))  # fmt: skip
        step("anyone: what is in it", "bundle", "inspect", bundle)
        step("platform team: load the registry mirror and the weight store",
             "install", bundle, "--registry", f"{registry.host}/mirror", "--insecure",
             "--weights", "s3://models/llm", "--s3-endpoint", s3.endpoint,
             "--policy", str(policy), "--audit-log", str(OUT / "audit.jsonl"))  # fmt: skip
        step("GPU node: land the verified weights on local disk",
             "prefetch", "--source", "s3://models/llm/llama-3.3-70b-instruct/1",
             "--dest", str(OUT / "nvme"), "--s3-endpoint", s3.endpoint,
             "--policy", str(policy))  # fmt: skip
        cluster_side(bundle, registry, s3, policy)
    print(f"\ndemo finished: bundles, audit log, manifests and the node's store are in {OUT}")


WHEELS = ROOT / ".cache" / "wheelhouse-linux-amd64-py3.11"


def with_prefetch_image(bundle_file: Path) -> None:
    """Let bundle create build the real prefetch image: sealift's layer on a Python base.

    The base is a small generated stand-in for python:3.11-slim; the layer is the real one,
    installed from the wheelhouse `make wheelhouse` builds.
    """
    if not any(WHEELS.glob("sealift-*.whl")):
        print(f"(no wheelhouse at {WHEELS}: the demo keeps a stand-in prefetch image)")
        return
    write_python_base_image(bundle_file.parent / "images" / "python", ref_name="python:3.11")
    text = bundle_file.read_text().replace(
        "  - layout: ./images/prefetch\n    ref: sealift/prefetch:1.0\n",
        "  - layout: ./images/python\n    ref: library/python:3.11-slim\n"
        "    sourceRef: python:3.11\n",
    )
    text += (
        f"prefetchImage:\n  base: library/python:3.11-slim\n  wheels: {WHEELS}\n  python: '3.11'\n"
    )
    bundle_file.write_text(text)


SITE = """\
apiVersion: sealift.dev/v1alpha1
kind: Site
metadata: {name: demo}
namespace: llm
gpuOperator:
  driver: {strategy: host}          # the demo chart names no driver image
nodePools:
  - {name: h100, gpuProduct: NVIDIA-H100-SXM5-80GB, gpusPerNode: 8}
weights: {credentialsSecret: sealift-weights-reader, endpoint: ENDPOINT, pathStyle: true}
models:
  - name: llama-3.3-70b-instruct
    pool: h100
    tensorParallelSize: 4
    replicas: 2
    expectedLoadTime: 5m
timeouts: {operator: 2m, prefetch: 2m, rollout: 2m}
"""


def cluster_side(bundle: str, registry: RegistryServer, s3: S3Server, policy: Path) -> None:
    """Render for GitOps, then install into a local control plane with fake GPU nodes."""
    missing = missing_k8s_tools()
    if missing:
        print(f"\n(skipping the cluster side: {', '.join(missing)} not built; run make k8s-tools)")
        return
    site = OUT / "site.yaml"
    site.write_text(SITE.replace("ENDPOINT", s3.endpoint))
    with KubeCluster(OUT / "cluster") as kube:
        mirror = f"{registry.host}/mirror"
        place = ["--registry", mirror, "--weights", "s3://models/llm", "--policy", str(policy),
                 "--site", str(site), "--helm", str(kube.helm)]  # fmt: skip
        step("platform team: the cluster objects, checked, for GitOps",
             "render", bundle, *place, "-o", str(OUT / "manifests"))  # fmt: skip
        kube.add_cpu_node("cpu-1")
        kube.add_gpu_node("gpu-1")
        kube.add_gpu_node("gpu-2")
        audit = str(OUT / "audit.jsonl")
        with FakeGpuStack(kube.kubectl, kube.kubeconfig, "sealift-prefetch"):
            step("platform team: GPU Operator, prefetch on every GPU node, then vLLM",
                 "install", bundle, "--insecure", "--s3-endpoint", s3.endpoint, *place,
                 "--kubeconfig", str(kube.kubeconfig), "--audit-log", audit)  # fmt: skip
        print(kube.kubectl("get", "deploy,pods", "-n", "llm", "-o", "wide").stdout)
        print(kube.kubectl("get", "ds,pods", "-n", "sealift-prefetch", "-o", "wide").stdout)
        print(kube.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product").stdout)


if __name__ == "__main__":
    main()

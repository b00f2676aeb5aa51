"""sealift install --site against a real API server: kube-apiserver, controller-manager, scheduler.

kwok fakes the GPU nodes (labels, nvidia.com/gpu capacity, taints) and makes scheduled pods
Running and Ready; support.fake_gpu_stack plays the operator's status and the prefetch agents'
node labels (through sealift's own labelling code, with tokens of the rendered service account).
The mirror is Debian's docker-registry, the store is moto. Each test has its own namespace,
GPU product and nodes, so tests share one cluster without seeing each other.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType
from support.cluster_release import MODEL_NAME, make_cluster_release, write_site
from support.fake_gpu_stack import FakeGpuStack, pod_kubeconfig
from support.pki import write_key_pair
from support.registry_server import RegistryServer
from support.s3_server import CREDENTIALS, S3Server, moto_server_binary

from sealift.cli import main
from sealift.errors import RemoteError
from sealift.prefetch.node_label import apply_node_labels, weights_label

pytestmark = [pytest.mark.registry]
DEPLOYMENT = MODEL_NAME.replace(".", "-")


@pytest.fixture(autouse=True)
def _work_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    if moto_server_binary() is None:
        pytest.skip("moto_server not installed")
    with S3Server() as server:
        server.client().create_bucket(Bucket="models")
        yield server


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two signed bundles of the same model: 2026.12.0 and 2026.12.1 with other weights."""
    root = tmp_path_factory.mktemp("cluster")
    keys = write_key_pair(root, "vendor")
    bundles = {}
    for version, seed in (("2026.12.0", 0), ("2026.12.1", 1)):
        release = make_cluster_release(root / version, version=version, weights_seed=seed)
        out = root / f"bundle-{version}"
        result = CliRunner().invoke(
            main,
            [
                "bundle",
                "create",
                "-f",
                str(release.bundle_file),
                "-o",
                str(out),
                "-q",
                "--sign-key",
                str(keys.key),
            ],
        )
        assert result.exit_code == 0, result.output
        manifest = json.loads((out / "sealift-bundle.json").read_text())
        digest = next(a["digest"] for a in manifest["artifacts"] if a["kind"] == "model")
        bundles[version] = {"path": out, "weights": digest}
    policy = root / "policy.yaml"
    policy.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: TrustPolicy\n"
        f"signers:\n  - {{name: vendor, key: {keys.public}}}\n"
        "weights: {required: [vendor]}\nbundles: {required: [vendor]}\n"
    )
    return {"bundles": bundles, "policy": policy}


def install(
    kube: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    version: str,
    site: Path,
    *extra: str,
) -> Result:
    args = [
        "install",
        str(releases["bundles"][version]["path"]),
        "--registry",
        f"{registry.host}/mirror",
        "--insecure",
        "--weights",
        "s3://models/llm",
        "--s3-endpoint",
        s3.endpoint,
        "--policy",
        str(releases["policy"]),
        "--site",
        str(site),
        "--kubeconfig",
        str(kube.kubeconfig),
        "--helm",
        str(kube.helm),
        "--existing-tags",
        "overwrite",
        "-q",
        *extra,
    ]
    return CliRunner().invoke(main, args, env={**CREDENTIALS, "AWS_ENDPOINT_URL": ""})


def gpu_pool(kube: Any, test: str, *, gpu_nodes: int = 1) -> str:
    """A CPU node and 8-GPU nodes of a GPU product of the test's own; returns the product."""
    product = f"NVIDIA-H100-{test.upper()}"
    kube.add_cpu_node(f"{test}-cpu")
    for n in range(1, gpu_nodes + 1):
        kube.add_gpu_node(f"{test}-gpu-{n}", product=product, gpus=8)
    return product


def agents(kube: Any, test: str) -> FakeGpuStack:
    """The fake operator and prefetch agents, for the site of the test's own namespaces."""
    return FakeGpuStack(kube.kubectl, kube.kubeconfig, f"{test}-prefetch")


def agent_kubeconfig(kube: Any, test: str, node: str, path: Path) -> Path:
    """A kubeconfig as the prefetch agent on ``node``: its pod's bound service-account token."""
    pods = get(
        kube, "pods", "-n", f"{test}-prefetch", "-l", "app.kubernetes.io/name=sealift-prefetch"
    )
    pod = next(p for p in pods["items"] if p["spec"]["nodeName"] == node)
    return pod_kubeconfig(kube.kubectl, kube.kubeconfig, pod, path)


def get(kube: Any, *args: str) -> Any:
    return json.loads(kube.kubectl("get", *args, "-o", "json").stdout)


def resource_versions(kube: Any, namespace: str) -> dict[str, str]:
    """Every object sealift applies for this test, by kind/namespace/name: its resourceVersion."""
    queries = [
        ("deploy,svc,pdb,sa", ["-n", namespace]),
        ("ds,cm,sa", ["-n", f"{namespace}-prefetch"]),
        ("deploy,sa", ["-n", "gpu-operator"]),
        ("clusterrole,clusterrolebinding,validatingadmissionpolicy", []),
        ("clusterpolicy", []),
        ("crd", []),
    ]
    found = {}
    for kinds, scope in queries:
        for item in get(kube, kinds, *scope)["items"]:
            meta = item["metadata"]
            cluster_wide = not scope and kinds != "clusterpolicy"
            if cluster_wide and not any(s in meta["name"] for s in ("sealift", "nvidia.com")):
                continue
            key = f"{item['kind']}/{meta.get('namespace', '')}/{meta['name']}"
            # kube-apiserver 1.37 writes a ValidatingAdmissionPolicy (a new resourceVersion, the
            # same content and generation) on every apply, even an identical one.
            volatile = item["kind"] == "ValidatingAdmissionPolicy"
            found[key] = str(meta.get("generation")) if volatile else meta["resourceVersion"]
    return found


def nodes_labels(kube: Any, product: str) -> dict[str, dict[str, str]]:
    nodes = get(kube, "nodes", "-l", f"nvidia.com/gpu.product={product}")["items"]
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in nodes}


def test_install_brings_up_the_stack_and_a_rerun_changes_nothing(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
) -> None:
    product = gpu_pool(kube_cluster, "t1", gpu_nodes=2)
    site = write_site(tmp_path / "site.yaml", namespace="t1", product=product, replicas=2)
    with agents(kube_cluster, "t1") as fake:
        result = install(kube_cluster, registry, s3, releases, "2026.12.0", site, "--json")
        assert result.exit_code == 0, result.output + fake.problems
        report = json.loads(result.stdout)
        assert report["cluster"]["objectsChanged"] > 10
        deployment = get(kube_cluster, "deploy", DEPLOYMENT, "-n", "t1")
        assert deployment["status"]["readyReplicas"] == 2
        label = weights_label(releases["bundles"]["2026.12.0"]["weights"])
        for name, labels in nodes_labels(kube_cluster, product).items():
            assert labels.get(label) == MODEL_NAME, name
        before = resource_versions(kube_cluster, "t1")
        again = install(kube_cluster, registry, s3, releases, "2026.12.0", site, "--json")
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["cluster"]["objectsChanged"] == 0
        assert resource_versions(kube_cluster, "t1") == before
    audit = [json.loads(line) for line in Path("sealift-audit.jsonl").read_text().splitlines()]
    assert any(r["action"] == "cluster-done" for r in audit)


def test_upgrade_prefetches_beside_the_old_weights_then_rolls_then_drops_them(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
) -> None:
    product = gpu_pool(kube_cluster, "t2", gpu_nodes=2)
    site = write_site(tmp_path / "site.yaml", namespace="t2", product=product, replicas=2)
    old = weights_label(releases["bundles"]["2026.12.0"]["weights"])
    new = weights_label(releases["bundles"]["2026.12.1"]["weights"])
    with agents(kube_cluster, "t2") as fake:
        first = install(kube_cluster, registry, s3, releases, "2026.12.0", site)
        assert first.exit_code == 0, first.output + fake.problems
        result = install(kube_cluster, registry, s3, releases, "2026.12.1", site, "--json")
        assert result.exit_code == 0, result.output + fake.problems
        assert json.loads(result.stdout)["cluster"]["upgraded"] == [MODEL_NAME]
        # While the rollout ran, both versions were on every node (keep 2), then only the new.
        assert all(len(models[MODEL_NAME]) == 1 for models in fake.disk.values())
    deployment = get(kube_cluster, "deploy", DEPLOYMENT, "-n", "t2")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["sealift.dev/weights-digest"] == releases["bundles"]["2026.12.1"]["weights"]
    assert deployment["status"]["updatedReplicas"] == deployment["status"]["replicas"] == 2
    args = get(kube_cluster, "ds", "-n", "t2-prefetch")["items"][0]["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--keep=1" in args
    for labels in nodes_labels(kube_cluster, product).values():
        assert new in labels and old not in labels


def test_a_rollout_without_gpus_to_spare_stalls_with_the_scheduler_reason(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
) -> None:
    product = gpu_pool(kube_cluster, "t3")
    # Two replicas of 8 GPUs on one 8-GPU node: the second can never be scheduled.
    site = write_site(
        tmp_path / "site.yaml", namespace="t3", product=product, tp=8, replicas=2, timeout="20s"
    )
    with agents(kube_cluster, "t3"):
        result = install(kube_cluster, registry, s3, releases, "2026.12.0", site)
    assert result.exit_code == 6, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: vLLM Deployment t3/{DEPLOYMENT} not ready after 2")
    assert "Insufficient nvidia.com/gpu" in line
    assert "2 replicas of 8 GPUs do not fit in the pool's free GPUs" in line
    assert "preemption:" not in line
    assert "(hint: kubectl -n t3 describe deployment" in line


def test_an_upgrade_without_a_spare_gpu_for_max_surge_says_so(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
) -> None:
    product = gpu_pool(kube_cluster, "t5")
    site = write_site(
        tmp_path / "site.yaml", namespace="t5", product=product, tp=8, replicas=1, timeout="20s"
    )
    with agents(kube_cluster, "t5") as fake:
        first = install(kube_cluster, registry, s3, releases, "2026.12.0", site)
        assert first.exit_code == 0, first.output + fake.problems
        result = install(kube_cluster, registry, s3, releases, "2026.12.1", site)
    assert result.exit_code == 6, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert "1/1 new pods, 1 old, 1 ready" in line
    assert "maxSurge 1 needs 8 free GPUs on a NVIDIA-H100-T5 node" in line
    # The old replica still serves, on the old weights, which are still on the node.
    deployment = get(kube_cluster, "deploy", DEPLOYMENT, "-n", "t5")
    assert deployment["status"]["readyReplicas"] == 1
    old = weights_label(releases["bundles"]["2026.12.0"]["weights"])
    assert old in nodes_labels(kube_cluster, product)["t5-gpu-1"]


def test_prefetch_agents_may_label_only_their_own_node_and_only_weights_labels(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
) -> None:
    product = gpu_pool(kube_cluster, "t4", gpu_nodes=2)
    site = write_site(tmp_path / "site.yaml", namespace="t4", product=product, tp=1, replicas=1)
    # The pool also asks for a MIG layout: install labels its nodes for the MIG manager.
    text = site.read_text().replace(
        "  driver:\n",
        "  mig: {strategy: single}\n  driver:\n",
    )
    site.write_text(text.replace("gpusPerNode: 8", "gpusPerNode: 8\n    migConfig: all-3g.40gb"))
    with agents(kube_cluster, "t4"):
        result = install(kube_cluster, registry, s3, releases, "2026.12.0", site)
        assert result.exit_code == 0, result.output
    mig = {
        name: labels.get("nvidia.com/mig.config")
        for name, labels in nodes_labels(kube_cluster, product).items()
    }
    assert mig == {"t4-gpu-1": "all-3g.40gb", "t4-gpu-2": "all-3g.40gb"}
    config = agent_kubeconfig(kube_cluster, "t4", "t4-gpu-1", tmp_path / "agent.yaml")
    digest = releases["bundles"]["2026.12.0"]["weights"]
    # Its own node: allowed.
    assert apply_node_labels("t4-gpu-1", MODEL_NAME, [digest], kubeconfig=config)
    # Another node: refused by the admission policy.
    with pytest.raises(RemoteError, match="label only the node it runs on"):
        apply_node_labels("t4-gpu-2", MODEL_NAME, [digest], kubeconfig=config)
    # Any other label, or a taint, on its own node: refused.
    agent = ["--kubeconfig", str(config)]
    # (kubectl label and taint read the node first, which the agent may not: patch directly.)
    as_agent = Client(config=KubeConfig.from_file(str(config)), trust_env=False)
    for patch, message in (
        ({"metadata": {"labels": {"evil": "1"}}}, "may change only weights.sealift.dev/"),
        ({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}, "spec or annotations"),
        ({"metadata": {"finalizers": ["x.example/hold"]}}, "owners or finalizers"),
    ):
        with pytest.raises(ApiError, match=message):
            as_agent.patch(Node, "t4-gpu-1", patch, patch_type=PatchType.MERGE)
    # And nothing else: no pods, no secrets.
    for verb in (
        ["get", "pods", "-A"],
        ["get", "secrets", "-n", "t4-prefetch"],
        ["get", "node", "t4-gpu-1"],
    ):
        assert kube_cluster.kubectl(*verb, *agent, check=False, admin=False).returncode != 0


def test_the_prefetch_command_labels_its_node_through_the_agent_identity(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
) -> None:
    """The real agent, run by hand as the DaemonSet runs it: weights from the store, a label."""
    product = gpu_pool(kube_cluster, "t6")
    site = write_site(tmp_path / "site.yaml", namespace="t6", product=product, replicas=1)
    with agents(kube_cluster, "t6"):
        assert install(kube_cluster, registry, s3, releases, "2026.12.0", site).exit_code == 0
    # Forget what the fake agent did, then let the real one do it.
    node = get(kube_cluster, "node", "t6-gpu-1")["metadata"]["labels"]
    for key in [k for k in node if k.startswith("weights.sealift.dev/")]:
        kube_cluster.kubectl("label", "node", "t6-gpu-1", f"{key}-")
    config = agent_kubeconfig(kube_cluster, "t6", "t6-gpu-1", tmp_path / "agent.yaml")
    result = CliRunner().invoke(
        main,
        [
            "prefetch",
            "--source",
            f"s3://models/llm/{MODEL_NAME}/2026.12.0",
            "--dest",
            str(tmp_path / "nvme"),
            "--policy",
            str(releases["policy"]),
            "--s3-endpoint",
            s3.endpoint,
            "--label-node",
            "--json",
            "-q",
        ],
        env={**CREDENTIALS, "NODE_NAME": "t6-gpu-1", "KUBECONFIG": str(config)},
    )
    assert result.exit_code == 0, result.output
    labels = json.loads(result.stdout)["nodeLabels"]
    digest = releases["bundles"]["2026.12.0"]["weights"]
    assert labels == {weights_label(digest): MODEL_NAME}
    assert (
        get(kube_cluster, "node", "t6-gpu-1")["metadata"]["labels"][weights_label(digest)]
        == MODEL_NAME
    )


def test_label_node_without_node_name_fails_before_any_download(
    releases: dict[str, Any], tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        main,
        [
            "prefetch",
            "--source",
            "s3://models/llm/x/1",
            "--dest",
            str(tmp_path / "nvme"),
            "--policy",
            str(releases["policy"]),
            "--label-node",
        ],
        env={"NODE_NAME": ""},
    )
    assert result.exit_code == 2
    assert "--label-node needs the node's name in NODE_NAME" in result.stderr
    assert not (tmp_path / "nvme").exists()


def test_a_mirror_tag_moved_after_install_is_refused_before_anything_is_applied(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
) -> None:
    product = gpu_pool(kube_cluster, "t7")
    site = write_site(tmp_path / "site.yaml", namespace="t7", product=product, replicas=1)
    with agents(kube_cluster, "t7"):
        assert install(kube_cluster, registry, s3, releases, "2026.12.0", site).exit_code == 0
    # Someone with write access to the mirror points the operator's tag at another image.
    base = f"docker://{registry.host}/mirror/nvidia"
    subprocess.run(
        [
            "/usr/bin/skopeo",
            "copy",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            f"{base}/cloud-native/gpu-operator-validator:v26.7.0",
            f"{base}/gpu-operator:v26.7.0",
        ],
        check=True,
        capture_output=True,
    )
    before = resource_versions(kube_cluster, "t7")
    args = ["--existing-tags", "skip"]
    result = install(kube_cluster, registry, s3, releases, "2026.12.0", site, *args)
    assert result.exit_code == 3, result.output
    assert f"mirror tag {registry.host}/mirror/nvidia/gpu-operator:v26.7.0 names sha256:" in (
        result.stderr
    )
    assert resource_versions(kube_cluster, "t7") == before


def test_a_pod_stuck_without_container_state_is_explained_by_its_last_warning(
    kube_cluster: Any, tmp_path: Path
) -> None:
    """A pod that cannot mount its Secret shows no container state: the event says why."""
    from sealift.installer.kube_cluster import KubeCluster as Cluster
    from sealift.installer.rollout_wait import deployment_check

    namespace = kube_cluster.create_namespace("t8")
    # Bound to a node with no kubelet (not even kwok's): the pod stays Pending with no status.
    kube_cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "v", "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": {"app": "v"}},
                "template": {
                    "metadata": {"labels": {"app": "v"}},
                    "spec": {"nodeName": "t8-gone", "containers": [{"name": "c", "image": "x"}]},
                },
            },
        }
    )
    deadline = time.monotonic() + 30
    pods: list[Any] = []
    while not pods and time.monotonic() < deadline:
        pods = get(kube_cluster, "pods", "-n", namespace)["items"]
        time.sleep(0.2)
    pod = pods[0]["metadata"]["name"]
    kube_cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod}.mount", "namespace": namespace},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace},
            "type": "Warning",
            "reason": "FailedMount",
            "message": 'MountVolume.SetUp failed for volume "aws": secret "sealift-weights-reader"'
            " not found",
            "lastTimestamp": "2026-11-30T08:00:00Z",
            "firstTimestamp": "2026-11-30T08:00:00Z",
            "source": {"component": "kubelet"},
        }
    )
    reason = deployment_check(Cluster(kube_cluster.kubeconfig), namespace, "v")()
    assert reason is not None
    assert 'FailedMount: MountVolume.SetUp failed for volume "aws": secret' in reason, reason


def test_objects_of_a_model_the_site_no_longer_names_are_removed(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
) -> None:
    product = gpu_pool(kube_cluster, "t9")
    site = write_site(tmp_path / "site.yaml", namespace="t9", product=product, replicas=1)
    with agents(kube_cluster, "t9") as fake:
        first = install(kube_cluster, registry, s3, releases, "2026.12.0", site)
        assert first.exit_code == 0, first.output + fake.problems
        # The same model, now served under another name: the old objects must go.
        site.write_text(
            site.read_text().replace("    pool: h100", "    pool: h100\n    deployment: chat")
        )
        result = install(kube_cluster, registry, s3, releases, "2026.12.0", site, "--json")
        assert result.exit_code == 0, result.output + fake.problems
    removed = json.loads(result.stdout)["cluster"]["removed"]
    assert sorted(removed) == sorted(
        [
            f"Deployment t9/{DEPLOYMENT}",
            f"Service t9/{DEPLOYMENT}",
            f"PodDisruptionBudget t9/{DEPLOYMENT}",
            f"DaemonSet t9-prefetch/sealift-prefetch-{DEPLOYMENT}",
        ]
    )
    assert [d["metadata"]["name"] for d in get(kube_cluster, "deploy", "-n", "t9")["items"]] == [
        "chat"
    ]
    names = [d["metadata"]["name"] for d in get(kube_cluster, "ds", "-n", "t9-prefetch")["items"]]
    assert names == ["sealift-prefetch-chat"]


@pytest.mark.parametrize(
    ("volume", "mount", "security", "message"),
    [
        (
            {"hostPath": {"path": "/", "type": "Directory"}},
            {"readOnly": True},
            {},
            "hostPath volumes must be existing folders",
        ),
        (
            {"hostPath": {"path": "/opt/models/x", "type": "DirectoryOrCreate"}},
            {"readOnly": True},
            {},
            "hostPath volumes must be existing folders",
        ),
        ({"hostPath": {"path": "/opt/models/x", "type": "Directory"}}, {}, {}, "mounted read-only"),
        ({"emptyDir": {}}, {}, {"privileged": True}, "may not be privileged"),
        (
            {"emptyDir": {}},
            {},
            {"capabilities": {"add": ["SYS_ADMIN"]}},
            "only the Baseline capabilities",
        ),
        ({"emptyDir": {}}, {}, {"seccompProfile": {"type": "Unconfined"}}, "may not be Unconfined"),
    ],
)
def test_the_serving_namespace_refuses_what_its_privileged_level_would_allow(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
    volume: dict[str, Any],
    mount: dict[str, Any],
    security: dict[str, Any],
    message: str,
) -> None:
    namespace = "t10"
    if kube_cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0:
        product = gpu_pool(kube_cluster, "t10")
        site = write_site(tmp_path / "site.yaml", namespace=namespace, product=product, replicas=1)
        with agents(kube_cluster, "t10"):
            result = install(kube_cluster, registry, s3, releases, "2026.12.0", site)
            assert result.exit_code == 0, result.output  # vLLM's own pods pass the policy
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"intruder-{abs(hash(json.dumps([volume, security])))}",
            "namespace": namespace,
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "securityContext": security,
                    "volumeMounts": [{"name": "v", "mountPath": "/host", **mount}],
                }
            ],
            "volumes": [{"name": "v", **volume}],
        },
    }
    denied = kube_cluster.kubectl("create", "-f", "-", input=json.dumps(pod), check=False)
    assert denied.returncode != 0 and message in denied.stderr, denied.stderr


def test_a_privileged_debug_container_cannot_be_added_to_a_serving_pod(
    kube_cluster: Any,
    registry: RegistryServer,
    s3: S3Server,
    releases: dict[str, Any],
    tmp_path: Path,
) -> None:
    namespace = "t11"
    product = gpu_pool(kube_cluster, "t11")
    site = write_site(tmp_path / "site.yaml", namespace=namespace, product=product, replicas=1)
    with agents(kube_cluster, "t11"):
        assert install(kube_cluster, registry, s3, releases, "2026.12.0", site).exit_code == 0
    pod = get(kube_cluster, "pods", "-n", namespace)["items"][0]["metadata"]["name"]
    debug = kube_cluster.kubectl(
        "debug", "-n", namespace, pod, "--image=busybox", "--profile=sysadmin", check=False
    )
    assert debug.returncode != 0 and "may not be privileged" in debug.stderr, debug.stderr

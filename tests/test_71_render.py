"""sealift render: the cluster objects from a signed bundle and a site file, checked offline.

The chart is rendered by a real helm; every object is validated strictly (built-in kinds against
Kubernetes 1.37's schemas, the ClusterPolicy against its CRD) and no image may come from outside
the mirror. Bad input is one line naming the file and key, with nothing written.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from support.cluster_release import MODEL_NAME, make_cluster_release, write_site
from support.pki import write_key_pair

from sealift.cli import main
from sealift.installer.image_policy import check_images, image_uses
from sealift.installer.manifest_validation import validate_objects
from sealift.installer.mirror import MirrorTarget
from sealift.prefetch.node_label import weights_label

REPO = Path(__file__).resolve().parents[1]
HELM = Path(os.environ.get("SEALIFT_K8S_BIN", REPO / ".cache" / "k8s" / "bin")) / "helm"
MIRROR = "mirror.corp.internal:5000/llm"

pytestmark = pytest.mark.skipif(not HELM.exists(), reason=f"{HELM} missing (make k8s-tools)")


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("render")
    release = make_cluster_release(root / "release", version="2026.12.0")
    # A second chart whose template hard-codes an image from the internet.
    rogue = root / "release" / "charts" / "rogue"
    shutil.copytree(root / "release" / "charts" / "gpu-operator", rogue)
    meta = yaml.safe_load((rogue / "Chart.yaml").read_text())
    (rogue / "Chart.yaml").write_text(yaml.safe_dump({**meta, "name": "rogue-operator"}))
    (rogue / "templates" / "extra.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: phone-home, namespace: x}\n"
        "spec: {containers: [{name: c, image: docker.io/library/busybox:1.36}]}\n"
    )
    text = release.bundle_file.read_text()
    release.bundle_file.write_text(text.replace("charts:\n", "charts:\n  - path: ./charts/rogue\n"))
    keys = write_key_pair(root, "vendor")
    bundle = root / "bundle"
    result = CliRunner().invoke(
        main,
        [
            "bundle",
            "create",
            "-f",
            str(release.bundle_file),
            "-o",
            str(bundle),
            "-q",
            "--sign-key",
            str(keys.key),
        ],
    )
    assert result.exit_code == 0, result.output
    policy = root / "policy.yaml"
    policy.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: TrustPolicy\n"
        f"signers:\n  - {{name: vendor, key: {keys.public}}}\n"
        "weights: {required: [vendor]}\nbundles: {required: [vendor]}\n"
    )
    other = write_key_pair(root / "other", "stranger")
    wrong = root / "wrong-policy.yaml"
    wrong.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: TrustPolicy\n"
        f"signers:\n  - {{name: stranger, key: {other.public}}}\n"
        "weights: {required: [stranger]}\nbundles: {required: [stranger]}\n"
    )
    return {"root": root, "bundle": bundle, "policy": policy, "wrong": wrong}


def render(
    signed: dict[str, Path],
    site: Path,
    out: Path,
    *extra: str,
    policy: Path | None = None,
    helm: Path = HELM,
) -> Result:
    args = ["render", str(signed["bundle"]), "--registry", MIRROR, "--weights", "s3://models/llm",
            "--policy", str(policy or signed["policy"]), "--site", str(site), "--helm", str(helm),
            "-o", str(out), "-q", *extra]  # fmt: skip
    return CliRunner().invoke(main, args)


def load(out: Path) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for name in ("10-gpu-operator.yaml", "20-prefetch.yaml", "30-serving.yaml"):
        objects += [d for d in yaml.safe_load_all((out / name).read_text()) if d]
    return objects


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def test_render_writes_validated_objects_that_run_only_mirror_images(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml")
    out = tmp_path / "manifests"
    result = render(signed, site, out, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    objects = load(out)
    assert report["objects"] == len(objects)
    assert sorted(p.name for p in out.iterdir()) == [
        "10-gpu-operator.yaml",
        "20-prefetch.yaml",
        "30-serving.yaml",
        "kustomization.yaml",
    ]
    # Every image, in every object and custom resource, comes from the mirror.
    uses = image_uses(objects)
    assert len(uses) >= 12
    assert all(use.image.startswith(MIRROR + "/") for use in uses), uses
    policy = find(objects, "ClusterPolicy", "cluster-policy")
    assert policy["spec"]["driver"]["usePrecompiled"] is True
    # Precompiled: the operator composes <branch>-<kernel>-<os>, so it is given the branch.
    assert policy["spec"]["driver"]["version"] == "580"
    assert policy["spec"]["driver"]["repository"] == f"{MIRROR}/nvidia"
    assert policy["spec"]["driver"]["manager"]["repository"] == f"{MIRROR}/nvidia/cloud-native"
    assert policy["spec"]["migManager"]["enabled"] is False
    # Versions the chart's values leave out are its appVersion defaults, made explicit.
    assert policy["spec"]["validator"]["version"] == "v26.7.0"
    # The chart's own workloads are pinned by digest after rendering; only the ClusterPolicy,
    # from which the operator composes images, keeps tags (checked against the mirror at install).
    manifest = json.loads((signed["bundle"] / "sealift-bundle.json").read_text())
    digests = {a["ref"]: a["digest"] for a in manifest["artifacts"] if a["kind"] == "image"}
    nfd = find(objects, "DaemonSet", "nfd-worker")
    assert nfd["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"{MIRROR}/nfd/node-feature-discovery@{digests['nfd/node-feature-discovery:v0.18.2']}"
    )
    operator = find(objects, "Deployment", "gpu-operator")["spec"]["template"]["spec"]
    assert operator["containers"][0]["image"] == (
        f"{MIRROR}/nvidia/gpu-operator@{digests['nvidia/gpu-operator:v26.7.0']}"
    )
    manager = next(
        e for e in operator["containers"][0]["env"] if e["name"] == "DRIVER_MANAGER_IMAGE"
    )
    assert manager["value"].endswith(digests["nvidia/cloud-native/k8s-driver-manager:v0.9.0"])
    # Helm hooks (the chart's CRD-upgrade Job) are Helm's business, never applied by sealift.
    assert not any(o["kind"] == "Job" for o in objects)
    # The whole render passes the same offline validation again (idempotent, strict).
    assert validate_objects(objects) == len(objects)


def test_vllm_deployment_follows_the_reference_skeleton(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml", tp=4, replicas=3)
    out = tmp_path / "m"
    assert render(signed, site, out).exit_code == 0
    objects = load(out)
    manifest = json.loads((signed["bundle"] / "sealift-bundle.json").read_text())
    model = next(a for a in manifest["artifacts"] if a["kind"] == "model")
    vllm = next(a for a in manifest["artifacts"] if a["ref"].startswith("vllm/"))
    deployment = find(objects, "Deployment", MODEL_NAME.replace(".", "-"))
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 600
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-SXM5-80GB"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Exists"}
    ]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expression = term["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expression["key"] == weights_label(model["digest"])
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    container = pod["containers"][0]
    assert container["image"] == f"{MIRROR}/vllm/vllm-openai@{vllm['digest']}"
    # The pod sees exactly this version's verified folder, read-only, and nothing else on disk.
    assert container["args"][0] == f"/models/{MODEL_NAME}"
    assert "--tensor-parallel-size=4" in container["args"]
    assert "--kv-cache-dtype=fp8_e4m3" in container["args"]
    assert "--served-model-name=llama-70b" in container["args"]
    shutdown = next(a for a in container["args"] if a.startswith("--shutdown-timeout="))
    assert 15 + int(shutdown.split("=")[1]) < 600  # drains inside the grace period
    resources = container["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == "4"
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    # Sized to the 5 minute p95 load time, with a margin for the slow tail: 1.5 x 300 s + 60 s.
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 510
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 15}}
    api_key = next(e for e in container["env"] if e["name"] == "VLLM_API_KEY")
    assert api_key["valueFrom"]["secretKeyRef"] == {"name": "vllm-api-key", "key": "api-key"}
    assert not any("api-key" in arg for arg in container["args"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["models"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["models"]["hostPath"] == {
        "path": f"/opt/models/{MODEL_NAME}/{model['digest'][7:]}",
        "type": "Directory",
    }
    assert pod["automountServiceAccountToken"] is False
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    assert (
        find(objects, "Service", deployment["metadata"]["name"])["spec"]["ports"][0]["port"] == 8000
    )
    assert find(objects, "PodDisruptionBudget", deployment["metadata"]["name"])


def test_prefetch_daemonset_gets_policy_and_credentials_by_reference(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml")
    out = tmp_path / "m"
    assert render(signed, site, out).exit_code == 0
    objects = load(out)
    daemonset = next(
        o for o in objects if o["kind"] == "DaemonSet" and "prefetch" in o["metadata"]["name"]
    )
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "@sha256:" in container["image"] and "/sealift/prefetch@" in container["image"]
    args = container["args"]
    assert args[0] == "prefetch"
    assert f"--source=s3://models/llm/{MODEL_NAME}/2026.12.0" in args
    assert "--label-node" in args and "--keep=2" in args
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["AWS_SHARED_CREDENTIALS_FILE"]["value"] == "/etc/sealift/aws/credentials"
    assert not any("SECRET" in name or "ACCESS_KEY" in name for name in env)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["aws"]["secret"]["secretName"] == "sealift-weights-reader"
    config = find(objects, "ConfigMap", "sealift-trust-policy")
    carried = yaml.safe_load(config["data"]["policy.yaml"])
    assert carried["signers"][0]["key"] == "vendor.pub.pem"
    assert config["data"]["vendor.pub.pem"].startswith("-----BEGIN PUBLIC KEY-----")
    # Exactly get and patch on nodes; the admission policy narrows it to the agent's own node.
    role = next(
        o for o in objects if o["kind"] == "ClusterRole" and "prefetch" in o["metadata"]["name"]
    )
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    assert daemonset["metadata"]["namespace"] == "llm-prefetch"
    assert config["metadata"]["namespace"] == "llm-prefetch"
    assert any(o["kind"] == "ValidatingAdmissionPolicyBinding" for o in objects)
    assert not any(o["kind"] == "Secret" for o in objects)


def test_render_is_deterministic(signed: dict[str, Path], tmp_path: Path) -> None:
    site = write_site(tmp_path / "site.yaml")
    assert render(signed, site, tmp_path / "a").exit_code == 0
    assert render(signed, site, tmp_path / "b").exit_code == 0
    for name in ("10-gpu-operator.yaml", "20-prefetch.yaml", "30-serving.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_chart_that_names_an_outside_image_is_refused_and_nothing_is_written(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml")
    site.write_text(
        site.read_text().replace(
            "  namespace: gpu-operator\n", "  namespace: gpu-operator\n  chart: rogue-operator\n"
        )
    )
    out = tmp_path / "m"
    result = render(signed, site, out)
    assert result.exit_code == 2, result.output
    assert "Pod x/phone-home" in result.stderr
    assert "docker.io/library/busybox:1.36" in result.stderr
    assert "not in the mirror" in result.stderr
    assert not out.exists()


def pod_running(image: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": image}]}}  # fmt: skip


def test_images_are_found_in_every_shape_they_hide_in() -> None:
    mirror = MirrorTarget("mirror.local", "llm")
    custom = {
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {
            "a": {"repository": "quay.io/x", "tag": "1"},
            "b": {"repository": "mirror.local/llm", "image": "y"},
            "c": {"enabled": False, "repository": "docker.io/z", "image": "z", "version": "1"},
            "d": {"args": ["--image=ghcr.io/evil:1"]},
            "e": {"env": [{"name": "HELPER_IMAGE", "value": "docker.io/helper:2"}]},
        },
    }
    found = {use.image for use in image_uses([custom])}
    assert found == {"quay.io/x:1", "mirror.local/llm/y", "ghcr.io/evil:1", "docker.io/helper:2"}
    with pytest.raises(Exception, match="not in the mirror"):
        check_images([custom], mirror, pinned=False)
    lookalike = pod_running("mirror.local/llm-evil/x:1")
    with pytest.raises(Exception, match="not in the mirror"):
        check_images([lookalike], mirror, pinned=False)


def test_check_images_refuses_tags_for_sealift_objects() -> None:
    mirror = MirrorTarget("mirror.local", "llm")
    pod = pod_running("mirror.local/llm/x:1")
    assert check_images([pod], mirror, pinned=False) == 1
    with pytest.raises(Exception, match="by tag"):
        check_images([pod], mirror, pinned=True)
    other = pod_running("mirror.local/other/x:1")
    with pytest.raises(Exception, match="not in the mirror"):
        check_images([other], mirror, pinned=False)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("pool: h100", "pool: a100"), "models[0].pool 'a100' is not a node pool"),
        (("tensorParallelSize: 4", "tensorParallelSize: 16"), "more than the 8 GPUs per node"),
        (("kind: Site", "kind: Site\nbogus: 1"), "bogus"),
        (("expectedLoadTime: 5m", "expectedLoadTime: soon"), "expectedLoadTime"),
        (
            ("strategy: precompiled", "strategy: packageRepository"),
            "needs repositoryConfigMap",
        ),
        (("name: llama-3.3-70b-instruct", "name: mistral"), "the bundle has no model 'mistral'"),
        (("    tags: [", "    # tags: ["), "the site file lists no gpuOperator.driver.tags"),
        (
            (
                "    tags: [580-5.15.0-78",
                "    tags: [575-5.15.0-78-generic-ubuntu22.04, 580-5.15.0-78",
            ),
            "name several driver branches",
        ),
        (
            ("  pathStyle: true", "  pathStyle: true\n  hostPath: /"),
            "weights.hostPath",
        ),
        (("  pathStyle: true", "  pathStyle: true\n  hostPath: /opt/../etc"), "is not a folder"),
        (("prefetchNamespace: llm-prefetch", "prefetchNamespace: llm"), "is the serving namespace"),
        (("  driver:\n", "  mig: {strategy: mixed}\n  driver:\n"), "mixed is not supported"),
        (("gpusPerNode: 8", "gpusPerNode: 8\n    migConfig: all-1g.10gb"), "needs a MIG strategy"),
        (
            (
                "    tags: [580-5.15.0-78",
                "    tags: [580-9.9.9-1-generic-ubuntu22.04, 580-5.15.0-78",
            ),
            "driver:580-9.9.9-1-generic-ubuntu22.04, which the bundle does not carry",
        ),
    ],
)
def test_bad_site_files_fail_with_one_line_naming_the_key(
    signed: dict[str, Path], tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    site = write_site(tmp_path / "site.yaml")
    site.write_text(site.read_text().replace(*change))
    out = tmp_path / "m"
    result = render(signed, site, out)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "(hint: " in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_older_vllm_images_can_go_without_the_shutdown_timeout_flag(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml")
    site.write_text(
        site.read_text().replace("    replicas:", "    shutdownTimeoutFlag: false\n    replicas:")
    )
    out = tmp_path / "m"
    assert render(signed, site, out).exit_code == 0
    deployment = find(load(out), "Deployment", "llama-3-3-70b-instruct")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--shutdown-timeout") for a in args)


def test_extra_args_cannot_override_what_sealift_sets(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml")
    site.write_text(
        site.read_text().replace(
            "    replicas:", "    extraArgs: [--tensor-parallel-size=8]\n    replicas:"
        )
    )
    result = render(signed, site, tmp_path / "m")
    assert result.exit_code == 2
    assert "repeats a flag sealift sets" in result.stderr


def test_a_bundle_signed_by_someone_else_is_not_rendered(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml")
    out = tmp_path / "m"
    result = render(signed, site, out, policy=signed["wrong"])
    assert result.exit_code == 3, result.output
    assert not out.exists()


def test_missing_helm_is_a_resource_error(signed: dict[str, Path], tmp_path: Path) -> None:
    site = write_site(tmp_path / "site.yaml")
    result = render(signed, site, tmp_path / "m", helm=tmp_path / "nohelm")
    assert result.exit_code == 5, result.output
    assert "helm was not found" in result.stderr


def test_install_with_a_site_needs_a_policy_file(signed: dict[str, Path], tmp_path: Path) -> None:
    site = write_site(tmp_path / "site.yaml")
    result = CliRunner().invoke(
        main,
        [
            "install",
            str(signed["bundle"]),
            "--registry",
            MIRROR,
            "--weights",
            "s3://m/llm",
            "--site",
            str(site),
            "--audit-log",
            str(tmp_path / "audit.jsonl"),
        ],
    )
    assert result.exit_code == 2
    assert "--site needs --policy FILE" in result.stderr


def _install_args(
    signed: dict[str, Path], site: Path, kubeconfig: Path, tmp_path: Path
) -> list[str]:
    # The registry and store do not exist: the cluster checks must fail before they are tried.
    return [
        "install",
        str(signed["bundle"]),
        "--registry",
        "127.0.0.1:9/llm",
        "--insecure",
        "--weights",
        "s3://m/llm",
        "--s3-endpoint",
        "http://127.0.0.1:9",
        "--policy",
        str(signed["policy"]),
        "--site",
        str(site),
        "--kubeconfig",
        str(kubeconfig),
        "--helm",
        str(HELM),
        "--audit-log",
        str(tmp_path / "audit.jsonl"),
    ]


def test_an_unusable_kubeconfig_fails_before_anything_moves(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml")
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    result = CliRunner().invoke(main, _install_args(signed, site, broken, tmp_path))
    assert result.exit_code == 2, result.output
    assert f"kubeconfig {broken} cannot be used" in result.stderr


def test_an_unreachable_api_server_fails_before_anything_moves(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml")
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": "https://127.0.0.1:9",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "not-a-secret-that-matters"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    result = CliRunner().invoke(main, _install_args(signed, site, config, tmp_path))
    assert result.exit_code == 4, result.output
    assert "GET /version: cannot reach the Kubernetes API" in result.stderr
    assert "not-a-secret-that-matters" not in result.output


def test_mirror_credentials_and_the_store_ca_are_referenced_never_embedded(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    site = write_site(tmp_path / "site.yaml")
    text = site.read_text().replace("nodePools:", "mirror: {pullSecret: mirror-pull}\nnodePools:")
    site.write_text(text.replace("  pathStyle: true", "  pathStyle: true\n  caConfigMap: corp-ca"))
    out = tmp_path / "m"
    assert render(signed, site, out).exit_code == 0
    objects = load(out)
    for kind, name in (
        ("DaemonSet", "sealift-prefetch-llama-3-3-70b-instruct"),
        ("Deployment", "llama-3-3-70b-instruct"),
    ):
        pod = find(objects, kind, name)["spec"]["template"]["spec"]
        assert pod["imagePullSecrets"] == [{"name": "mirror-pull"}]
    agent = find(objects, "DaemonSet", "sealift-prefetch-llama-3-3-70b-instruct")
    container = agent["spec"]["template"]["spec"]["containers"][0]
    assert "--s3-ca-file=/etc/sealift/s3-ca/ca.crt" in container["args"]
    policy = find(objects, "ClusterPolicy", "cluster-policy")
    assert policy["spec"]["devicePlugin"]["imagePullSecrets"] == ["mirror-pull"]

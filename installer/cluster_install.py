"""The cluster side of install: plan the objects, check them, apply them in order, wait for each.

``plan_cluster`` turns a verified bundle, a site file and the mirror and store locations into
three groups of objects (GPU Operator, prefetch, serving), validated offline and checked so that
no image comes from outside the mirror. ``render_plan`` writes them for GitOps;
``install_cluster`` applies them server-side and waits: the operator ready and GPUs allocatable,
then verified weights on every target node, then vLLM rolled out. On an upgrade the new weights
land beside the old ones, vLLM rolls, and only then does each node drop the old version.
"""

from __future__ import annotations

import datetime
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from sealift import media_types
from sealift.audit_log import AuditLog
from sealift.bundles import layout
from sealift.bundles.blob_source import BlobSource
from sealift.bundles.bundle_manifest import Artifact, BundleManifest
from sealift.bundles.helm_chart import chart_app_versions, chart_values
from sealift.descriptors import load_json
from sealift.durable_files import write_atomically
from sealift.errors import InputError, IntegrityError, RemoteError
from sealift.hashing import sha256_bytes
from sealift.installer import gpu_operator, stack_render
from sealift.installer.image_policy import check_images
from sealift.installer.kube_cluster import Applied, KubeCluster
from sealift.installer.manifest_validation import validate_objects
from sealift.installer.mirror import MirrorTarget
from sealift.installer.object_store import StoreTarget
from sealift.installer.rollout_wait import (
    WaitResult,
    daemonset_check,
    deployment_check,
    mig_check,
    operator_check,
    rolled_out,
    wait_until,
)
from sealift.installer.site_file import GPU_PRODUCT_LABEL, MIG_CONFIG_LABEL, Site
from sealift.prefetch.node_label import label_value, weights_label
from sealift.progress import Progress
from sealift.registry_client import RegistryClient

RENDER_FILES = ("10-gpu-operator.yaml", "20-prefetch.yaml", "30-serving.yaml")


@dataclass(frozen=True)
class ClusterPlan:
    """The objects of one install, in the order they are applied."""

    inputs: stack_render.StackInputs
    operator: tuple[dict[str, Any], ...]
    prefetch: tuple[dict[str, Any], ...]
    serving: tuple[dict[str, Any], ...]
    chart_images: tuple[gpu_operator.MirroredImage, ...]
    cluster_policy: str = ""
    checked_images: int = 0

    def groups(self) -> tuple[tuple[dict[str, Any], ...], ...]:
        return (self.operator, self.prefetch, self.serving)

    def with_keep(self, keep: Mapping[str, int]) -> ClusterPlan:
        """The same plan with the agents keeping ``keep`` versions; only their objects change."""
        prefetch, serving = stack_render.stack_objects(self.inputs, keep=keep)
        # Only the agents' arguments differ from the checked plan: check those objects again.
        agents = [o for o in prefetch if o["kind"] == "DaemonSet"]
        validate_objects(agents)
        check_images(agents, self.inputs.mirror, pinned=True)
        return replace(self, prefetch=tuple(prefetch), serving=tuple(serving))


def _chart_archive(source: BlobSource, manifest: BundleManifest, name: str, work: Path) -> Path:
    chart = next((a for a in manifest.artifacts if a.kind == "chart" and a.name == name), None)
    if chart is None:
        charts = ", ".join(a.name for a in manifest.artifacts if a.kind == "chart") or "none"
        raise InputError(
            f"the bundle has no chart {name!r} for the GPU Operator",
            hint=f"set gpuOperator.chart in the site file; the bundle's charts: {charts}",
        )

    def verified(digest: str) -> bytes:
        content = source.read_small(layout.blob_name(digest), limit=64 * 1024 * 1024)
        if sha256_bytes(content) != digest:
            raise IntegrityError(
                f"chart {name}: blob {digest} does not match its digest",
                hint="the bundle is damaged; run bundle verify",
            )
        return content

    document = load_json(verified(chart.digest), where=f"chart {name}")
    layer = next(
        (
            entry
            for entry in document.get("layers", [])
            if entry.get("mediaType") == media_types.HELM_CHART
        ),
        None,
    )
    if layer is None:
        raise IntegrityError(
            f"chart {name}: its manifest has no chart layer", hint="run bundle verify"
        )
    path = work / f"{name}-{chart.version or 'chart'}.tgz"
    path.write_bytes(verified(layer["digest"]))
    return path


def plan_cluster(
    source: BlobSource,
    manifest: BundleManifest,
    *,
    site: Site,
    mirror: MirrorTarget,
    store: StoreTarget,
    trust_files: Mapping[str, bytes],
    helm: Path,
    kube_version: str | None = None,
    keep: Mapping[str, int] | None = None,
) -> ClusterPlan:
    """Every object of the install, validated and image-checked; nothing is applied here."""
    images = tuple(a for a in manifest.artifacts if a.kind == "image")
    inputs = stack_render.StackInputs(
        site=site,
        release=manifest.name,
        version=manifest.version,
        bundle_digest=manifest.digest,
        mirror=mirror,
        store=store,
        images=images,
        models=tuple(a for a in manifest.artifacts if a.kind == "model"),
        trust_files=trust_files,
    )
    with tempfile.TemporaryDirectory(prefix="sealift-chart-") as work:
        archive = _chart_archive(source, manifest, site.operator_chart, Path(work))
        content = archive.read_bytes()
        overrides, matched = gpu_operator.operator_values(
            chart_values(content, archive),
            chart_app_versions(content, archive),
            site,
            images,
            mirror,
            chart=site.operator_chart,
        )
        operator = gpu_operator.helm_template(
            helm,
            archive,
            release="gpu-operator",
            namespace=site.operator_namespace,
            values=overrides,
            kube_version=kube_version,
        )
    cluster_kinds = {
        o["spec"]["names"]["kind"]
        for o in operator
        if o.get("kind") == "CustomResourceDefinition" and o["spec"].get("scope") == "Cluster"
    }
    operator = [_with_namespace(obj, site.operator_namespace, cluster_kinds) for obj in operator]
    gpu_operator.pin_workload_images(operator, matched)
    # The operator's DaemonSets load drivers and device plugins: privileged by nature.
    namespace = stack_render.privileged_namespace(site.operator_namespace, warn_baseline=False)
    operator = [namespace, *operator]
    prefetch, serving = stack_render.stack_objects(inputs, keep=keep)
    validate_objects([*operator, *prefetch, *serving])
    checked = check_images(operator, mirror, pinned=False)
    checked += check_images([*prefetch, *serving], mirror, pinned=True)
    policy = next((o["metadata"]["name"] for o in operator if o.get("kind") == "ClusterPolicy"), "")
    return ClusterPlan(
        inputs, tuple(operator), tuple(prefetch), tuple(serving), tuple(matched), policy, checked
    )


# Built-in kinds a chart may carry that have no namespace; a chart's own kinds say their scope
# in their CRD (spec.scope), which _with_namespace reads from the same render.
_CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "RuntimeClass",
    "PriorityClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "StorageClass",
    "PersistentVolume",
}


def _with_namespace(obj: dict[str, Any], namespace: str, cluster_kinds: set[str]) -> dict[str, Any]:
    # helm template leaves metadata.namespace out of charts that rely on --namespace at apply.
    if obj.get("kind") in _CLUSTER_SCOPED or obj.get("kind") in cluster_kinds:
        return obj
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", namespace)
    return obj


def render_plan(plan: ClusterPlan, out_dir: Path) -> list[Path]:
    """Write the three groups as YAML files plus a kustomization.yaml; each file atomically."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"-o {out_dir} is not a folder", hint="name a folder for the manifests")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    header = (
        f"# Rendered by sealift for site {plan.inputs.site.name}, release {plan.inputs.release}"
        f" {plan.inputs.version} (bundle {plan.inputs.bundle_digest}).\n"
        "# Apply in file order; every image comes from the mirror. Do not edit: re-render.\n"
        "# Prefetch agents keep keepVersions + 1 versions per node here, as install does while a\n"
        "# rollout runs (install then lowers it); GitOps keeps the previous version on disk.\n"
    )
    for name, group in zip(RENDER_FILES, plan.groups(), strict=True):
        text = header + yaml.safe_dump_all(list(group), sort_keys=False, explicit_start=True)
        path = out_dir / name
        write_atomically(path, text.encode())
        written.append(path)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(RENDER_FILES),
    }
    path = out_dir / "kustomization.yaml"
    write_atomically(path, yaml.safe_dump(kustomization, sort_keys=False).encode())
    written.append(path)
    return written


@dataclass(frozen=True)
class ClusterResult:
    """What the cluster side of install did."""

    applied: tuple[Applied, ...]
    waits: tuple[WaitResult, ...]
    upgraded: tuple[str, ...] = field(default_factory=tuple)
    pruned: tuple[str, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> int:
        return sum(1 for item in self.applied if item.changed)


def models_to_protect(cluster: KubeCluster, plan: ClusterPlan) -> set[str]:
    """Models whose running Deployment still needs its current weights during this install.

    That is a Deployment that serves other weights than planned, or that is not fully rolled
    out: its pods may read the old version until the rollout is over. A fresh model has nothing
    to protect, and a model already serving these weights neither.
    """
    from lightkube.resources.apps_v1 import Deployment

    protect: set[str] = set()
    site = plan.inputs.site
    for serving in site.models:
        model = stack_render.model_artifact(plan.inputs, serving.name, where=site.source)
        deployment = cluster.get(Deployment, serving.deployment, site.namespace)
        if deployment is None:
            continue
        annotations = deployment.spec.template.metadata.annotations or {}
        serves_planned = annotations.get("sealift.dev/weights-digest") == model.digest
        if not serves_planned or not rolled_out(deployment):
            protect.add(serving.name)
    return protect


def install_cluster(
    planned: ClusterPlan,
    cluster: KubeCluster,
    *,
    progress: Progress,
    timeouts: Mapping[str, int],
) -> ClusterResult:
    """Apply and wait, phase by phase: operator, agents, vLLM, then the agents' final keep."""
    from lightkube.generic_resource import get_generic_resource

    started = datetime.datetime.now(datetime.UTC)
    site = planned.inputs.site
    protect = models_to_protect(cluster, planned)
    during = {
        m.name: site.weights.keep_versions + (1 if m.name in protect else 0) for m in site.models
    }
    plan = planned.with_keep(during)
    applied: list[Applied] = []
    waits: list[WaitResult] = []

    progress.note(f"applying {len(plan.operator)} GPU Operator objects")
    applied += cluster.apply_all(list(plan.operator))
    policy = None
    if plan.cluster_policy:
        crd = get_generic_resource("nvidia.com/v1", "ClusterPolicy")
        policy = (crd, plan.cluster_policy) if crd is not None else None
    products = sorted({site.pool(m.pool).gpu_product for m in site.models})
    waits.append(
        wait_until(
            "GPU Operator",
            operator_check(
                cluster,
                site.operator_namespace,
                policy,
                products,
                since=started,
            ),
            timeout=timeouts["operator"],
            progress=progress,
            hint=f"kubectl -n {site.operator_namespace} get pods; the operator's logs say why",
        )
    )
    applied += _label_mig_layouts(cluster, site, progress)
    if any(pool.mig_config for pool in site.pools):
        waits.append(
            wait_until(
                "MIG layouts",
                mig_check(cluster, [p for p in site.pools if p.mig_config]),
                timeout=timeouts["operator"],
                progress=progress,
                hint="kubectl logs -n " + site.operator_namespace + " -l app=nvidia-mig-manager",
            )
        )
    applied += _apply_and_wait_prefetch(cluster, plan, during, progress, timeouts, waits)
    progress.note(f"applying {len(plan.serving)} serving objects")
    guard = [o for o in plan.serving if o["kind"].startswith("ValidatingAdmissionPolicy")]
    applied += cluster.apply_all(guard)
    _prove_serving_guard(cluster, site)
    applied += cluster.apply_all([o for o in plan.serving if o not in guard])
    for serving in site.models:
        pool = site.pool(serving.pool)
        waits.append(
            wait_until(
                f"vLLM Deployment {site.namespace}/{serving.deployment}",
                deployment_check(
                    cluster,
                    site.namespace,
                    serving.deployment,
                    surge_gpus=serving.tensor_parallel_size,
                    product=pool.gpu_product,
                    since=started,
                ),
                timeout=timeouts["rollout"],
                progress=progress,
                hint=f"kubectl -n {site.namespace} describe deployment {serving.deployment}",
            )
        )
    upgraded = tuple(m.name for m in site.models if m.name in protect)
    final_keep = {m.name: site.weights.keep_versions for m in site.models}
    if final_keep != during:
        # The rollout is complete: the old weights can go now, node by node.
        final = plan.with_keep(final_keep)
        applied += _apply_and_wait_prefetch(cluster, final, final_keep, progress, timeouts, waits)
    pruned = prune_removed(cluster, plan, progress)
    return ClusterResult(tuple(applied), tuple(waits), upgraded, tuple(pruned))


# What a model leaves behind in the cluster, in the order it is removed (serving first, so no
# pod still needs the weights when the agent that keeps them goes).
_PRUNED_KINDS = ("Deployment", "Service", "PodDisruptionBudget", "DaemonSet")


def prune_removed(cluster: KubeCluster, plan: ClusterPlan, progress: Progress) -> list[str]:
    """Delete the serving and prefetch objects of models the site file no longer names.

    Only objects sealift made for this site are candidates (its managed-by and site labels),
    and only once everything the site file does name is rolled out. The weights stay on the
    nodes' disks: the agents that would remove them are what is being removed.
    """
    from lightkube.resources.apps_v1 import DaemonSet, Deployment
    from lightkube.resources.core_v1 import Service
    from lightkube.resources.policy_v1 import PodDisruptionBudget

    site = plan.inputs.site
    kinds = {
        "Deployment": Deployment,
        "Service": Service,
        "PodDisruptionBudget": PodDisruptionBudget,
        "DaemonSet": DaemonSet,
    }
    wanted = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for o in (*plan.prefetch, *plan.serving)
    }
    selector = {
        "app.kubernetes.io/managed-by": stack_render.MANAGED_BY,
        "sealift.dev/site": site.name,
        stack_render.SITE_NAMESPACE_LABEL: site.namespace,
    }
    pruned = []
    for kind in _PRUNED_KINDS:
        for namespace in (site.namespace, site.prefetch_namespace):
            for found in cluster.list(kinds[kind], namespace=namespace, labels=selector):
                key = (kind, namespace, found.metadata.name)
                if key in wanted:
                    continue
                cluster.delete(kinds[kind], found.metadata.name, namespace)
                pruned.append(f"{kind} {namespace}/{found.metadata.name}")
                progress.note(
                    f"removed {kind} {namespace}/{found.metadata.name}: no longer in {site.source}"
                )
    return pruned


def _label_mig_layouts(cluster: KubeCluster, site: Site, progress: Progress) -> list[Applied]:
    """Ask the operator's MIG manager for each pool's layout: the nvidia.com/mig.config label."""
    from lightkube.resources.core_v1 import Node

    applied = []
    for pool in site.pools:
        if not pool.mig_config:
            continue
        for node in cluster.list(Node, labels={GPU_PRODUCT_LABEL: pool.gpu_product}):
            labels = {MIG_CONFIG_LABEL: pool.mig_config}
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node.metadata.name, "labels": labels},
            }
            applied.append(cluster.apply(body))
        progress.note(f"pool {pool.name}: MIG layout {pool.mig_config} requested")
    return applied


def _apply_and_wait_prefetch(
    cluster: KubeCluster,
    plan: ClusterPlan,
    keep: Mapping[str, int],
    progress: Progress,
    timeouts: Mapping[str, int],
    waits: list[WaitResult],
) -> list[Applied]:
    """The agents' objects in the order that never leaves their node rights unrestricted.

    Namespaces, service account, trust policy and the admission policy first; then the RBAC
    that grants node patches; then a dry-run proves the policy is enforced; only then the
    DaemonSets that use the rights.
    """
    site = plan.inputs.site
    progress.note(f"applying {len(plan.prefetch)} prefetch objects")
    rights = [o for o in plan.prefetch if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    agents = [o for o in plan.prefetch if o["kind"] == "DaemonSet"]
    first = [o for o in plan.prefetch if o not in rights and o not in agents]
    applied = cluster.apply_all(first)
    applied += cluster.apply_all(rights)
    _prove_agent_policy(cluster, plan, progress)
    applied += cluster.apply_all(agents)
    for serving in site.models:
        model = stack_render.model_artifact(plan.inputs, serving.name, where=site.source)
        name = stack_render.prefetch_name(serving)
        pool = site.pool(serving.pool)
        waits.append(
            wait_until(
                f"verified weights of {model.name} {model.version} on every {pool.name} node",
                daemonset_check(
                    cluster,
                    site.prefetch_namespace,
                    name,
                    label=weights_label(model.digest),
                    selector=stack_render.pool_selector(pool),
                    sole_value=label_value(model.name) if keep[serving.name] == 1 else "",
                ),
                timeout=timeouts["prefetch"],
                progress=progress,
                hint=f"kubectl -n {site.prefetch_namespace} logs daemonset/{name}",
            )
        )
    return applied


def _refusal(
    attempt: Callable[[], str],
    proves: Callable[[str], bool],
    stop: Callable[[str], bool] = lambda _: False,
) -> tuple[bool, str]:
    """Repeat a dry run until the API server refuses it in the way that ``proves`` the policy.

    The API server loads a new admission policy asynchronously, so this polls for up to 30 s.
    Returns whether it was proven, and the last refusal ("" when the request was allowed).
    ``stop`` ends the polling early on a refusal no amount of waiting changes.
    """
    deadline = time.monotonic() + 30
    reason = ""
    while time.monotonic() < deadline:
        reason = attempt()
        if proves(reason):
            return True, reason
        if stop(reason):
            break
        time.sleep(0.5)
    return False, reason


def _prove_serving_guard(cluster: KubeCluster, site: Site) -> None:
    """A dry-run pod with the host's root mounted, in the serving namespace: refused?"""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sealift-guard-probe", "namespace": site.namespace},
        "spec": {
            "containers": [
                {
                    "name": "probe",
                    "image": "probe",
                    "volumeMounts": [{"name": "root", "mountPath": "/host"}],
                }
            ],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        },
    }
    # The denial must be ours, for the hostPath: another policy refusing first proves nothing.
    wanted = f"ValidatingAdmissionPolicy '{stack_render.serving_policy_name(site)}'"
    proven, reason = _refusal(
        lambda: cluster.dry_run_pod_denial(probe), lambda r: wanted in r and "hostPath" in r
    )
    if proven:
        return
    raise RemoteError(
        "the API server does not enforce the serving namespace's pod policy"
        f" ({reason or 'a dry-run pod mounting / was allowed'}); no serving pods were created",
        hint="sealift needs ValidatingAdmissionPolicy (Kubernetes 1.30+, admission plugin on)",
    )


def _prove_agent_policy(cluster: KubeCluster, plan: ClusterPlan, progress: Progress) -> None:
    """A dry-run label patch as the agent, on its own node, of a label it may not set: refused?

    If the policy never bites, the node rights are withdrawn and install stops.
    """
    from lightkube.resources.core_v1 import Node
    from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

    site = plan.inputs.site
    nodes = list(cluster.list(Node))
    if not nodes:
        progress.note("no nodes yet: the agents' admission policy is checked on the next run")
        return
    node = nodes[0].metadata.name
    namespace = site.prefetch_namespace
    user = f"system:serviceaccount:{namespace}:{stack_render.PREFETCH_SERVICE_ACCOUNT}"
    groups = [
        "system:serviceaccounts",
        f"system:serviceaccounts:{namespace}",
        "system:authenticated",
    ]
    extra = {"authentication.kubernetes.io/node-name": node}
    wanted = f"ValidatingAdmissionPolicy '{stack_render.agent_policy_name(site)}'"
    binding = next(o for o in plan.prefetch if o["kind"] == "ClusterRoleBinding")
    proven, reason = _refusal(
        lambda: cluster.denial_as(user, groups, extra, node, {"sealift.dev/probe": "x"}),
        lambda r: wanted in r,
        stop=lambda r: "cannot impersonate" in r,
    )
    if proven:
        return
    cluster.delete(ClusterRoleBinding, binding["metadata"]["name"])
    if "cannot impersonate" in reason:
        raise RemoteError(
            f"install cannot check the prefetch agents' admission policy: {reason}",
            hint="install needs cluster-admin (impersonation included); the agents' node"
            " rights were withdrawn",
        )
    raise RemoteError(
        "the API server does not enforce the prefetch agents' admission policy"
        f" ({reason or 'a dry-run patch as the agent was allowed'}); their node rights were"
        " withdrawn",
        hint="sealift needs ValidatingAdmissionPolicy (Kubernetes 1.30+, admission plugin on)",
    )


def chart_image_artifacts(plan: ClusterPlan) -> list[tuple[str, str, Artifact]]:
    """(mirror repository, tag, bundle artifact) for each chart image, for the tag check."""
    return [(m.mirror_repository, m.tag, m.artifact) for m in plan.chart_images]


MINIMUM_KUBERNETES = (1, 32)


def check_server_version(version: str) -> None:
    """Refuse clusters without what the objects rely on (see MINIMUM_KUBERNETES's uses)."""
    try:
        found = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return  # a distribution's own version string: let the API server judge the objects
    if found < MINIMUM_KUBERNETES:
        raise RemoteError(
            f"the cluster runs Kubernetes {version}; sealift needs"
            f" {'.'.join(map(str, MINIMUM_KUBERNETES))} or newer",
            hint="node-bound service-account tokens, ValidatingAdmissionPolicy and the preStop"
            " sleep action narrow and drain what sealift deploys; upgrade the cluster",
        )


@dataclass(frozen=True)
class ClusterOptions:
    """The cluster side: which cluster, which site file, the trust policy file, Helm, timeouts."""

    site: Site
    policy_file: Path
    kubeconfig: Path | None = None
    context: str | None = None
    helm: Path | None = None
    timeouts: Mapping[str, int] = field(default_factory=dict)

    def timeout(self, kind: str) -> int:
        """A flag's value first, then the site file's (which holds the defaults)."""
        return int(self.timeouts.get(kind) or getattr(self.site.timeouts, kind))


@dataclass
class PreparedCluster:
    """A connected cluster and a plan that has already passed every offline check."""

    options: ClusterOptions
    cluster: KubeCluster
    plan: ClusterPlan


def prepare_cluster_side(
    source: BlobSource,
    manifest: BundleManifest,
    options: ClusterOptions,
    *,
    mirror: MirrorTarget,
    store: StoreTarget,
) -> PreparedCluster:
    """Before any byte moves: reach the cluster, find Helm, plan and check every object."""
    from sealift.signing.trust_policy import portable_policy

    trust_files = portable_policy(options.policy_file)
    helm = gpu_operator.find_helm(options.helm)
    cluster = KubeCluster(options.kubeconfig, options.context)
    version = cluster.server_version()
    check_server_version(version)

    # The chart is rendered and checked once; later phases change only the agents' keep.
    plan = plan_cluster(
        source,
        manifest,
        site=options.site,
        mirror=mirror,
        store=store,
        trust_files=trust_files,
        helm=helm,
        kube_version=version or None,
    )
    return PreparedCluster(options, cluster, plan)


def check_mirror_tags(prepared: PreparedCluster, registry: RegistryClient) -> None:
    """Each chart image's mirror tag must still name the digest the bundle verified."""
    for repository, tag, artifact in chart_image_artifacts(prepared.plan):
        _, _, path = repository.partition("/")
        found = registry.manifest_digest(path, tag)
        if found != artifact.digest:
            raise IntegrityError(
                f"mirror tag {repository}:{tag} names {found or 'nothing'}, not the bundle's"
                f" {artifact.digest}",
                hint="someone moved the tag after install pushed it; re-run install with"
                " --tag-policy overwrite, and find out who",
            )


def run_cluster_side(
    prepared: PreparedCluster,
    *,
    registry: RegistryClient | None,
    progress: Progress,
    audit: AuditLog,
) -> ClusterResult:
    """Tag check, then apply and wait, phase by phase; each step goes to the audit log."""
    if registry is not None:
        check_mirror_tags(prepared, registry)
    options = prepared.options
    timeouts = {kind: options.timeout(kind) for kind in ("operator", "prefetch", "rollout")}
    audit.record(
        "cluster-start", site=options.site.name, checkedImages=prepared.plan.checked_images
    )
    result = install_cluster(prepared.plan, prepared.cluster, progress=progress, timeouts=timeouts)
    for item in result.applied:
        if item.changed:
            audit.record("object-applied", kind=item.kind, namespace=item.namespace, name=item.name)
    for removed in result.pruned:
        audit.record("object-removed", object=removed)
    audit.record("cluster-done", changed=result.changed, upgraded=list(result.upgraded))
    return result


def render_bundle(
    bundle: Path,
    *,
    site: Site,
    mirror: MirrorTarget,
    store: StoreTarget,
    policy_file: Path,
    helm: Path | None,
    kube_version: str | None,
    out_dir: Path,
    progress: Progress,
    allow_rollback: bool = False,
) -> tuple[ClusterPlan, list[Path]]:
    """``sealift render``: verify the bundle's signatures and graph, then write the objects."""
    from sealift.bundles.blob_source import open_bundle
    from sealift.bundles.verify import verify_bundle
    from sealift.signing.trust_policy import load_trust_policy, portable_policy

    policy = load_trust_policy(policy_file)
    with open_bundle(bundle) as source:
        report = verify_bundle(
            source,
            jobs=1,
            progress=progress,
            policy=policy,
            allow_rollback=allow_rollback,
            hash_blobs=False,
        )
        if not report.ok or report.manifest is None:
            first = report.problems[0].one_line() if report.problems else "no manifest"
            raise IntegrityError(
                f"{bundle}: {first}", hint="run sealift bundle verify; nothing was rendered"
            )
        plan = plan_cluster(
            source,
            report.manifest,
            site=site,
            mirror=mirror,
            store=store,
            trust_files=portable_policy(policy_file),
            helm=gpu_operator.find_helm(helm),
            kube_version=kube_version,
        )
    return plan, render_plan(plan, out_dir)

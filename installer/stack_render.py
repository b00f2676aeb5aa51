"""The serving stack as Kubernetes objects, made by pure functions of site, release and mirror.

Nothing here talks to a cluster. ``render`` writes these objects for GitOps and ``install`` applies
the same objects, so what a reviewer reads is what runs. Every image is named by the mirror and
pinned by digest; no secret value is ever part of an object (Secrets are referenced by name).

The vLLM Deployment follows the seed documents' reference skeleton: weights outside the image on
a read-only hostPath filled by the prefetch DaemonSet, a startupProbe sized to the model's load
time, readiness and liveness on /health, a long drain, and RollingUpdate 1/0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sealift.bundles.bundle_manifest import Artifact
from sealift.bundles.layout import PREFETCH_IMAGE_REPOSITORY
from sealift.errors import InputError
from sealift.installer.mirror import MirrorTarget, mirror_reference
from sealift.installer.object_store import StoreTarget
from sealift.installer.site_file import (
    GPU_PRODUCT_LABEL,
    MIG_CONFIG_LABEL,
    ModelServing,
    NodePool,
    Site,
)
from sealift.prefetch.node_label import LABEL_PREFIX, label_value, weights_label

Object = dict[str, Any]

PREFETCH_SERVICE_ACCOUNT = "sealift-prefetch"
TRUST_CONFIG_MAP = "sealift-trust-policy"
TRUST_MOUNT = "/etc/sealift/trust"
AWS_CREDENTIALS_MOUNT = "/etc/sealift/aws"
MODELS_MOUNT = "/models"
PREFETCH_PORT = 9090
VLLM_PORT = 8000
S3_CA_MOUNT = "/etc/sealift/s3-ca"
GPU_RESOURCE = "nvidia.com/gpu"
TERMINATION_GRACE_SECONDS = 600
PRE_STOP_SECONDS = 15
# vLLM must finish draining before the kubelet's SIGKILL: the grace period less the preStop
# sleep less a margin for process exit.
VLLM_SHUTDOWN_TIMEOUT = TERMINATION_GRACE_SECONDS - PRE_STOP_SECONDS - 15
STARTUP_PERIOD_SECONDS = 10
MANAGED_BY = "sealift"
SITE_NAMESPACE_LABEL = "sealift.dev/site-namespace"


@dataclass(frozen=True)
class StackInputs:
    """Everything the cluster objects are made from."""

    site: Site
    release: str
    version: str
    bundle_digest: str
    mirror: MirrorTarget
    store: StoreTarget
    images: tuple[Artifact, ...]
    models: tuple[Artifact, ...]
    trust_files: Mapping[str, bytes] = field(default_factory=dict)


def _labels(inputs: StackInputs, component: str, instance: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": component,
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/part-of": inputs.release[:63],
        "app.kubernetes.io/version": label_safe(inputs.version),
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "sealift.dev/site": inputs.site.name,
        # Two site files may share a name; their serving namespaces cannot.
        SITE_NAMESPACE_LABEL: inputs.site.namespace,
    }


def _pull_secrets(site: Site) -> list[Object]:
    return [{"name": site.mirror_pull_secret}] if site.mirror_pull_secret else []


def pool_selector(pool: NodePool) -> dict[str, str]:
    """How a pool's pods find its nodes: by GPU product, or by MIG layout on a MIG pool.

    With MIG, GPU Feature Discovery rewrites the product label (``-MIG-<profile>``) once the
    layout is applied; the layout label sealift sets is stable.
    """
    if pool.mig_config:
        return {MIG_CONFIG_LABEL: pool.mig_config}
    return {GPU_PRODUCT_LABEL: pool.gpu_product}


def label_safe(text: str) -> str:
    """``text`` as a label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned) or "0"


def _tolerations(pool: NodePool) -> list[Object]:
    if pool.taint is None:
        return []
    toleration: Object = {"key": pool.taint.key, "effect": pool.taint.effect}
    if pool.taint.value:
        toleration.update(operator="Equal", value=pool.taint.value)
    else:
        toleration["operator"] = "Exists"
    return [toleration]


def find_image(inputs: StackInputs, wanted: str, *, what: str) -> Artifact:
    """The one bundle image whose repository is ``wanted`` (or ends with ``/wanted``)."""
    name, _, tag = wanted.partition(":")
    matches = [
        image
        for image in inputs.images
        if image.is_repository(name) and (not tag or image.tag == tag)
    ]
    if len(matches) != 1:
        names = ", ".join(sorted(image.ref for image in inputs.images)) or "none"
        raise InputError(
            f"{what}: {len(matches)} images of the bundle match {wanted!r}",
            hint=f"name one image exactly; the bundle has: {names}",
        )
    return matches[0]


def model_artifact(inputs: StackInputs, name: str, *, where: str) -> Artifact:
    """The bundle's model called ``name``."""
    for artifact in inputs.models:
        if artifact.name == name:
            return artifact
    names = ", ".join(sorted(a.name for a in inputs.models)) or "none"
    raise InputError(f"{where}: the bundle has no model {name!r}", hint=f"its models: {names}")


def namespace_objects(inputs: StackInputs) -> list[Object]:
    """The serving namespace and the agents' own one, which only administrators should use.

    Both need the privileged Pod Security level: hostPath volumes (the weights) are not allowed
    below it. The agents' identity may label nodes, so its namespace is kept apart from the one
    where serving teams create pods.
    """
    return [
        privileged_namespace(name, warn_baseline=True)
        for name in (inputs.site.namespace, inputs.site.prefetch_namespace)
    ]


def privileged_namespace(name: str, *, warn_baseline: bool) -> Object:
    """A namespace sealift manages at the privileged Pod Security level.

    ``warn_baseline`` makes kubectl warn about pods that would break the Baseline level.
    """
    labels = {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "pod-security.kubernetes.io/enforce": "privileged",
    }
    if warn_baseline:
        labels["pod-security.kubernetes.io/warn"] = "baseline"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def agent_policy_name(site: Site) -> str:
    """The admission policy that narrows the agents' node rights."""
    return f"sealift-prefetch-own-node-weights-labels-{site.prefetch_namespace}"


def serving_policy_name(site: Site) -> str:
    """The admission policy that guards pods in the serving namespace."""
    return f"sealift-serving-pods-{site.namespace}"


def prefetch_name(serving: ModelServing) -> str:
    """The prefetch DaemonSet of one model."""
    return f"sealift-prefetch-{serving.deployment}"[:63].rstrip("-")


def prefetch_policy_objects(inputs: StackInputs) -> list[Object]:
    """The admission policy that narrows the agents' node rights; applied before those rights."""
    return [o for o in prefetch_access_objects(inputs) if o["kind"].startswith("ValidatingAdm")]


def prefetch_access_objects(inputs: StackInputs) -> list[Object]:
    """The agent's identity, the right to patch nodes, and the policy narrowing it.

    RBAC cannot say "only your own node" or "only these labels", so a ValidatingAdmissionPolicy
    does: requests from the agent's service account may change only labels under
    ``weights.sealift.dev/`` and only on the node its token is bound to.
    """
    namespace = inputs.site.prefetch_namespace
    labels = _labels(inputs, "sealift-prefetch", "sealift-prefetch")
    user = f"system:serviceaccount:{namespace}:{PREFETCH_SERVICE_ACCOUNT}"
    role_name = f"sealift-prefetch-node-labels-{namespace}"
    policy_name = agent_policy_name(inputs.site)
    node_key = "authentication.kubernetes.io/node-name"
    only_weights_labels = (
        "(has(object.metadata.labels) ? object.metadata.labels : {}).all(k,"
        f" k.startsWith('{LABEL_PREFIX}') ||"
        " (has(oldObject.metadata.labels) && k in oldObject.metadata.labels &&"
        " oldObject.metadata.labels[k] == object.metadata.labels[k]))"
        " && (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}).all(k,"
        f" k.startsWith('{LABEL_PREFIX}') ||"
        " (has(object.metadata.labels) && k in object.metadata.labels))"
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": PREFETCH_SERVICE_ACCOUNT,
                "namespace": namespace,
                "labels": labels,
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role_name, "labels": labels},
            # patch only: server-side apply of labels needs nothing else.
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role_name, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role_name,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": PREFETCH_SERVICE_ACCOUNT, "namespace": namespace}
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy_name, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            # RBAC grants no create or delete; deny them here as well.
                            "operations": ["CREATE", "UPDATE", "DELETE"],
                            "resources": ["nodes", "nodes/status"],
                        }
                    ]
                },
                "matchConditions": [
                    {
                        "name": "prefetch-agent",
                        "expression": f"request.userInfo.username == '{user}'",
                    }
                ],
                "validations": [
                    {
                        "expression": "request.operation == 'UPDATE'",
                        "message": "the prefetch agent may not create or delete nodes",
                    },
                    {
                        "expression": "!has(request.subResource) || request.subResource == ''",
                        "message": "the prefetch agent may not change a node's status",
                    },
                    {
                        "expression": f"'{node_key}' in"
                        f" request.userInfo.extra && request.userInfo.extra['{node_key}'][0] =="
                        " object.metadata.name",
                        "message": "the prefetch agent may label only the node it runs on",
                    },
                    {
                        "expression": only_weights_labels,
                        "message": f"the prefetch agent may change only {LABEL_PREFIX}* labels",
                    },
                    {
                        "expression": "object.spec == oldObject.spec && (has(object.metadata"
                        ".annotations) ? object.metadata.annotations : {}) == (has(oldObject"
                        ".metadata.annotations) ? oldObject.metadata.annotations : {})",
                        "message": "the prefetch agent may not change a node's spec or annotations",
                    },
                    {
                        # An owner reference would let the garbage collector delete the node; a
                        # finalizer would block its removal.
                        "expression": "(has(object.metadata.ownerReferences) ? object.metadata"
                        ".ownerReferences : []) == (has(oldObject.metadata.ownerReferences) ?"
                        " oldObject.metadata.ownerReferences : []) && (has(object.metadata"
                        ".finalizers) ? object.metadata.finalizers : []) == (has(oldObject"
                        ".metadata.finalizers) ? oldObject.metadata.finalizers : [])",
                        "message": "the prefetch agent may not change owners or finalizers",
                    },
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy_name, "labels": labels},
            "spec": {"policyName": policy_name, "validationActions": ["Deny"]},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": TRUST_CONFIG_MAP, "namespace": namespace, "labels": labels},
            "data": {
                name: content.decode() for name, content in sorted(inputs.trust_files.items())
            },
        },
    ]


def prefetch_daemonset(inputs: StackInputs, serving: ModelServing, *, keep: int) -> Object:
    """The DaemonSet that lands one model's verified weights on every node of its pool."""
    site = inputs.site
    pool = site.pool(serving.pool)
    model = model_artifact(inputs, serving.name, where=f"{site.source}: models {serving.name}")
    image = find_image(inputs, PREFETCH_IMAGE_REPOSITORY, what="the prefetch image")
    name = prefetch_name(serving)
    labels = _labels(inputs, "sealift-prefetch", name)
    selector = {"app.kubernetes.io/name": "sealift-prefetch", "app.kubernetes.io/instance": name}
    source = f"s3://{inputs.store.bucket}/{inputs.store.key(model.name, model.version)}"
    env: list[Object] = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        # No instance metadata service inside an air gap: skip boto3's slow probe of it.
        {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"},
    ]
    if site.weights.endpoint:
        env.append({"name": "AWS_ENDPOINT_URL", "value": site.weights.endpoint})
    if site.weights.region:
        env.append({"name": "AWS_REGION", "value": site.weights.region})
    if site.weights.path_style:
        env.append({"name": "SEALIFT_S3_PATH_STYLE", "value": "1"})
    mounts: list[Object] = [
        {"name": "models", "mountPath": "/opt/models"},
        {"name": "trust-policy", "mountPath": TRUST_MOUNT, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[Object] = [
        {
            "name": "models",
            "hostPath": {"path": site.weights.host_path, "type": "DirectoryOrCreate"},
        },
        {"name": "trust-policy", "configMap": {"name": TRUST_CONFIG_MAP}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
    ]
    args_ca: list[str] = []
    if site.weights.ca_config_map:
        # The store's TLS is checked against the site's CA, never switched off.
        mounts.append({"name": "s3-ca", "mountPath": S3_CA_MOUNT, "readOnly": True})
        volumes.append({"name": "s3-ca", "configMap": {"name": site.weights.ca_config_map}})
        args_ca.append(f"--s3-ca-file={S3_CA_MOUNT}/ca.crt")
    if site.weights.credentials_secret:
        # The AWS credential chain reads a shared-credentials file: no key in env or args.
        env.append(
            {"name": "AWS_SHARED_CREDENTIALS_FILE", "value": f"{AWS_CREDENTIALS_MOUNT}/credentials"}
        )
        mounts.append({"name": "aws", "mountPath": AWS_CREDENTIALS_MOUNT, "readOnly": True})
        volumes.append(
            {
                "name": "aws",
                "secret": {
                    "secretName": site.weights.credentials_secret,
                    "items": [{"key": "credentials", "path": "credentials"}],
                },
            }
        )
    probe = {"httpGet": {"path": "/livez", "port": "metrics"}, "periodSeconds": 20}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": site.prefetch_namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": selector},
            # The store's bandwidth is shared: a quarter of the nodes fetch a new version at once.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
            "template": {
                "metadata": {
                    "labels": {**labels, **selector},
                    "annotations": {
                        "sealift.dev/model": model.name,
                        "sealift.dev/model-version": model.version,
                        "sealift.dev/weights-digest": model.digest,
                    },
                },
                "spec": {
                    "serviceAccountName": PREFETCH_SERVICE_ACCOUNT,
                    "imagePullSecrets": _pull_secrets(site),
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "nodeSelector": pool_selector(pool),
                    "tolerations": _tolerations(pool),
                    "containers": [
                        {
                            "name": "prefetch",
                            "image": mirror_reference(inputs.mirror, image),
                            "args": [
                                "prefetch",
                                f"--source={source}",
                                "--dest=/opt/models",
                                f"--policy={TRUST_MOUNT}/policy.yaml",
                                f"--keep={keep}",
                                f"--serve=:{PREFETCH_PORT}",
                                "--label-node",
                                *args_ca,
                            ],
                            "env": env,
                            "ports": [{"name": "metrics", "containerPort": PREFETCH_PORT}],
                            "readinessProbe": {
                                "httpGet": {"path": "/readyz", "port": "metrics"},
                                "periodSeconds": 10,
                            },
                            "livenessProbe": probe,
                            "resources": {
                                "requests": {"cpu": "500m", "memory": "256Mi"},
                                "limits": {"memory": "512Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                                "runAsUser": 0,
                            },
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "volumeMounts": mounts,
                        }
                    ],
                    "volumes": volumes,
                },
            },
        },
    }


# What the Baseline Pod Security level lets a container add to the default capabilities.
_BASELINE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
_SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
)
_SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def serving_guard_objects(inputs: StackInputs) -> list[Object]:
    """What the privileged Pod Security level of the serving namespace would otherwise allow.

    hostPath needs that level, and the level then allows everything. This policy gives back the
    Baseline level's checks (capabilities, seccomp, AppArmor, SELinux, /proc, host ports,
    sysctls, privileged, host namespaces) and allows hostPath only as an existing folder under
    the weights path, mounted read-only. Ephemeral (debug) containers are held to the same.
    """
    site = inputs.site
    name = serving_policy_name(site)
    labels = _labels(inputs, "sealift-serving-guard", name)
    root = site.weights.host_path.rstrip("/") + "/"
    spec = "object.spec"
    containers = (
        f"((has({spec}.initContainers) ? {spec}.initContainers : [])"
        f" + {spec}.containers"
        f" + (has({spec}.ephemeralContainers) ? {spec}.ephemeralContainers : []))"
    )
    volumes = f"(has({spec}.volumes) ? {spec}.volumes : [])"
    pod_security = f"(has({spec}.securityContext) ? {spec}.securityContext : {{}})"

    def rule(expression: str, message: str) -> Object:
        return {"expression": expression, "message": f"in this namespace, {message}"}

    not_unconfined = (
        "(!has({0}.seccompProfile) || {0}.seccompProfile.type != 'Unconfined')"
        " && (!has({0}.appArmorProfile) || {0}.appArmorProfile.type != 'Unconfined')"
        " && (!has({0}.seLinuxOptions) || ((!has({0}.seLinuxOptions.type) ||"
        f" {_cel_list(_SELINUX_TYPES)}.exists(t, t == {{0}}.seLinuxOptions.type))"
        " && !has({0}.seLinuxOptions.user) && !has({0}.seLinuxOptions.role)))"
        " && (!has({0}.windowsOptions) || !has({0}.windowsOptions.hostProcess)"
        " || !{0}.windowsOptions.hostProcess)"
    )
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": site.namespace}
                    },
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["pods", "pods/ephemeralcontainers"],
                        }
                    ],
                },
                "validations": [
                    rule(
                        f"{volumes}.all(v, !has(v.hostPath) || (v.hostPath.path.startsWith("
                        f"'{root}') && has(v.hostPath.type) && v.hostPath.type == 'Directory'))",
                        f"hostPath volumes must be existing folders (type Directory) under {root}",
                    ),
                    rule(
                        f"{containers}.all(c, !has(c.volumeMounts) || c.volumeMounts.all(m,"
                        f" !{volumes}.exists(v, v.name == m.name && has(v.hostPath)) ||"
                        " (has(m.readOnly) && m.readOnly)))",
                        "hostPath volumes are mounted read-only",
                    ),
                    rule(
                        f"{containers}.all(c, !has(c.securityContext) ||"
                        " !has(c.securityContext.privileged) || !c.securityContext.privileged)",
                        "containers may not be privileged",
                    ),
                    rule(
                        f"{containers}.all(c, !has(c.securityContext) ||"
                        " !has(c.securityContext.capabilities) ||"
                        " !has(c.securityContext.capabilities.add) ||"
                        " c.securityContext.capabilities.add.all(k,"
                        f" {_cel_list(_BASELINE_CAPABILITIES)}.exists(b, b == k)))",
                        "containers may add only the Baseline capabilities",
                    ),
                    rule(
                        not_unconfined.format(pod_security)
                        + f" && {containers}.all(c, !has(c.securityContext) || ("
                        + not_unconfined.format("c.securityContext")
                        + "))",
                        "seccomp and AppArmor may not be Unconfined, nor SELinux widened",
                    ),
                    rule(
                        f"{containers}.all(c, (!has(c.securityContext) ||"
                        " !has(c.securityContext.procMount) ||"
                        " c.securityContext.procMount == 'Default') && (!has(c.ports) ||"
                        " c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)))",
                        "containers may not unmask /proc or bind host ports",
                    ),
                    rule(
                        f"!has({pod_security}.sysctls) || {pod_security}.sysctls.all(x,"
                        f" {_cel_list(_SAFE_SYSCTLS)}.exists(s, s == x.name))",
                        "only the Baseline level's safe sysctls may be set",
                    ),
                    rule(
                        f"!(has({spec}.hostNetwork) && {spec}.hostNetwork)"
                        f" && !(has({spec}.hostPID) && {spec}.hostPID)"
                        f" && !(has({spec}.hostIPC) && {spec}.hostIPC)",
                        "pods may not use the host's network, PID or IPC namespaces",
                    ),
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]


def vllm_args(serving: ModelServing, model: Artifact) -> list[str]:
    """``vllm serve`` arguments from the site file; the model path pins the verified version."""
    args = [
        # The hostPath mounted here is exactly the verified folder of this version.
        f"{MODELS_MOUNT}/{model.name}",
        f"--served-model-name={serving.served_model_name or model.name}",
        f"--tensor-parallel-size={serving.tensor_parallel_size}",
        f"--port={VLLM_PORT}",
    ]
    if serving.shutdown_timeout_flag:
        args.append(f"--shutdown-timeout={VLLM_SHUTDOWN_TIMEOUT}")
    if serving.max_model_len is not None:
        args.append(f"--max-model-len={serving.max_model_len}")
    if serving.max_num_seqs is not None:
        args.append(f"--max-num-seqs={serving.max_num_seqs}")
    if serving.gpu_memory_utilization is not None:
        args.append(f"--gpu-memory-utilization={serving.gpu_memory_utilization}")
    if serving.kv_cache_dtype:
        args.append(f"--kv-cache-dtype={serving.kv_cache_dtype}")
    fixed = {arg.partition("=")[0] for arg in args[1:]}
    for extra in serving.extra_args:
        if extra.partition("=")[0] in fixed or extra.startswith("--api-key"):
            raise InputError(
                f"models {serving.name}: extraArgs {extra!r} repeats a flag sealift sets",
                hint="use the site file's own key for it; the API key comes from apiKeySecret",
            )
        args.append(extra)
    return args


def serving_objects(
    inputs: StackInputs, serving: ModelServing, vllm_image: Artifact
) -> list[Object]:
    """The vLLM Deployment, its Service and its PodDisruptionBudget."""
    site = inputs.site
    pool = site.pool(serving.pool)
    model = model_artifact(inputs, serving.name, where=f"{site.source}: models {serving.name}")
    name = serving.deployment
    labels = _labels(inputs, "vllm", name)
    selector = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name}
    gpus = str(serving.tensor_parallel_size)
    requests: dict[str, str] = {GPU_RESOURCE: gpus}
    limits: dict[str, str] = {GPU_RESOURCE: gpus}
    if serving.memory:
        requests["memory"] = limits["memory"] = serving.memory
    env: list[Object] = [
        # Air gap: never try to reach a model hub or send usage statistics.
        {"name": "HF_HUB_OFFLINE", "value": "1"},
        {"name": "TRANSFORMERS_OFFLINE", "value": "1"},
        {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
        {"name": "DO_NOT_TRACK", "value": "1"},
    ]
    if serving.api_key is not None:
        env.append(
            {
                "name": "VLLM_API_KEY",
                "valueFrom": {
                    "secretKeyRef": {"name": serving.api_key.name, "key": serving.api_key.key}
                },
            }
        )
    health = {"path": "/health", "port": "http"}
    # expectedLoadTime is a p95: half as much again and a minute more, so the slow tail of
    # starts (cold page cache, a busy disk) is not killed and restarted into the same tail.
    startup_seconds = serving.expected_load_seconds * 3 // 2 + 60
    startup_failures = math.ceil(startup_seconds / STARTUP_PERIOD_SECONDS)
    deployment: Object = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": site.namespace, "labels": labels},
        "spec": {
            "replicas": serving.replicas,
            "selector": {"matchLabels": selector},
            "strategy": {
                "type": "RollingUpdate",
                # One extra replica at a time (needs one replica's GPUs spare), never below N.
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            # A rollout is stuck only when a new pod has had its whole load time and more.
            "progressDeadlineSeconds": max(600, 2 * serving.expected_load_seconds + 300),
            "template": {
                "metadata": {
                    "labels": {**labels, **selector},
                    "annotations": {
                        "sealift.dev/model": model.name,
                        "sealift.dev/model-version": model.version,
                        "sealift.dev/weights-digest": model.digest,
                    },
                },
                "spec": {
                    "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                    # vLLM reads prompts from anyone; it needs no Kubernetes API token.
                    "automountServiceAccountToken": False,
                    "imagePullSecrets": _pull_secrets(site),
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "nodeSelector": pool_selector(pool),
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": weights_label(model.digest),
                                                "operator": "In",
                                                "values": [label_value(model.name)],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "tolerations": _tolerations(pool),
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {"matchLabels": selector},
                        }
                    ],
                    "containers": [
                        {
                            "name": "vllm",
                            "image": mirror_reference(inputs.mirror, vllm_image),
                            "command": ["vllm", "serve"],
                            "args": vllm_args(serving, model),
                            "env": env,
                            "ports": [{"name": "http", "containerPort": VLLM_PORT}],
                            "resources": {"requests": requests, "limits": limits},
                            "startupProbe": {
                                "httpGet": health,
                                "periodSeconds": STARTUP_PERIOD_SECONDS,
                                "failureThreshold": startup_failures,
                            },
                            "readinessProbe": {
                                "httpGet": health,
                                "periodSeconds": 10,
                                "timeoutSeconds": 5,
                                "failureThreshold": 3,
                            },
                            "livenessProbe": {
                                "httpGet": health,
                                "periodSeconds": 30,
                                "timeoutSeconds": 5,
                                "failureThreshold": 4,
                            },
                            # Let endpoints and kube-proxy drop the pod before vLLM stops listening.
                            "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}},
                            "securityContext": {"allowPrivilegeEscalation": False},
                            "volumeMounts": [
                                {
                                    "name": "models",
                                    "mountPath": f"{MODELS_MOUNT}/{model.name}",
                                    "readOnly": True,
                                    # Nothing mounted beneath it on the host becomes writable.
                                    "recursiveReadOnly": "IfPossible",
                                },
                                {"name": "shm", "mountPath": "/dev/shm"},
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            # Only this version's verified folder: not the other models, not
                            # the agents' staging area.
                            "name": "models",
                            "hostPath": {
                                "path": f"{site.weights.host_path.rstrip('/')}/{model.name}/"
                                f"{model.digest.removeprefix('sha256:')}",
                                "type": "Directory",
                            },
                        },
                        {
                            "name": "shm",
                            "emptyDir": {"medium": "Memory", "sizeLimit": serving.shm_size},
                        },
                    ],
                },
            },
        },
    }
    service: Object = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": site.namespace, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http"}],
        },
    }
    budget: Object = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": site.namespace, "labels": labels},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
    }
    return [deployment, service, budget]


def vllm_image_for(inputs: StackInputs, serving: ModelServing) -> Artifact:
    """The serving image: the site's choice, else the bundle's one vLLM image."""
    return find_image(inputs, serving.image or "vllm-openai", what=f"models {serving.name} image")


def stack_objects(
    inputs: StackInputs, *, keep: Mapping[str, int] | None = None
) -> tuple[list[Object], list[Object]]:
    """(prefetch objects, serving objects) for every model of the site file.

    ``keep`` is the number of versions each model's agent keeps on a node; by default one more
    than the site's keepVersions, so a rollout never loses the weights the old pods still read.
    """
    prefetch: list[Object] = [*namespace_objects(inputs), *prefetch_access_objects(inputs)]
    serving: list[Object] = serving_guard_objects(inputs)
    default_keep = inputs.site.weights.keep_versions + 1
    for model in inputs.site.models:
        versions = (keep or {}).get(model.name, default_keep)
        prefetch.append(prefetch_daemonset(inputs, model, keep=versions))
        serving.extend(serving_objects(inputs, model, vllm_image_for(inputs, model)))
    return prefetch, serving

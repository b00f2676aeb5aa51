"""The test cluster itself: the Kubernetes behaviour the installer tests stand on.

Each test proves one property of ``kube_cluster`` (tools/k8s/README.md lists them): loopback-only
https with an admin kubeconfig, Node+RBAC authorization, enforced ValidatingAdmissionPolicy,
node-bound service-account tokens, kwok's Running/Ready pods and real scheduling of GPUs, CRDs
with a status subresource, and helm. Tests make their own namespace and uniquely named nodes,
so they share one cluster; cluster-wide objects they create are removed at the end.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from support.k8s_cluster import GPU_PRODUCT_LABEL, KubeCluster, unique_name, wait_until
from support.registry_server import loopback_session

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
IMAGE = "registry.invalid/sealift/test:1"  # never pulled: kwok runs no containers


@pytest.fixture
def cluster_scoped(kube_cluster: KubeCluster) -> Iterator[list[str]]:
    """Collect ``kind/name`` of cluster-scoped objects a test creates; deleted afterwards."""
    created: list[str] = []
    yield created
    for ref in reversed(created):
        kube_cluster.kubectl("delete", ref, "--ignore-not-found", "--wait=false", check=False)


def _pod(name: str, node: str, *, service_account: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": service_account,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": IMAGE}],
        },
    }


def _workload(
    kind: str,
    name: str,
    pool: str,
    *,
    gpus: int = 0,
    replicas: int = 1,
    tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": IMAGE}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {
                "nodeSelector": {"sealift.test/pool": pool},
                "tolerations": tolerations or [],
                "containers": [container],
            },
        },
    }
    if kind == "Deployment":
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def _apply_in(cluster: KubeCluster, namespace: str, *objs: dict[str, Any]) -> None:
    for obj in objs:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))


def _scheduled_node(cluster: KubeCluster, namespace: str, pod: str) -> str:
    def node() -> str | None:
        spec = cluster.kubectl_json("get", "pod", pod, "-n", namespace)["spec"]
        return spec.get("nodeName")

    return wait_until(node, what=f"pod {pod} bound to a node")


def _can_i(cluster: KubeCluster, *args: str, user: str, groups: tuple[str, ...] = ()) -> bool:
    result = cluster.kubectl(
        "auth",
        "can-i",
        *args,
        f"--as={user}",
        *(f"--as-group={g}" for g in groups),
        check=False,
    )
    return result.stdout.strip() == "yes"


# -- f. https on loopback only, admin kubeconfig ------------------------------------------


def test_apiserver_is_https_on_loopback_only(kube_cluster: KubeCluster) -> None:
    url = urlsplit(kube_cluster.server)
    assert url.scheme == "https"
    assert url.hostname == "127.0.0.1"

    # Verified TLS against the cluster's CA, straight from Python and without any proxy.
    with loopback_session() as session:
        response = session.get(
            f"{kube_cluster.server}/readyz", verify=str(kube_cluster.ca_path), timeout=10
        )
    assert response.status_code == 200, response.text
    assert response.text == "ok"

    # Every socket any component listens on is a loopback one (etcd, kwok and the
    # controllers' health ports included), and the apiserver's port is among them.
    sockets = kube_cluster.listening_sockets()
    assert set(sockets) == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok-controller",
    }
    assert (url.hostname, url.port) in sockets["kube-apiserver"]
    for component, addrs in sockets.items():
        assert addrs, component
        for ip, port in addrs:
            assert ipaddress.ip_address(ip).is_loopback, (component, ip, port)


def test_kubeconfig_is_admin_and_children_ignore_proxies(
    kube_cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "not-this-one"))

    review = kube_cluster.kubectl_json("auth", "whoami")
    assert review["apiVersion"] == "authentication.k8s.io/v1"
    user = review["status"]["userInfo"]
    assert user["username"] == "kwok-admin"
    assert "system:masters" in user["groups"]

    env = kube_cluster.env
    assert not {"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy"} & set(env)
    assert env["KUBECONFIG"] == str(kube_cluster.kubeconfig)
    assert "127.0.0.1" in env["NO_PROXY"]


# -- a. authorization: Node and RBAC -------------------------------------------------------


def test_authorization_mode_is_node_and_rbac(kube_cluster: KubeCluster, kube_ns: str) -> None:
    apiserver = kube_cluster.component_pids()["kube-apiserver"]
    cmdline = Path(f"/proc/{apiserver}/cmdline").read_text().split("\0")
    assert "--authorization-mode=Node,RBAC" in cmdline

    # RBAC: a service account may do nothing until a role is bound (AlwaysAllow would say yes).
    kube_cluster.kubectl("create", "serviceaccount", "reader", "-n", kube_ns)
    reader = f"system:serviceaccount:{kube_ns}:reader"
    assert not _can_i(kube_cluster, "list", "pods", "-n", kube_ns, user=reader)
    kube_cluster.kubectl(
        "create", "role", "pod-reader", "--verb=list", "--resource=pods", "-n", kube_ns
    )
    kube_cluster.kubectl(
        "create",
        "rolebinding",
        "pod-reader",
        "--role=pod-reader",
        f"--serviceaccount={kube_ns}:reader",
        "-n",
        kube_ns,
    )
    wait_until(
        lambda: _can_i(kube_cluster, "list", "pods", "-n", kube_ns, user=reader),
        what="the RoleBinding to take effect",
    )
    assert not _can_i(kube_cluster, "list", "pods", "-n", "default", user=reader)
    assert not _can_i(kube_cluster, "delete", "pods", "-n", kube_ns, user=reader)

    # Node: no RBAC binding grants system:nodes anything here; the Node authorizer does,
    # and only for a user that is in system:nodes.
    node_user = f"system:node:{unique_name('n')}"
    assert _can_i(kube_cluster, "list", "services", user=node_user, groups=("system:nodes",))
    assert not _can_i(kube_cluster, "list", "services", user=node_user)


# -- b. ValidatingAdmissionPolicy ----------------------------------------------------------


def test_validating_admission_policy_is_enforced(
    kube_cluster: KubeCluster, kube_ns: str, cluster_scoped: list[str]
) -> None:
    policy = unique_name("sealift-test-no-forbidden-key")
    vap = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "!has(object.data) || !('forbidden' in object.data)",
                    "message": "key 'forbidden' is not allowed",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {
            "policyName": policy,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": kube_ns}}
            },
        },
    }
    cluster_scoped += [
        f"validatingadmissionpolicybinding/{policy}",
        f"validatingadmissionpolicy/{policy}",
    ]
    kube_cluster.apply([vap, binding])

    def configmap(key: str) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{key}", "namespace": kube_ns},
                "data": {key: "1"},
            }
        )

    # Policies load asynchronously: probe with server-side dry runs until it bites.
    def denied() -> str | None:
        result = kube_cluster.kubectl(
            "create", "--dry-run=server", "-f", "-", input=configmap("forbidden"), check=False
        )
        return result.stderr if "denied request" in result.stderr else None

    message = wait_until(denied, timeout=30, what="the policy to be enforced")
    assert f"ValidatingAdmissionPolicy '{policy}'" in message
    assert "key 'forbidden' is not allowed" in message

    kube_cluster.kubectl("create", "-f", "-", input=configmap("allowed"))
    rejected = kube_cluster.kubectl("create", "-f", "-", input=configmap("forbidden"), check=False)
    assert rejected.returncode != 0
    assert "key 'forbidden' is not allowed" in rejected.stderr


# -- c. node-bound service-account tokens --------------------------------------------------


def _agent_on(cluster: KubeCluster, namespace: str, node: str) -> str:
    """Run pod ``agent`` (service account ``agent``) on ``node``; return a token bound to it."""
    cluster.kubectl("create", "serviceaccount", "agent", "-n", namespace)
    _apply_in(cluster, namespace, _pod("agent", node, service_account="agent"))
    assert _scheduled_node(cluster, namespace, "agent") == node
    return cluster.kubectl(
        "create",
        "token",
        "agent",
        "-n",
        namespace,
        "--bound-object-kind=Pod",
        "--bound-object-name=agent",
        "--duration=10m",
    ).stdout.strip()


def test_pod_bound_token_carries_node_name(kube_cluster: KubeCluster, kube_ns: str) -> None:
    node = kube_cluster.add_cpu_node(unique_name("tok"))
    token = _agent_on(kube_cluster, kube_ns, node)

    review = kube_cluster.kubectl_json("auth", "whoami", token=token)
    assert review["kind"] == "SelfSubjectReview"
    assert review["apiVersion"] == "authentication.k8s.io/v1"
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{kube_ns}:agent"
    assert user["extra"][NODE_NAME_EXTRA] == [node]
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["agent"]
    assert "authentication.kubernetes.io/node-uid" in user["extra"]


def test_policy_limits_an_agent_to_its_own_node(
    kube_cluster: KubeCluster, kube_ns: str, cluster_scoped: list[str]
) -> None:
    """RBAC grants node patches; a policy keyed on the token's node-name narrows them."""
    own = kube_cluster.add_cpu_node(unique_name("own"))
    other = kube_cluster.add_cpu_node(unique_name("other"))
    token = _agent_on(kube_cluster, kube_ns, own)
    agent = f"system:serviceaccount:{kube_ns}:agent"

    name = unique_name("sealift-test-own-node")
    node_name = f"request.userInfo.extra['{NODE_NAME_EXTRA}']"
    own_node_only = (
        f"'{NODE_NAME_EXTRA}' in request.userInfo.extra && {node_name} == [object.metadata.name]"
    )
    cluster_scoped += [
        f"validatingadmissionpolicybinding/{name}",
        f"validatingadmissionpolicy/{name}",
        f"clusterrolebinding/{name}",
        f"clusterrole/{name}",
    ]
    kube_cluster.kubectl("create", "clusterrole", name, "--verb=get,patch", "--resource=nodes")
    kube_cluster.kubectl(
        "create",
        "clusterrolebinding",
        name,
        f"--clusterrole={name}",
        f"--serviceaccount={kube_ns}:agent",
    )
    kube_cluster.apply(
        [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["UPDATE"],
                                "resources": ["nodes"],
                            }
                        ]
                    },
                    "matchConditions": [
                        {"name": "agent", "expression": f"request.userInfo.username == '{agent}'"}
                    ],
                    "validations": [
                        {
                            "expression": own_node_only,
                            "message": "an agent may change only its own node",
                        }
                    ],
                },
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]},
            },
        ]
    )

    def label(node: str, *extra: str) -> Any:
        return kube_cluster.kubectl(
            "label",
            "node",
            node,
            "sealift.test/cached=yes",
            "--overwrite",
            *extra,
            token=token,
            check=False,
        )

    # RBAC and the policy both load asynchronously: wait for each with dry runs.
    wait_until(lambda: label(own, "--dry-run=server").returncode == 0, what="RBAC for the agent")
    wait_until(
        lambda: "denied request" in label(other, "--dry-run=server").stderr,
        timeout=30,
        what="the own-node policy to be enforced",
    )

    assert label(own).returncode == 0
    labels = kube_cluster.kubectl_json("get", "node", own)["metadata"]["labels"]
    assert labels["sealift.test/cached"] == "yes"
    denied = label(other)
    assert denied.returncode != 0
    assert "an agent may change only its own node" in denied.stderr
    labels = kube_cluster.kubectl_json("get", "node", other)["metadata"]["labels"]
    assert "sealift.test/cached" not in labels


# -- d. kwok: Running and Ready pods, real GPU scheduling ------------------------------------


def test_daemonset_and_deployment_pods_become_ready(
    kube_cluster: KubeCluster, kube_ns: str
) -> None:
    pool = {"sealift.test/pool": kube_ns}
    gpu_nodes = {kube_cluster.add_gpu_node(unique_name("gpu"), labels=pool) for _ in range(2)}
    cpu_node = kube_cluster.add_cpu_node(unique_name("cpu"), labels=pool)
    node = kube_cluster.kubectl_json("get", "node", next(iter(gpu_nodes)))
    assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == "NVIDIA-H100-SXM5-80GB"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert {"key": "nvidia.com/gpu", "effect": "NoSchedule"} in node["spec"]["taints"]

    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    _apply_in(
        kube_cluster,
        kube_ns,
        _workload("DaemonSet", "agent", kube_ns, tolerations=[{"operator": "Exists"}]),
        _workload(
            "Deployment", "server", kube_ns, gpus=8, replicas=2, tolerations=[gpu_toleration]
        ),
    )
    kube_cluster.kubectl("rollout", "status", "daemonset/agent", "-n", kube_ns, "--timeout=60s")
    kube_cluster.kubectl("rollout", "status", "deployment/server", "-n", kube_ns, "--timeout=60s")

    placed: dict[str, set[str]] = {"agent": set(), "server": set()}
    for pod in kube_cluster.kubectl_json("get", "pods", "-n", kube_ns)["items"]:
        assert pod["status"]["phase"] == "Running"
        conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert conditions["Ready"] == "True"
        placed[pod["metadata"]["labels"]["app"]].add(pod["spec"]["nodeName"])
    assert placed["agent"] == gpu_nodes | {cpu_node}
    assert placed["server"] == gpu_nodes  # 8 GPUs each: one replica per node


def test_gpu_request_beyond_capacity_stays_pending(kube_cluster: KubeCluster, kube_ns: str) -> None:
    pool = {"sealift.test/pool": kube_ns}
    node = kube_cluster.add_gpu_node(unique_name("gpu"), gpus=8, labels=pool)
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    _apply_in(
        kube_cluster,
        kube_ns,
        _workload("Deployment", "big", kube_ns, gpus=16, tolerations=[toleration]),
    )

    def unschedulable() -> dict[str, Any] | None:
        for pod in kube_cluster.kubectl_json("get", "pods", "-n", kube_ns, "-l", "app=big")[
            "items"
        ]:
            for cond in pod["status"].get("conditions", []):
                if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return pod
        return None

    pod = wait_until(unschedulable, what="the scheduler to give up on the pod")
    assert pod["status"]["phase"] == "Pending"
    (cond,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert cond["status"] == "False"
    assert "Insufficient nvidia.com/gpu" in cond["message"]

    def failed_scheduling() -> str | None:
        events = kube_cluster.kubectl_json(
            "get", "events", "-n", kube_ns, "--field-selector", "reason=FailedScheduling"
        )["items"]
        messages = [
            e["message"] for e in events if e["involvedObject"]["name"] == pod["metadata"]["name"]
        ]
        return messages[0] if messages else None

    event = wait_until(failed_scheduling, what="a FailedScheduling event")
    assert "Insufficient nvidia.com/gpu" in event

    # More allocatable GPUs on the node: the scheduler retries and the pod runs there.
    kube_cluster.set_allocatable(node, "nvidia.com/gpu", 16)
    kube_cluster.kubectl("rollout", "status", "deployment/big", "-n", kube_ns, "--timeout=60s")
    assert _scheduled_node(kube_cluster, kube_ns, pod["metadata"]["name"]) == node


# -- e. CRDs and the status subresource ------------------------------------------------------


def test_custom_resource_status_subresource(
    kube_cluster: KubeCluster, kube_ns: str, cluster_scoped: list[str]
) -> None:
    group = f"{unique_name('t')}.sealift.test"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"phase": {"type": "string"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
    cluster_scoped.append(f"customresourcedefinition/widgets.{group}")
    kube_cluster.apply(crd)
    kube_cluster.kubectl(
        "wait", "--for=condition=Established", f"crd/widgets.{group}", "--timeout=30s"
    )
    widget = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": kube_ns},
        "spec": {"size": 1},
    }
    resource = f"widgets.{group}"
    # Discovery of a new group can lag Established by a moment.
    wait_until(
        lambda: (
            kube_cluster.kubectl(
                "create", "-f", "-", input=json.dumps(widget), check=False
            ).returncode
            == 0
        ),
        what="the Widget kind to be served",
    )

    status = json.dumps({"status": {"phase": "Ready"}})
    kube_cluster.kubectl(
        "patch", resource, "w", "-n", kube_ns, "--subresource=status", "--type=merge", "-p", status
    )
    got = kube_cluster.kubectl_json("get", resource, "w", "-n", kube_ns)
    assert got["status"] == {"phase": "Ready"}
    assert got["spec"] == {"size": 1}

    # With the subresource, the main resource ignores status and the status one ignores spec.
    kube_cluster.kubectl(
        "patch",
        resource,
        "w",
        "-n",
        kube_ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"size": 2}, "status": {"phase": "Broken"}}),
    )
    kube_cluster.kubectl(
        "patch",
        resource,
        "w",
        "-n",
        kube_ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"size": 3}}),
    )
    got = kube_cluster.kubectl_json("get", resource, "w", "-n", kube_ns)
    assert got["status"] == {"phase": "Ready"}
    assert got["spec"] == {"size": 2}


# -- helm ------------------------------------------------------------------------------------


def test_helm_installs_a_local_chart(
    kube_cluster: KubeCluster, kube_ns: str, tmp_path: Path
) -> None:
    version = kube_cluster.run_helm("version", "--template", "{{ .Version }}").stdout
    assert version == "v3.22.0"

    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-probe\n"
        "data:\n  kube: {{ .Capabilities.KubeVersion.Version | quote }}\n"
    )
    kube_cluster.run_helm("install", "rel", str(chart), "-n", kube_ns, "--wait", "--timeout=60s")
    data = kube_cluster.kubectl_json("get", "configmap", "rel-probe", "-n", kube_ns)["data"]
    assert data["kube"] == "v1.37.2"
    releases = json.loads(kube_cluster.run_helm("list", "-n", kube_ns, "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in releases] == [("rel", "deployed")]

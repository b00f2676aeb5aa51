"""A small chart shaped like NVIDIA's GPU Operator chart, for the cluster-side tests.

Its values follow the real chart's layout ({repository, image, version} per component, the
driver manager nested in driver, the node-feature-discovery subchart's {repository, tag}); its
CRD is a structural ClusterPolicy schema with a status subresource; its templates render the
operator Deployment, the ClusterPolicy built from the values, and NFD's master and worker. It is
written here from scratch: the tests need its shape, not NVIDIA's code.
"""

from __future__ import annotations

from pathlib import Path

import yaml

# component key -> (repository, image, version); gfd shares the device plugin's image, as upstream.
# As upstream, the operator's and validator's values carry no version (the templates default it
# to the chart's appVersion), NFD's carry no tag (its subchart's appVersion), and the driver's
# version is what the operator extends with the node's kernel and OS: it pulls DRIVER_TAGS.
COMPONENTS: dict[str, tuple[str, str, str]] = {
    "operator": ("nvcr.io/nvidia", "gpu-operator", "v26.7.0"),
    "validator": ("nvcr.io/nvidia/cloud-native", "gpu-operator-validator", "v26.7.0"),
    "driver": ("nvcr.io/nvidia", "driver", "580.95.05"),
    "driver.manager": ("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.9.0"),
    "toolkit": ("nvcr.io/nvidia/k8s", "container-toolkit", "v1.18.0"),
    "devicePlugin": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.18.0"),
    "dcgmExporter": ("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.4.1-4.6.0-ubuntu22.04"),
    "gfd": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.18.0"),
    "migManager": ("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.13.0"),
}
NFD_IMAGE = ("registry.k8s.io/nfd/node-feature-discovery", "v0.18.2")
DRIVER_TAGS = ("580-5.15.0-78-generic-ubuntu22.04", "580-5.14.0-427.13.1.el9_4-rhel9.4")
_UNVERSIONED = ("operator", "validator")


def bundle_image_refs() -> list[str]:
    """The bundle-local refs (repository:tag without the host) of every image the chart runs."""
    refs = {
        f"{repo.split('/', 1)[1]}/{image}:{version}"
        for key, (repo, image, version) in COMPONENTS.items()
        if key != "driver"
    }
    driver_repo, driver_image, _ = COMPONENTS["driver"]
    refs |= {f"{driver_repo.split('/', 1)[1]}/{driver_image}:{tag}" for tag in DRIVER_TAGS}
    refs.add(f"{NFD_IMAGE[0].split('/', 1)[1]}:{NFD_IMAGE[1]}")
    return sorted(refs)


def _component(key: str) -> dict[str, object]:
    repository, image, version = COMPONENTS[key]
    if key in _UNVERSIONED:
        return {"repository": repository, "image": image}
    return {"repository": repository, "image": image, "version": version}


_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.nvidia.com"},
    "spec": {
        "group": "nvidia.com",
        "names": {
            "kind": "ClusterPolicy",
            "listKind": "ClusterPolicyList",
            "plural": "clusterpolicies",
            "singular": "clusterpolicy",
        },
        "scope": "Cluster",
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
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {
                                "type": "object",
                                "properties": {
                                    key: {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    }
                                    for key in (
                                        "operator",
                                        "validator",
                                        "driver",
                                        "toolkit",
                                        "devicePlugin",
                                        "dcgmExporter",
                                        "gfd",
                                        "migManager",
                                        "mig",
                                        "daemonsets",
                                    )
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "state": {
                                        "type": "string",
                                        "enum": ["ignored", "ready", "notReady"],
                                    },
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}

_OPERATOR = """\
apiVersion: v1
kind: ServiceAccount
metadata:
  name: gpu-operator
  namespace: {{ .Release.Namespace }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: gpu-operator
  namespace: {{ .Release.Namespace }}
  labels:
    app: gpu-operator
spec:
  replicas: 1
  selector:
    matchLabels:
      app: gpu-operator
  template:
    metadata:
      labels:
        app: gpu-operator
    spec:
      serviceAccountName: gpu-operator
      containers:
        - name: gpu-operator
          {{- with .Values.operator }}
          image: "{{ .repository }}/{{ .image }}:{{ .version | default $.Chart.AppVersion }}"
          {{- end }}
          env:
            - name: OPERATOR_NAMESPACE
              value: {{ .Release.Namespace | quote }}
            {{- with .Values.driver.manager }}
            - name: DRIVER_MANAGER_IMAGE
              value: "{{ .repository }}/{{ .image }}:{{ .version }}"
            {{- end }}
"""

_CLUSTER_POLICY = """\
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata:
  name: cluster-policy
spec:
  operator:
    defaultRuntime: containerd
  validator:
{{ toYaml .Values.validator | indent 4 }}
  driver:
{{ toYaml .Values.driver | indent 4 }}
  toolkit:
{{ toYaml .Values.toolkit | indent 4 }}
  devicePlugin:
{{ toYaml .Values.devicePlugin | indent 4 }}
  dcgmExporter:
{{ toYaml .Values.dcgmExporter | indent 4 }}
  gfd:
{{ toYaml .Values.gfd | indent 4 }}
  migManager:
{{ toYaml .Values.migManager | indent 4 }}
  mig:
{{ toYaml .Values.mig | indent 4 }}
  daemonsets:
{{ toYaml .Values.daemonsets | indent 4 }}
"""

_NFD = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nfd-master
  namespace: {{ .Release.Namespace }}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: nfd-master
  template:
    metadata:
      labels:
        app: nfd-master
    spec:
      containers:
        - name: master
          image: "{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}"
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nfd-worker
  namespace: {{ .Release.Namespace }}
spec:
  selector:
    matchLabels:
      app: nfd-worker
  template:
    metadata:
      labels:
        app: nfd-worker
    spec:
      tolerations:
        - operator: Exists
      containers:
        - name: worker
          image: "{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}"
"""

# Like upstream's CRD-upgrade Job: a Helm hook, which sealift must neither render nor run.
_HOOK = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: gpu-operator-upgrade-crd
  namespace: {{ .Release.Namespace }}
  annotations:
    helm.sh/hook: pre-upgrade
spec:
  template:
    spec:
      restartPolicy: OnFailure
      containers:
        - name: upgrade-crd
          image: "docker.io/bitnami/kubectl:latest"
"""


def write_gpu_operator_chart(path: Path, *, version: str = "v26.7.0") -> Path:
    """Write the chart folder at ``path``; package it with support.content.package_chart_tgz."""
    chart = Path(path)
    (chart / "templates").mkdir(parents=True, exist_ok=True)
    (chart / "crds").mkdir(exist_ok=True)
    sub = chart / "charts" / "node-feature-discovery"
    (sub / "templates").mkdir(parents=True, exist_ok=True)
    driver = {
        "enabled": True,
        "usePrecompiled": False,
        **_component("driver"),
        "manager": _component("driver.manager"),
        "repoConfig": {"configMapName": ""},
    }
    values = {
        "operator": _component("operator"),
        "validator": _component("validator"),
        "driver": driver,
        "toolkit": {"enabled": True, **_component("toolkit")},
        "devicePlugin": {"enabled": True, **_component("devicePlugin")},
        "dcgmExporter": {"enabled": True, **_component("dcgmExporter")},
        "gfd": {"enabled": True, **_component("gfd")},
        "migManager": {"enabled": True, **_component("migManager")},
        "mig": {"strategy": "single"},
        "daemonsets": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        },
        "nfd": {"enabled": True},
        "node-feature-discovery": {"image": {"repository": NFD_IMAGE[0]}},
    }
    meta = {
        "apiVersion": "v2",
        "name": "gpu-operator",
        "version": version,
        "appVersion": version,
        "kubeVersion": ">= 1.16.0-0",
        "dependencies": [
            {"name": "node-feature-discovery", "version": "0.18.2", "condition": "nfd.enabled"}
        ],
    }
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    (chart / "values.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    (chart / "crds" / "nvidia.com_clusterpolicies.yaml").write_text(yaml.safe_dump(_CRD))
    (chart / "templates" / "operator.yaml").write_text(_OPERATOR)
    (chart / "templates" / "clusterpolicy.yaml").write_text(_CLUSTER_POLICY)
    (chart / "templates" / "upgrade-crd.yaml").write_text(_HOOK)
    sub_meta = {
        "apiVersion": "v2",
        "name": "node-feature-discovery",
        "version": "0.18.2",
        "appVersion": NFD_IMAGE[1],
    }
    (sub / "Chart.yaml").write_text(yaml.safe_dump(sub_meta))
    (sub / "values.yaml").write_text(yaml.safe_dump({"image": {"repository": NFD_IMAGE[0]}}))
    (sub / "templates" / "nfd.yaml").write_text(_NFD)
    return chart

"""What kwok cannot fake: the GPU Operator's status and the prefetch agents' node labels.

kwok makes scheduled pods Running and Ready, but nothing runs in them. This background loop plays
the two parts whose effects install waits for:

- the operator: once the ClusterPolicy exists, its status becomes ``ready`` (GPU capacity is on
  the fake nodes from the start, as the device plugin would report it), and a node asked for a
  MIG layout (``nvidia.com/mig.config``) reports ``nvidia.com/mig.config.state=success``;
- each prefetch agent: for every Ready prefetch pod, it labels the pod's node exactly as the real
  agent does, through sealift's own ``apply_node_labels`` and with a service-account token bound
  to that pod, so the RBAC and the admission policy install rendered are what allow it. Versions
  "on disk" follow the pod's ``--keep``, as the agent's store would.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from sealift.prefetch.node_label import apply_node_labels


class FakeGpuStack:
    """Run the fake operator and agents in a thread while the context is open."""

    def __init__(self, kubectl: Any, admin_kubeconfig: Path, namespace: str) -> None:
        self._kubectl = kubectl
        self._admin = admin_kubeconfig
        self._namespace = namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._work = Path(tempfile.mkdtemp(prefix="fake-agents-"))
        # node -> model -> digests "on disk", oldest first
        self.disk: dict[str, dict[str, list[str]]] = {}
        self.labelled_pods: set[str] = set()
        self.errors: list[str] = []

    def __enter__(self) -> FakeGpuStack:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._operator()
                self._mig_manager()
                self._agents()
            except Exception as problem:  # keep playing; the test reads .errors
                self.errors.append(str(problem))

    def _operator(self) -> None:
        found = self._kubectl("get", "clusterpolicy", "-o", "json", check=False)
        if found.returncode != 0:
            return
        for item in json.loads(found.stdout).get("items", []):
            if (item.get("status") or {}).get("state") != "ready":
                self._kubectl(
                    "patch",
                    "clusterpolicy",
                    item["metadata"]["name"],
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    '{"status":{"state":"ready"}}',
                )

    def _mig_manager(self) -> None:
        nodes = self._kubectl(
            "get", "nodes", "-l", "nvidia.com/mig.config", "-o", "json", check=False
        )
        if nodes.returncode != 0:
            return
        for node in json.loads(nodes.stdout).get("items", []):
            if node["metadata"]["labels"].get("nvidia.com/mig.config.state") != "success":
                self._kubectl(
                    "label",
                    "node",
                    node["metadata"]["name"],
                    "--overwrite",
                    "nvidia.com/mig.config.state=success",
                )

    def _agents(self) -> None:
        pods = self._kubectl(
            "get",
            "pods",
            "-n",
            self._namespace,
            "-l",
            "app.kubernetes.io/name=sealift-prefetch",
            "-o",
            "json",
            check=False,
        )
        if pods.returncode != 0:
            return
        for pod in json.loads(pods.stdout).get("items", []):
            name = pod["metadata"]["name"]
            ready = any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (pod.get("status") or {}).get("conditions", [])
            )
            if not ready or name in self.labelled_pods or pod["metadata"].get("deletionTimestamp"):
                continue
            node = pod["spec"]["nodeName"]
            annotations = pod["metadata"]["annotations"]
            model, digest = (
                annotations["sealift.dev/model"],
                annotations["sealift.dev/weights-digest"],
            )
            args = pod["spec"]["containers"][0]["args"]
            keep = int(next(a for a in args if a.startswith("--keep=")).split("=")[1])
            versions = self.disk.setdefault(node, {}).setdefault(model, [])
            if digest in versions:
                versions.remove(digest)
            versions.append(digest)
            del versions[:-keep]
            apply_node_labels(node, model, versions, kubeconfig=self._kubeconfig_for(pod))
            self.labelled_pods.add(name)

    def _kubeconfig_for(self, pod: dict[str, Any]) -> Path:
        return pod_kubeconfig(
            self._kubectl, self._admin, pod, self._work / f"{pod['metadata']['name']}.yaml"
        )

    @property
    def problems(self) -> str:
        """What went wrong while playing, once per message, for an assertion's output."""
        return "\n".join(sorted(set(self.errors)))


def pod_kubeconfig(kubectl: Any, admin_kubeconfig: Path, pod: dict[str, Any], path: Path) -> Path:
    """A kubeconfig at ``path`` holding a token of the pod's service account, bound to the pod.

    Bound to a pod on a node, the token carries that node's name: what the agent's own token
    carries in a real cluster.
    """
    meta = pod["metadata"]
    token = kubectl(
        "create", "token", pod["spec"]["serviceAccountName"], "-n", meta["namespace"],
        "--bound-object-kind", "Pod", "--bound-object-name", meta["name"],
        "--bound-object-uid", meta["uid"], "--duration", "10m",
    ).stdout.strip()  # fmt: skip
    return write_token_kubeconfig(path, cluster_entry(admin_kubeconfig), token)


def cluster_entry(kubeconfig: Path) -> dict[str, Any]:
    """The current context's cluster section (server and how to trust it) of a kubeconfig."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    entry: dict[str, Any] = dict(cluster["cluster"])
    authority = entry.get("certificate-authority")
    if authority and not Path(authority).is_absolute():
        entry["certificate-authority"] = str(kubeconfig.parent / authority)
    return entry


def write_token_kubeconfig(path: Path, cluster: dict[str, Any], token: str) -> Path:
    """A kubeconfig that authenticates with a bearer token."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def run_checked(command: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a command, raising with its stderr on failure."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])}...: {done.stderr.strip()}")
    return done

"""A real Kubernetes control plane on loopback for tests: kwokctl's binary runtime.

``tools/k8s/build.sh`` (``make k8s-tools``; ``make test`` runs it) builds kube-apiserver,
kube-controller-manager, kube-scheduler, kubectl, etcd, kwok, kwokctl and helm into
``.cache/k8s/bin``. :class:`KubeCluster` starts them as one cluster with every binary passed
explicitly, so kwokctl downloads nothing, and everything listens on 127.0.0.1 only.

Nodes are fake: kwok marks them Ready and marks every pod bound to them Running and Ready, so
the real scheduler, controllers, RBAC and admission run against nodes that have no kubelet.
See tools/k8s/README.md for what was verified about this cluster.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_BIN_ENV = "SEALIFT_K8S_BIN"
K8S_BIN_DIR = Path(os.environ.get(K8S_BIN_ENV) or REPO_ROOT / ".cache" / "k8s" / "bin")

CLUSTER_BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "etcd",
    "kwok",
    "kwokctl",
)
K8S_TOOLS = (*CLUSTER_BINARIES, "helm")

LOOPBACK = "127.0.0.1"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DEFAULT_GPU_PRODUCT = "NVIDIA-H100-SXM5-80GB"

# Bounded so a broken control plane fails the session quickly instead of hanging CI.
START_TIMEOUT_S = 90.0
READY_TIMEOUT_S = 60.0
KUBECTL_TIMEOUT_S = 60.0
_OUTPUT_TAIL_CHARS = 4000

# Variables a child must not inherit: proxies (loopback traffic must never reach one),
# the user's kubeconfig, and kwokctl's KWOK_* overrides of the configuration given here.
_PROXY_VARS = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})
_DROPPED_VARS = frozenset({"KUBECONFIG", "KUBECACHEDIR"})
_NO_PROXY = "127.0.0.1,localhost,::1"

T = TypeVar("T")


def missing_k8s_tools(bin_dir: Path | None = None) -> list[str]:
    """Return the names of the tools that are not built (executable) in ``bin_dir``."""
    where = K8S_BIN_DIR if bin_dir is None else bin_dir
    return [name for name in K8S_TOOLS if not os.access(where / name, os.X_OK)]


def k8s_tools_available(bin_dir: Path | None = None) -> bool:
    """Return True when every binary the test cluster needs (and helm) is built."""
    return not missing_k8s_tools(bin_dir)


def unique_name(prefix: str) -> str:
    """Return ``prefix-<8 hex>``: a DNS-1123 name that no other test on the cluster uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(
    probe: Callable[[], T | None], *, timeout: float = READY_TIMEOUT_S, what: str = "condition"
) -> T:
    """Poll ``probe`` until it returns something other than None/False; return that value."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return os.environ without proxies, KUBECONFIG and KWOK_* settings, plus ``extra``.

    NO_PROXY covers loopback as well, for any tool that re-reads a proxy from elsewhere.
    (Go's HTTP client already never proxies 127.0.0.1 or localhost; this is belt and braces.)
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if key.lower() not in _PROXY_VARS
        and key not in _DROPPED_VARS
        and not key.upper().startswith("KWOK_")
    }
    env["NO_PROXY"] = env["no_proxy"] = _NO_PROXY
    if extra:
        env.update(extra)
    return env


class KubeError(subprocess.CalledProcessError):
    """A kubectl/kwokctl command failed; ``str()`` includes its stderr tail."""

    def __str__(self) -> str:
        tail = (self.stderr or self.stdout or "").strip()[-_OUTPUT_TAIL_CHARS:]
        return f"{super().__str__()}\n{tail}"


class KubeClusterError(RuntimeError):
    """The cluster did not come up; the message carries kwokctl's output and component logs."""


class KubeCluster:
    """A kwokctl cluster (binary runtime) under ``work_dir``; a context manager.

    Attributes: ``kubeconfig`` (admin: user kwok-admin in system:masters), ``server``
    (``https://127.0.0.1:<port>``), ``ca_path`` (the apiserver's CA) and ``bin_dir``.
    Everything the cluster writes (etcd data, pki, logs, kubectl's discovery cache, helm's
    folders, a private HOME) stays under ``work_dir``.
    """

    def __init__(
        self,
        work_dir: Path,
        *,
        bin_dir: Path | None = None,
        name: str = "sealift-test",
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.bin_dir = Path(bin_dir) if bin_dir is not None else K8S_BIN_DIR
        self.name = name
        self.start_timeout = start_timeout
        self.kubeconfig = self.work_dir / "kubeconfig.yaml"
        self.server = ""
        self.ca_path = self.work_dir / "ca.crt"
        self.start_seconds = 0.0
        self._kwok_dir = self.work_dir / "kwok"
        self._anonymous_kubeconfig_path = self.work_dir / "no-credentials.kubeconfig.yaml"
        self._started = False

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> KubeCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def cluster_dir(self) -> Path:
        """kwokctl's folder for this cluster (pki, pids, logs, etcd data)."""
        return self._kwok_dir / "clusters" / self.name

    @property
    def helm(self) -> Path:
        """The helm binary built next to the cluster's binaries."""
        return self.bin_dir / "helm"

    @property
    def env(self) -> dict[str, str]:
        """An environment for kubectl/helm children: this cluster's kubeconfig, no proxies."""
        home = self.work_dir / "home"
        return child_env(
            {
                "HOME": str(home),
                "KUBECONFIG": str(self.kubeconfig),
                "KUBECACHEDIR": str(self.work_dir / "kube-cache"),
                "KWOK_WORKDIR": str(self._kwok_dir),
                "HELM_CACHE_HOME": str(home / "helm-cache"),
                "HELM_CONFIG_HOME": str(home / "helm-config"),
                "HELM_DATA_HOME": str(home / "helm-data"),
            }
        )

    def start(self, attempts: int = 2) -> None:
        """Create the cluster and wait until it serves and ``serviceaccount/default`` exists.

        kwokctl picks free ports by probing, so another process can take one before a component
        binds it; a failed start is torn down and tried once more.
        """
        missing = [n for n in CLUSTER_BINARIES if not os.access(self.bin_dir / n, os.X_OK)]
        if missing:
            raise KubeClusterError(
                f"missing in {self.bin_dir}: {', '.join(missing)} (run `make k8s-tools`)"
            )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "home").mkdir(exist_ok=True)
        config = self.work_dir / "kwokctl.yaml"
        config.write_text(yaml.safe_dump(self._kwokctl_config(), sort_keys=False))
        began = time.monotonic()
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(config)
                break
            except KubeClusterError:
                if attempt == attempts:
                    raise
        self.start_seconds = time.monotonic() - began

    def _start_once(self, config: Path) -> None:
        # From here on a failure must still tear down whatever kwokctl started.
        self._started = True
        atexit.register(self.stop)
        try:
            self._run(
                [
                    str(self.bin_dir / "kwokctl"),
                    "--config",
                    str(config),
                    "--name",
                    self.name,
                    "create",
                    "cluster",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--wait",
                    f"{int(self.start_timeout)}s",
                ],
                timeout=self.start_timeout + 30,
            )
            self._read_kubeconfig()
            wait_until(
                lambda: self.kubectl("get", "--raw=/readyz", check=False).returncode == 0,
                what="apiserver /readyz",
            )
            wait_until(
                lambda: (
                    self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0
                ),
                what="serviceaccount/default (kube-controller-manager)",
            )
        except BaseException as exc:
            detail = self._logs_tail()
            self.stop()
            if isinstance(exc, Exception):
                raise KubeClusterError(f"cluster did not start: {exc}\n{detail}") from exc
            raise

    def stop(self) -> None:
        """Delete the cluster; kill any component kwokctl left behind. Safe to call twice."""
        if not self._started:
            return
        self._started = False
        atexit.unregister(self.stop)
        pids = self.component_pids()
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                [str(self.bin_dir / "kwokctl"), "--name", self.name, "delete", "cluster"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        self._kill(pids)

    def component_pids(self) -> dict[str, int]:
        """Return ``{component: pid}`` for the cluster's processes that are still running."""
        found: dict[str, int] = {}
        for pid_file in sorted((self.cluster_dir / "pids").glob("*.pid")):
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            if self._is_ours(pid):
                found[pid_file.stem] = pid
        return found

    def rss_bytes(self) -> int:
        """Return the summed resident memory of the cluster's processes."""
        total = 0
        for pid in self.component_pids().values():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        return total

    def listening_sockets(self) -> dict[str, set[tuple[str, int]]]:
        """Return ``{component: {(ip, port), ...}}``: the TCP sockets each process listens on."""
        result: dict[str, set[tuple[str, int]]] = {}
        for component, pid in self.component_pids().items():
            inodes = set()
            with contextlib.suppress(OSError):
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    with contextlib.suppress(OSError):
                        target = os.readlink(fd)
                        if target.startswith("socket:["):
                            inodes.add(target[8:-1])
            result[component] = {
                addr for inode, addr in _tcp_listeners(pid).items() if inode in inodes
            }
        return result

    # -- kubectl ---------------------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        token: str | None = None,
        admin: bool = True,
        timeout: float = KUBECTL_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster (never the user's kubeconfig).

        As the admin by default. With ``token``: as whoever that bearer token is, through a
        kubeconfig that carries only the server and its CA (no client certificate, which the
        apiserver would otherwise authenticate first). With ``admin=False``: no kubeconfig is
        added and KUBECONFIG is unset, so ``args`` must bring their own ``--kubeconfig``; a
        forgotten one fails instead of silently running as the admin.
        """
        cmd = [str(self.bin_dir / "kubectl")]
        env = self.env
        if token is not None:
            cmd += [f"--kubeconfig={self._anonymous_kubeconfig()}", f"--token={token}"]
        elif admin:
            cmd.append(f"--kubeconfig={self.kubeconfig}")
        if token is not None or not admin:
            del env["KUBECONFIG"]
        return self._run([*cmd, *args], input=input, check=check, timeout=timeout, env=env)

    def kubectl_json(self, *args: str, token: str | None = None) -> Any:
        """Run ``kubectl ARGS -o json`` and return the parsed output."""
        return json.loads(self.kubectl(*args, "-o", "json", token=token).stdout)

    def apply(self, manifest: Mapping[str, Any] | list[Mapping[str, Any]] | str) -> None:
        """``kubectl apply`` one object, a list of objects, or YAML text (server-side)."""
        if isinstance(manifest, str):
            text = manifest
        else:
            docs = manifest if isinstance(manifest, list) else [manifest]
            text = yaml.safe_dump_all(docs, sort_keys=False)
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)

    def create_namespace(self, prefix: str = "t") -> str:
        """Create a uniquely named namespace and return its name."""
        name = unique_name(prefix)
        self.kubectl("create", "namespace", name)
        return name

    def run_helm(
        self, *args: str, check: bool = True, timeout: float = KUBECTL_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run helm against this cluster, with helm's folders under ``work_dir``."""
        cmd = [str(self.helm), f"--kubeconfig={self.kubeconfig}", *args]
        return self._run(cmd, check=check, timeout=timeout)

    # -- fake nodes ------------------------------------------------------------------------

    def add_gpu_node(
        self,
        name: str,
        *,
        product: str = DEFAULT_GPU_PRODUCT,
        gpus: int = 8,
        taint: bool = True,
        labels: Mapping[str, str] | None = None,
        cpu: str = "192",
        memory: str = "2Ti",
        pods: int = 110,
        wait: bool = True,
    ) -> str:
        """Create a kwok-faked GPU node the way the NVIDIA GPU operator would present it.

        Label ``nvidia.com/gpu.product``, ``nvidia.com/gpu`` in capacity and allocatable and,
        with ``taint``, the usual ``nvidia.com/gpu:NoSchedule`` taint. Returns ``name``.
        """
        node_labels = {GPU_PRODUCT_LABEL: product, **(labels or {})}
        taints = [{"key": GPU_RESOURCE, "effect": "NoSchedule"}] if taint else []
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods), GPU_RESOURCE: str(gpus)}
        return self._add_node(name, node_labels, taints, resources, wait=wait)

    def add_cpu_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        cpu: str = "32",
        memory: str = "128Gi",
        pods: int = 110,
        wait: bool = True,
    ) -> str:
        """Create a kwok-faked node without GPUs. Returns ``name``."""
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
        return self._add_node(name, dict(labels or {}), [], resources, wait=wait)

    def set_allocatable(self, node: str, resource: str, value: str | int) -> None:
        """Patch ``status.allocatable[resource]`` of ``node`` (kwok leaves it alone after)."""
        patch = {"status": {"allocatable": {resource: str(value)}}}
        self.kubectl(
            "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
        )

    def wait_node_ready(self, name: str, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until kwok reports ``name`` Ready and its not-ready taint is gone."""

        def ready() -> bool:
            node = self.kubectl_json("get", "node", name)
            conditions = node.get("status", {}).get("conditions", [])
            is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            taints = node.get("spec", {}).get("taints", [])
            return is_ready and not any(
                t["key"].startswith("node.kubernetes.io/not-ready") for t in taints
            )

        wait_until(ready, timeout=timeout, what=f"node {name} Ready")

    def _add_node(
        self,
        name: str,
        labels: dict[str, str],
        taints: list[dict[str, str]],
        resources: dict[str, str],
        *,
        wait: bool,
    ) -> str:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                # kwok's binary runtime manages every node; the annotation is what the other
                # runtimes select on, so the same manifest works there too.
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    **labels,
                },
            },
            "spec": {"taints": taints} if taints else {},
            # Status given at create time is kept (like a kubelet registering); kwok's
            # node-initialize stage copies capacity/allocatable when present.
            "status": {"capacity": resources, "allocatable": dict(resources)},
        }
        self.kubectl("create", "-f", "-", input=json.dumps(node))
        if wait:
            self.wait_node_ready(name)
        return name

    # -- internals -------------------------------------------------------------------------

    def _kwokctl_config(self) -> dict[str, Any]:
        b = self.bin_dir
        return {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": {
                "runtime": "binary",
                "bindAddress": LOOPBACK,
                "securePort": True,
                # kwokctl's defaults (they follow securePort), spelled out because the tests
                # rely on them: --authorization-mode=Node,RBAC and the default admission chain.
                "kubeAuthorization": True,
                "kubeAdmission": True,
                "kubeApiserverBinary": str(b / "kube-apiserver"),
                "kubeControllerManagerBinary": str(b / "kube-controller-manager"),
                "kubeSchedulerBinary": str(b / "kube-scheduler"),
                "kubectlBinary": str(b / "kubectl"),
                "kwokControllerBinary": str(b / "kwok"),
                "etcdBinary": str(b / "etcd"),
                "cacheDir": str(self._kwok_dir / "cache"),
                # The components, explicitly: nothing optional that would need a download.
                "components": [
                    "etcd",
                    "kube-apiserver",
                    "kube-controller-manager",
                    "kube-scheduler",
                    "kwok-controller",
                ],
            },
        }

    def _read_kubeconfig(self) -> None:
        self._anonymous_kubeconfig_path.unlink(missing_ok=True)  # a retry's port differs
        config = yaml.safe_load(self.kubeconfig.read_text())
        contexts = {c["name"]: c["context"] for c in config.get("contexts", [])}
        context = contexts[config["current-context"]]
        clusters = {c["name"]: c["cluster"] for c in config.get("clusters", [])}
        cluster = clusters[context["cluster"]]
        self.server = cluster["server"]
        if "certificate-authority-data" in cluster:
            self.ca_path.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        else:
            ca = Path(cluster["certificate-authority"])
            if not ca.is_absolute():
                ca = self.kubeconfig.parent / ca
            self.ca_path.write_bytes(ca.read_bytes())

    def _anonymous_kubeconfig(self) -> Path:
        path = self._anonymous_kubeconfig_path
        if not path.exists():
            config = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": self.server,
                            "certificate-authority": str(self.ca_path),
                        },
                    }
                ],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
            path.write_text(yaml.safe_dump(config))
        return path

    def _run(
        self,
        cmd: list[str],
        *,
        input: str | None = None,
        check: bool = True,
        timeout: float = KUBECTL_TIMEOUT_S,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            cmd,
            input=input,
            env=self.env if env is None else env,
            cwd=self.work_dir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise KubeError(result.returncode, cmd, result.stdout, result.stderr)
        return result

    def _is_ours(self, pid: int) -> bool:
        """True when ``pid`` runs one of our binaries (pid files can outlive their process)."""
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            return False
        exe = exe.removesuffix(" (deleted)")
        ours = {str((self.bin_dir / name).resolve()) for name in CLUSTER_BINARIES}
        return exe in ours or exe.startswith(f"{self.work_dir}/")

    def _kill(self, pids: Mapping[str, int]) -> None:
        alive = [pid for pid in pids.values() if self._is_ours(pid)]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 10
            while alive and time.monotonic() < deadline:
                alive = [pid for pid in alive if self._is_ours(pid) and not _is_zombie(pid)]
                time.sleep(0.05)
            if not alive:
                return

    def _logs_tail(self) -> str:
        parts = []
        for log in sorted((self.cluster_dir / "logs").glob("*.log")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {log.name}\n{log.read_text()[-1500:]}")
        return "\n".join(parts)[-_OUTPUT_TAIL_CHARS * 2 :]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _tcp_listeners(pid: int) -> dict[str, tuple[str, int]]:
    """Return ``{socket inode: (ip, port)}`` for LISTEN sockets in ``pid``'s network namespace."""
    found: dict[str, tuple[str, int]] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hex_ip, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_ip)
            # /proc prints the address as host-order 32-bit words.
            packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found[fields[9]] = (str(ipaddress.ip_address(packed)), int(hex_port, 16))
    return found

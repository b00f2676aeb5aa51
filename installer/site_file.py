"""The site file (``site.yaml``): one customer cluster, loaded into frozen dataclasses.

It says where GPUs are (node pools by ``nvidia.com/gpu.product``), how the GPU driver gets onto
the nodes, and how each model of the bundle is served. Validation is strict, like the bundle
file's: unknown keys and bad values are errors naming the file, the key path and a hint.
Cross-references (a model's pool, tensor parallelism against GPUs per node) are checked here
so a bad site file fails before anything touches the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sealift.documents import load_document
from sealift.errors import InputError
from sealift.prefetch.node_label import label_value
from sealift.units import parse_duration

SCHEMA_NAME = "site.v1alpha1.json"
GPU_TAINT_KEY = "nvidia.com/gpu"
# Node labels of the NVIDIA stack that pools are found by.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DEFAULT_NAMESPACE = "sealift"
DEFAULT_PREFETCH_NAMESPACE = "sealift-prefetch"
DEFAULT_OPERATOR_NAMESPACE = "gpu-operator"
DEFAULT_HOST_PATH = "/opt/models"


@dataclass(frozen=True)
class Taint:
    """The taint a pool's nodes carry; pods on the pool tolerate exactly this."""

    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class NodePool:
    """GPU nodes selected by their product label."""

    name: str
    gpu_product: str
    gpus_per_node: int
    taint: Taint | None
    mig_config: str = ""


@dataclass(frozen=True)
class ApiKeySecret:
    """A Secret key holding vLLM's API key; it reaches the pod as an env var, never an arg."""

    name: str
    key: str = "api-key"


@dataclass(frozen=True)
class ModelServing:
    """How one model of the bundle is served."""

    name: str
    deployment: str
    pool: str
    tensor_parallel_size: int
    replicas: int = 1
    served_model_name: str = ""
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str = ""
    expected_load_seconds: int = 600
    memory: str = ""
    shm_size: str = "16Gi"
    api_key: ApiKeySecret | None = None
    extra_args: tuple[str, ...] = ()
    image: str = ""
    shutdown_timeout_flag: bool = True


@dataclass(frozen=True)
class WeightsAccess:
    """How prefetch pods reach the weight store and where they put the weights on a node."""

    credentials_secret: str = ""
    endpoint: str = ""
    region: str = ""
    path_style: bool = False
    host_path: str = DEFAULT_HOST_PATH
    keep_versions: int = 1
    ca_config_map: str = ""


@dataclass(frozen=True)
class Timeouts:
    """How long each wait may take, in seconds."""

    operator: int = 900
    prefetch: int = 7200
    rollout: int = 1800


@dataclass(frozen=True)
class Site:
    """A loaded, cross-checked site file."""

    source: str
    name: str
    namespace: str
    prefetch_namespace: str
    operator_namespace: str
    operator_chart: str
    driver_strategy: str
    driver_repository_config_map: str
    driver_tags: tuple[str, ...]
    mig_strategy: str
    pools: tuple[NodePool, ...]
    weights: WeightsAccess
    models: tuple[ModelServing, ...]
    timeouts: Timeouts
    mirror_pull_secret: str = ""

    def pool(self, name: str) -> NodePool:
        """The pool called ``name`` (load_site has checked that it exists)."""
        return next(pool for pool in self.pools if pool.name == name)


def _taint(entry: dict[str, object]) -> Taint | None:
    if "taint" not in entry:
        return Taint(GPU_TAINT_KEY, "NoSchedule")
    spec = entry["taint"]
    if spec is None:
        return None
    assert isinstance(spec, dict)
    return Taint(str(spec["key"]), str(spec["effect"]), str(spec.get("value", "")))


def load_site(path: Path) -> Site:
    """Load and validate a site file; every problem is one InputError naming the key."""
    document = load_document(
        path, package="sealift.installer", schema_name=SCHEMA_NAME, what="site file"
    )
    operator = document.get("gpuOperator") or {}
    driver = operator.get("driver") or {"strategy": "precompiled"}
    if driver.get("repositoryConfigMap") and driver["strategy"] != "packageRepository":
        raise InputError(
            f"{path}: gpuOperator.driver.repositoryConfigMap is only for packageRepository",
            hint="remove it, or set strategy: packageRepository",
        )
    if driver["strategy"] == "host" and driver.get("tags"):
        raise InputError(
            f"{path}: gpuOperator.driver.tags has no use with strategy host",
            hint="a host-installed driver is not pulled; remove the tags",
        )
    if driver["strategy"] == "packageRepository" and not driver.get("repositoryConfigMap"):
        raise InputError(
            f"{path}: gpuOperator.driver.strategy packageRepository needs repositoryConfigMap",
            hint="name the ConfigMap holding the local package mirror's .list or .repo files",
        )
    pools: list[NodePool] = []
    for position, entry in enumerate(document["nodePools"]):
        if any(pool.name == entry["name"] for pool in pools):
            raise InputError(
                f"{path}: nodePools[{position}].name {entry['name']!r} appears twice",
                hint="give each pool a distinct name",
            )
        pools.append(
            NodePool(
                name=entry["name"],
                gpu_product=entry["gpuProduct"],
                gpus_per_node=entry["gpusPerNode"],
                taint=_taint(entry),
                mig_config=entry.get("migConfig", ""),
            )
        )
    mig = (operator.get("mig") or {}).get("strategy", "none")
    for position, pool in enumerate(pools):
        if pool.mig_config and mig == "none":
            raise InputError(
                f"{path}: nodePools[{position}].migConfig needs a MIG strategy",
                hint="set gpuOperator.mig.strategy to single or mixed",
            )
    weights = document.get("weights") or {}
    host_path = PurePosixPath(weights.get("hostPath", DEFAULT_HOST_PATH))
    system = {
        "etc",
        "proc",
        "sys",
        "dev",
        "boot",
        "bin",
        "sbin",
        "lib",
        "lib64",
        "usr",
        "root",
        "run",
    }
    if ".." in host_path.parts or len(host_path.parts) < 3 or host_path.parts[1] in system:
        raise InputError(
            f"{path}: weights.hostPath {str(host_path)!r} is not a folder for model weights",
            hint="name a dedicated folder on the nodes' NVMe, e.g. /opt/models or /mnt/nvme/models",
        )
    if mig == "mixed":
        raise InputError(
            f"{path}: gpuOperator.mig.strategy mixed is not supported for serving pools yet",
            hint="use single: every MIG slice is then an nvidia.com/gpu",
        )
    models: list[ModelServing] = []
    for position, entry in enumerate(document["models"]):
        where = f"{path}: models[{position}]"
        pool_names = [pool.name for pool in pools]
        if entry["pool"] not in pool_names:
            raise InputError(
                f"{where}.pool {entry['pool']!r} is not a node pool",
                hint="node pools: " + ", ".join(pool_names),
            )
        pool = next(pool for pool in pools if pool.name == entry["pool"])
        if entry["tensorParallelSize"] > pool.gpus_per_node:
            raise InputError(
                f"{where}.tensorParallelSize {entry['tensorParallelSize']} is more than the"
                f" {pool.gpus_per_node} GPUs per node of pool {pool.name}",
                hint="tensor parallelism stays inside one node's NVLink domain",
            )
        if pool.mig_config and entry["tensorParallelSize"] > 1:
            raise InputError(
                f"{where}.tensorParallelSize {entry['tensorParallelSize']} on MIG pool {pool.name}",
                hint="a MIG slice cannot join tensor parallelism; use 1, or a pool without MIG",
            )
        label = label_value(entry["name"])
        if any(label_value(model.name) == label for model in models):
            raise InputError(
                f"{where}.name {entry['name']!r} is the same as another model's in its first 63"
                " characters",
                hint="node labels carry a model's name; make the names differ earlier",
            )
        deployment = entry.get("deployment") or entry["name"].replace(".", "-")
        if any(model.deployment == deployment for model in models):
            raise InputError(
                f"{where}: deployment name {deployment!r} is used twice",
                hint="set models[].deployment to tell them apart",
            )
        secret = entry.get("apiKeySecret")
        models.append(
            ModelServing(
                name=entry["name"],
                deployment=deployment,
                pool=entry["pool"],
                tensor_parallel_size=entry["tensorParallelSize"],
                replicas=entry.get("replicas", 1),
                served_model_name=entry.get("servedModelName", ""),
                max_model_len=entry.get("maxModelLen"),
                max_num_seqs=entry.get("maxNumSeqs"),
                gpu_memory_utilization=entry.get("gpuMemoryUtilization"),
                kv_cache_dtype=entry.get("kvCacheDtype", ""),
                expected_load_seconds=parse_duration(
                    entry.get("expectedLoadTime", "10m"), what=f"{where}.expectedLoadTime"
                ),
                memory=entry.get("memory", ""),
                shm_size=entry.get("shmSize", "16Gi"),
                api_key=ApiKeySecret(secret["name"], secret.get("key", "api-key"))
                if secret
                else None,
                extra_args=tuple(entry.get("extraArgs", ())),
                image=entry.get("image", ""),
                shutdown_timeout_flag=entry.get("shutdownTimeoutFlag", True),
            )
        )
    namespace = document.get("namespace", DEFAULT_NAMESPACE)
    if namespace == document.get("prefetchNamespace", DEFAULT_PREFETCH_NAMESPACE):
        raise InputError(
            f"{path}: prefetchNamespace is the serving namespace {namespace!r}",
            hint="the agents' identity may label nodes: keep it in a namespace of its own",
        )
    timeouts = document.get("timeouts") or {}
    defaults = Timeouts()
    return Site(
        source=str(path),
        name=document["metadata"]["name"],
        namespace=document.get("namespace", DEFAULT_NAMESPACE),
        prefetch_namespace=document.get("prefetchNamespace", DEFAULT_PREFETCH_NAMESPACE),
        operator_namespace=operator.get("namespace", DEFAULT_OPERATOR_NAMESPACE),
        operator_chart=operator.get("chart", "gpu-operator"),
        driver_strategy=driver["strategy"],
        driver_repository_config_map=driver.get("repositoryConfigMap", ""),
        driver_tags=tuple(driver.get("tags", ())),
        mig_strategy=mig,
        pools=tuple(pools),
        weights=WeightsAccess(
            credentials_secret=weights.get("credentialsSecret", ""),
            endpoint=weights.get("endpoint", ""),
            region=weights.get("region", ""),
            path_style=weights.get("pathStyle", False),
            host_path=weights.get("hostPath", DEFAULT_HOST_PATH),
            keep_versions=weights.get("keepVersions", 1),
            ca_config_map=weights.get("caConfigMap", ""),
        ),
        models=tuple(models),
        timeouts=Timeouts(
            operator=_seconds(timeouts, "operator", defaults.operator, path),
            prefetch=_seconds(timeouts, "prefetch", defaults.prefetch, path),
            rollout=_seconds(timeouts, "rollout", defaults.rollout, path),
        ),
        mirror_pull_secret=(document.get("mirror") or {}).get("pullSecret", ""),
    )


def _seconds(section: dict[str, str], key: str, default: int, path: Path) -> int:
    if key not in section:
        return default
    return parse_duration(section[key], what=f"{path}: timeouts.{key}")

"""Shared fixtures: real loopback registries, generated model folders, a Kubernetes cluster.

Logic lives in tests/support; this file only wires it into pytest.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.content import SKOPEO_BINARY, write_model_folder
from support.k8s_cluster import K8S_BIN_DIR, KubeCluster, missing_k8s_tools
from support.registry_server import (
    REGISTRY_BINARY,
    RegistryServer,
    htpasswd_available,
    registry_available,
)

REGISTRY_USER = ("sealift", "test-password-1")

_NO_REGISTRY = f"{REGISTRY_BINARY} not installed (apt-get install docker-registry)"
_NO_SKOPEO = f"{SKOPEO_BINARY} not installed (apt-get install skopeo)"


def skopeo_available() -> bool:
    """Return True when skopeo is installed where the support code expects it."""
    return shutil.which(SKOPEO_BINARY) is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``registry``/``skopeo`` when the binary is missing."""
    del config
    for item in items:
        if "registry" in item.keywords and not registry_available():
            item.add_marker(pytest.mark.skip(reason=_NO_REGISTRY))
        if "skopeo" in item.keywords and not skopeo_available():
            item.add_marker(pytest.mark.skip(reason=_NO_SKOPEO))


def _serve(
    tmp_dir: Path, *, auth: tuple[str, str] | None = None, tls: bool = False
) -> Iterator[RegistryServer]:
    if not registry_available():
        pytest.skip(_NO_REGISTRY)
    with RegistryServer(work_dir=tmp_dir, auth=auth, tls=tls) as server:
        yield server


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A plain-http registry shared by the session; use a unique repository per test."""
    yield from _serve(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A plain-http registry requiring htpasswd basic auth; credentials in ``.auth``."""
    if not htpasswd_available():
        pytest.skip("htpasswd auth needs apache2-utils (htpasswd) or the bcrypt package")
    yield from _serve(tmp_path_factory.mktemp("auth-registry"), auth=REGISTRY_USER)


@pytest.fixture(scope="session")
def tls_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """An HTTPS registry with a throwaway CA; trust it via ``.ca_path`` (or ``.cert_dir``)."""
    yield from _serve(tmp_path_factory.mktemp("tls-registry"), tls=True)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A fresh two-shard HF-style model folder (see ``write_model_folder``)."""
    path = tmp_path / "model"
    write_model_folder(path)
    return path


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """One real control plane (kwokctl, binary runtime, loopback only) for the session.

    Tests share it: each makes its own namespace (``kube_ns``) and uniquely named nodes
    (``support.k8s_cluster.unique_name``), and selects its own nodes by label, since cluster-wide
    objects (nodes, DaemonSets' reach, admission policies) are visible to every test.
    """
    missing = missing_k8s_tools()
    if missing:
        pytest.skip(
            f"Kubernetes test tools not built in {K8S_BIN_DIR} ({', '.join(missing)}); "
            "run `make k8s-tools` (`make test` does)"
        )
    with KubeCluster(tmp_path_factory.mktemp("k8s")) as cluster:
        yield cluster


@pytest.fixture
def kube_ns(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace on ``kube_cluster``, deleted (without waiting) after the test."""
    namespace = kube_cluster.create_namespace("t")
    yield namespace
    kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)

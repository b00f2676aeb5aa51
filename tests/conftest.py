"""Shared fixtures: real loopback registries and generated model folders.

Logic lives in tests/support; this file only wires it into pytest.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.content import SKOPEO_BINARY, write_model_folder
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

"""Pulling from real registries: htpasswd auth from docker config.json, TLS with a test CA.

Secrets come from auth files and never appear in output or errors.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from support.content import push_layout_to_registry, write_oci_image_layout
from support.registry_server import RegistryServer

from sealift.cli import main

pytestmark = [pytest.mark.registry, pytest.mark.skopeo]


def push_small_image(tmp_path: Path, server: RegistryServer, repo: str) -> None:
    layout = tmp_path / "src"
    write_oci_image_layout(layout, ref_name="img", layers=[{"etc/hello": repo.encode()}])
    push_layout_to_registry(
        layout,
        "img",
        server.host,
        f"{repo}:1",
        creds=server.auth,
        ca_path=server.ca_path if server.ca_path else None,
    )


def bundle_file(tmp_path: Path, ref: str) -> Path:
    path = tmp_path / "sealift.yaml"
    path.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\n"
        f"metadata: {{name: src, version: '1'}}\nimages:\n  - ref: {ref}\n"
    )
    return path


def auth_file(tmp_path: Path, host: str, user: str, password: str) -> Path:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"auths": {host: {"auth": token}}}))
    return path


def create(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, ["bundle", "create", "-q", *args], env=env)


def test_credentials_come_from_an_auth_file_and_never_show(
    tmp_path: Path, auth_registry: RegistryServer
) -> None:
    assert auth_registry.auth is not None
    user, password = auth_registry.auth
    push_small_image(tmp_path, auth_registry, "auth/ok")
    spec = bundle_file(tmp_path, f"{auth_registry.host}/auth/ok:1")
    good = auth_file(tmp_path, auth_registry.host, user, password)
    result = create(
        "-f", str(spec), "-o", str(tmp_path / "b"), "--plain-http", auth_registry.host,
        "--authfile", str(good),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert password not in result.output + result.stderr
    # The same through REGISTRY_AUTH_FILE, as podman and skopeo read it.
    result = create(
        "-f", str(spec), "-o", str(tmp_path / "c"), "--plain-http", auth_registry.host,
        env={"REGISTRY_AUTH_FILE": str(good)},
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr


def test_missing_and_wrong_credentials_are_clear_remote_errors(
    tmp_path: Path, auth_registry: RegistryServer
) -> None:
    assert auth_registry.auth is not None
    user, _ = auth_registry.auth
    push_small_image(tmp_path, auth_registry, "auth/refused")
    spec = bundle_file(tmp_path, f"{auth_registry.host}/auth/refused:1")
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    result = create(
        "-f", str(spec), "-o", str(tmp_path / "b"), "--plain-http", auth_registry.host,
        "--authfile", str(empty),
    )  # fmt: skip
    assert result.exit_code == 4
    assert "requires a login" in result.stderr and "hint:" in result.stderr
    wrong_password = "not-the-password-42"
    wrong = auth_file(tmp_path, auth_registry.host, user, wrong_password)
    result = create(
        "-f", str(spec), "-o", str(tmp_path / "b"), "--plain-http", auth_registry.host,
        "--authfile", str(wrong),
    )  # fmt: skip
    assert result.exit_code == 4
    assert "refused the credentials" in result.stderr
    assert wrong_password not in result.stderr + result.output
    assert not (tmp_path / "b" / "sealift-bundle.json").exists()


def test_tls_registry_needs_its_ca(tmp_path: Path, tls_registry: RegistryServer) -> None:
    assert tls_registry.ca_path is not None
    push_small_image(tmp_path, tls_registry, "tls/img")
    spec = bundle_file(tmp_path, f"{tls_registry.host}/tls/img:1")
    # REQUESTS_CA_BUNDLE must not override an explicit --ca-file, nor rescue a missing one.
    env = {"REQUESTS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt"}
    result = create("-f", str(spec), "-o", str(tmp_path / "no-ca"), env=env)
    assert result.exit_code == 4
    assert "TLS certificate not trusted" in result.stderr and "--ca-file" in result.stderr
    result = create(
        "-f", str(spec), "-o", str(tmp_path / "ok"), "--ca-file", str(tls_registry.ca_path), env=env
    )
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "ok" / "sealift-bundle.json").exists()


def test_plain_http_is_used_only_when_asked(tmp_path: Path, registry: RegistryServer) -> None:
    push_small_image(tmp_path, registry, "plain/img")
    spec = bundle_file(tmp_path, f"{registry.host}/plain/img:1")
    result = create("-f", str(spec), "-o", str(tmp_path / "b"))
    assert result.exit_code == 4
    assert "--plain-http" in result.stderr

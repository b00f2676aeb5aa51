"""Bearer-token auth against a real Distribution registry configured with ``auth: token:``.

The registry trusts only JWTs signed by our token service (tests/support/token_server.py), the
flow of Docker Hub, Harbor, GitLab and Quay. sealift must answer the registry's challenge, fetch
tokens with the right scopes, pull and push with them, and never show a secret.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from support.content import (
    push_layout_to_registry,
    sha256_digest,
    skopeo_inspect_raw,
    write_oci_image_layout,
)
from support.registry_server import loopback_session, registry_available
from support.token_server import TokenRegistryServer, TokenServer

from sealift.cli import main
from sealift.docker_auth import Credentials
from sealift.registry_client import RegistryClient

pytestmark = [pytest.mark.registry, pytest.mark.skopeo]

USER = ("token-user", "token-password-7")
IDENTITY_TOKEN = "refresh-7f3a9c"  # docker's identitytoken, exchanged with grant_type=refresh_token


@pytest.fixture(autouse=True)
def _work_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # install appends its audit log to ./sealift-audit.jsonl by default: keep it out of the repo.
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenRegistryServer]:
    if not registry_available():
        pytest.skip("docker-registry not installed")
    server = TokenRegistryServer(
        auth=USER,
        refresh_tokens={IDENTITY_TOKEN: USER[0]},
        work_dir=tmp_path_factory.mktemp("token-registry"),
    )
    with server:
        yield server


@pytest.fixture(scope="module")
def source_image(
    tmp_path_factory: pytest.TempPathFactory, token_registry: TokenRegistryServer
) -> str:
    """``token/src:1`` pushed with skopeo, which speaks token auth itself."""
    layout = tmp_path_factory.mktemp("src") / "layout"
    write_oci_image_layout(layout, ref_name="img", layers=[{"etc/hello": b"token auth"}])
    push_layout_to_registry(layout, "img", token_registry.host, "token/src:1", creds=USER)
    return "token/src:1"


def auth_file(tmp_path: Path, host: str, entry: dict[str, str]) -> Path:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"auths": {host: entry}}))
    return path


def basic_entry(user: str, password: str) -> dict[str, str]:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def bundle_file(tmp_path: Path, ref: str) -> Path:
    path = tmp_path / "sealift.yaml"
    path.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\n"
        f"metadata: {{name: src, version: '1'}}\nimages:\n  - ref: {ref}\n"
    )
    return path


def create(registry: TokenRegistryServer, spec: Path, out: Path, authfile: Path) -> Result:
    return CliRunner().invoke(
        main,
        ["bundle", "create", "-q", "-f", str(spec), "-o", str(out),
         "--plain-http", registry.host, "--authfile", str(authfile)],
    )  # fmt: skip


def install(bundle: Path, target: str, password: str) -> Result:
    return CliRunner().invoke(
        main,
        ["install", str(bundle), "--registry", target, "--insecure", "-q", "--json",
         "--username", USER[0], "--password-stdin"],
        input=password + "\n",
    )  # fmt: skip


def test_the_registry_only_takes_tokens_signed_by_its_token_service(
    token_registry: TokenRegistryServer, tmp_path: Path
) -> None:
    """The harness is not vacuous: a well-formed token from another key is refused."""
    url = f"{token_registry.url}/v2/token/x/tags/list"
    session = loopback_session()
    challenge = session.get(url, timeout=10)
    assert challenge.status_code == 401
    assert challenge.headers["WWW-Authenticate"].startswith("Bearer realm=")
    scope = [("repository", "token/x", ["pull"])]
    forger = TokenServer(tmp_path / "forger", users={})
    forged = forger.issue("mallory", scope, token_registry.token_server.service)
    good = token_registry.token_server.issue("u", scope, token_registry.token_server.service)
    refused = session.get(url, headers={"Authorization": f"Bearer {forged}"}, timeout=10)
    assert refused.status_code == 401
    # Authorized; the repository just does not exist.
    allowed = session.get(url, headers={"Authorization": f"Bearer {good}"}, timeout=10)
    assert allowed.status_code == 404


def test_bundle_create_pulls_with_a_token_from_the_auth_file(
    token_registry: TokenRegistryServer, source_image: str, tmp_path: Path
) -> None:
    tokens = token_registry.token_server
    tokens.clear()
    spec = bundle_file(tmp_path, f"{token_registry.host}/{source_image}")
    authfile = auth_file(tmp_path, token_registry.host, basic_entry(*USER))
    result = create(token_registry, spec, tmp_path / "b", authfile)
    assert result.exit_code == 0, result.stderr
    assert USER[1] not in result.output + result.stderr
    assert "repository:token/src:pull" in tokens.scopes_granted()
    assert all(r.user == USER[0] and r.method == "GET" for r in tokens.requests)
    assert not tokens.refused()
    manifest = json.loads((tmp_path / "b" / "sealift-bundle.json").read_text())
    pulled = next(a for a in manifest["artifacts"] if a["kind"] == "image")
    raw = skopeo_inspect_raw(f"docker://{token_registry.host}/{source_image}", creds=USER)
    assert pulled["digest"] == sha256_digest(raw)


def test_bundle_create_exchanges_a_docker_identity_token(
    token_registry: TokenRegistryServer, source_image: str, tmp_path: Path
) -> None:
    """docker config.json ``identitytoken`` goes to the realm as an OAuth2 refresh token."""
    tokens = token_registry.token_server
    tokens.clear()
    spec = bundle_file(tmp_path, f"{token_registry.host}/{source_image}")
    authfile = auth_file(tmp_path, token_registry.host, {"identitytoken": IDENTITY_TOKEN})
    result = create(token_registry, spec, tmp_path / "b", authfile)
    assert result.exit_code == 0, result.stderr
    assert IDENTITY_TOKEN not in result.output + result.stderr
    assert tokens.requests and all(
        r.method == "POST" and r.grant == "refresh_token" for r in tokens.requests
    )
    assert "repository:token/src:pull" in tokens.scopes_granted()


def test_install_pushes_and_mounts_with_tokens(
    token_registry: TokenRegistryServer, tmp_path: Path
) -> None:
    layout = tmp_path / "layout"
    base = {"usr/lib/base.so": b"shared base layer" * 1000}
    write_oci_image_layout(layout, ref_name="a", layers=[base, {"app/a": b"a"}])
    write_oci_image_layout(layout, ref_name="b", layers=[base, {"app/b": b"b"}])
    spec = tmp_path / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: m, version: '1'}\n"
        "images:\n  - {layout: ./layout, sourceRef: a, ref: team/a:1}\n"
        "  - {layout: ./layout, sourceRef: b, ref: team/b:1}\n"
    )
    bundle = tmp_path / "bundle"
    made = CliRunner().invoke(main, ["bundle", "create", "-q", "-f", str(spec), "-o", str(bundle)])
    assert made.exit_code == 0, made.stderr
    tokens = token_registry.token_server
    tokens.clear()

    result = install(bundle, f"{token_registry.host}/mirror", USER[1])
    assert result.exit_code == 0, result.stderr
    assert USER[1] not in result.output + result.stderr
    assert json.loads(result.stdout)["mirror"]["blobs_mounted"] >= 1
    granted = tokens.scopes_granted()
    assert "repository:mirror/team/a:pull,push" in granted
    assert "repository:mirror/team/b:pull,push" in granted
    assert not tokens.refused()
    manifest = json.loads((bundle / "sealift-bundle.json").read_text())
    for artifact in (a for a in manifest["artifacts"] if a["kind"] == "image"):
        ref = f"docker://{token_registry.host}/mirror/{artifact['ref']}"
        assert sha256_digest(skopeo_inspect_raw(ref, creds=USER)) == artifact["digest"]


def test_a_wrong_password_is_refused_by_the_token_service_in_one_line(
    token_registry: TokenRegistryServer, source_image: str, tmp_path: Path
) -> None:
    tokens = token_registry.token_server
    wrong = "not-the-token-password-9"
    spec = bundle_file(tmp_path, f"{token_registry.host}/{source_image}")
    tokens.clear()
    pulled = create(
        token_registry,
        spec,
        tmp_path / "b",
        auth_file(tmp_path, token_registry.host, basic_entry(USER[0], wrong)),
    )
    assert pulled.exit_code == 4, pulled.output
    assert tokens.refused() and not tokens.scopes_granted()
    assert not (tmp_path / "b" / "sealift-bundle.json").exists()

    layout = tmp_path / "layout"
    write_oci_image_layout(layout, ref_name="a", layers=[{"app/a": b"refused"}])
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: m, version: '1'}\n"
        "images:\n  - {layout: ./layout, sourceRef: a, ref: team/refused:1}\n"
    )
    bundle = tmp_path / "bundle"
    made = CliRunner().invoke(main, ["bundle", "create", "-q", "-f", str(spec), "-o", str(bundle)])
    assert made.exit_code == 0, made.stderr
    tokens.clear()
    pushed = install(bundle, f"{token_registry.host}/mirror", wrong)
    assert pushed.exit_code == 4, pushed.output
    assert tokens.refused() and not tokens.scopes_granted()

    for result in (pulled, pushed):
        errors = [line for line in result.stderr.splitlines() if "refused the credentials" in line]
        assert len(errors) == 1, result.stderr
        assert token_registry.host in errors[0]
        assert "hint:" in result.stderr
        assert wrong not in result.output + result.stderr


def test_an_expired_token_is_fetched_again_not_reported_as_refused_credentials(
    token_registry: TokenRegistryServer, source_image: str
) -> None:
    """Registries issue short-lived tokens (Docker Hub: 300 s); a long install outlives them."""
    tokens = token_registry.token_server
    saved, tokens.token_ttl_s = tokens.token_ttl_s, -58  # valid for ~2 s with the 60 s leeway
    try:
        client = RegistryClient(
            token_registry.host, plain_http=True, credentials=Credentials(*USER)
        )
        repository, tag = source_image.split(":")
        first = client.get_manifest(repository, tag)
        time.sleep(3)
        tokens.clear()
        assert client.get_manifest(repository, tag).digest == first.digest
        assert "repository:token/src:pull" in tokens.scopes_granted()
    finally:
        tokens.token_ttl_s = saved

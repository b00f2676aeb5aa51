"""sealift install into a real registry (Debian's docker-registry) and a real S3 API (moto).

Every byte is checked where it lands: skopeo reads the mirror back, boto3 reads the store. A
faulty network and kill -9 at random points still end in the same mirror as a clean run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner, Result
from support.content import push_layout_to_registry, write_oci_image_layout
from support.fault_proxy import FaultProxy
from support.pki import write_key_pair
from support.registry_server import RegistryServer
from support.release import make_release
from support.s3_server import CREDENTIALS, S3Server, moto_server_binary
from support.slow_proxy import SlowProxy

from sealift.cli import main

pytestmark = [pytest.mark.registry, pytest.mark.skopeo]
SEALIFT = str(Path(sys.executable).with_name("sealift"))
SKOPEO = "/usr/bin/skopeo"


@pytest.fixture(autouse=True)
def _work_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # install appends its audit log to ./sealift-audit.jsonl by default: keep it out of the repo.
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    if moto_server_binary() is None:
        pytest.skip("moto_server not installed")
    with S3Server() as server:
        yield server


@pytest.fixture(scope="module")
def signed_bundle(tmp_path_factory: pytest.TempPathFactory, registry: RegistryServer) -> dict:
    root = tmp_path_factory.mktemp("install")
    release = make_release(root / "release", registry.host, repo_prefix="src")
    keys = write_key_pair(root, "vendor")
    bundle = root / "bundle"
    result = CliRunner().invoke(
        main,
        ["bundle", "create", "-f", str(release.bundle_file), "-o", str(bundle), "-q",
         "--plain-http", registry.host, "--sign-key", str(keys.key)],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((bundle / "sealift-bundle.json").read_text())
    return {"root": root, "bundle": bundle, "pub": keys.public, "manifest": manifest}


def env() -> dict[str, str]:
    return {**CREDENTIALS, "AWS_ENDPOINT_URL": ""}


def install(
    bundle: Path,
    registry: str,
    s3: S3Server | None,
    bucket: str,
    *extra: str,
    stdin: str | None = None,
) -> Result:
    args = ["install", str(bundle), "--registry", registry, "--insecure", "-q", "-j", "3"]
    if s3 is not None:
        args += ["--weights", f"s3://{bucket}/llm", "--s3-endpoint", s3.endpoint]
    return CliRunner().invoke(main, [*args, *extra], env=env(), input=stdin)


def make_bucket(s3: S3Server, name: str) -> str:
    s3.client().create_bucket(Bucket=name)
    return name


def mirror_digest(host: str, reference: str) -> str:
    raw = subprocess.run(
        [SKOPEO, "inspect", "--raw", "--tls-verify=false", f"docker://{host}/{reference}"],
        check=True,
        capture_output=True,
    ).stdout
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def tags(registry: RegistryServer, repository: str) -> list[str]:
    response = requests.get(f"{registry.url}/v2/{repository}/tags/list", timeout=10)
    return (response.json().get("tags") or []) if response.status_code == 200 else []


def mirrored(manifest: dict) -> list[dict]:
    return [a for a in manifest["artifacts"] if a["kind"] in ("image", "chart", "sbom")]


def test_install_loads_mirror_and_store_and_a_rerun_moves_nothing(
    signed_bundle: dict, registry: RegistryServer, s3: S3Server, tmp_path: Path
) -> None:
    bucket = make_bucket(s3, "models-a")
    audit = tmp_path / "audit.jsonl"
    target = f"{registry.host}/mirror-a"
    result = install(
        signed_bundle["bundle"], target, s3, bucket,
        "--trust", str(signed_bundle["pub"]), "--audit-log", str(audit), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    first = json.loads(result.stdout)
    assert first["mirror"]["tags_written"] == len(mirrored(signed_bundle["manifest"]))
    for artifact in mirrored(signed_bundle["manifest"]):
        assert mirror_digest(target, artifact["ref"]) == artifact["digest"], artifact["ref"]
    client = s3.client()
    model = next(a for a in signed_bundle["manifest"]["artifacts"] if a["kind"] == "model")
    manifest = json.loads(
        (signed_bundle["bundle"] / "blobs/sha256" / model["digest"][7:]).read_bytes()
    )
    base = f"llm/{model['name']}/{model['version']}"
    for layer in manifest["layers"]:
        key = f"{base}/{layer['annotations']['org.cncf.model.filepath']}"
        head = client.head_object(Bucket=bucket, Key=key)
        assert head["Metadata"]["sha256"] == layer["digest"][7:]
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert "sha256:" + hashlib.sha256(body).hexdigest() == layer["digest"]
    client.head_object(Bucket=bucket, Key=f"{base}/.sealift/model-manifest.json")
    client.head_object(Bucket=bucket, Key=f"{base}/.sealift/signatures/vendor.sig")
    actions = [json.loads(line)["action"] for line in audit.read_text().splitlines()]
    assert actions[0] == "install-start" and actions[-1] == "install-done"
    assert "blob-uploaded" in actions and "tag-written" in actions and "object-uploaded" in actions
    # The tags come after every blob and object; the model manifests after the tags.
    assert max(i for i, a in enumerate(actions) if a in ("blob-uploaded", "object-uploaded")) < min(
        i for i, a in enumerate(actions) if a == "tag-written"
    )
    again = install(
        signed_bundle["bundle"], target, s3, bucket, "--trust", str(signed_bundle["pub"]), "--json",
        "--audit-log", str(tmp_path / "again.jsonl"),
    )  # fmt: skip
    assert again.exit_code == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["mirror"]["bytes_uploaded"] == 0 and second["mirror"]["tags_written"] == 0
    assert second["store"]["uploaded"] == 0 and second["store"]["bytes_uploaded"] == 0


def test_blobs_shared_between_repositories_are_mounted_not_sent_twice(
    registry: RegistryServer, tmp_path: Path
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
    assert (
        CliRunner().invoke(main, ["bundle", "create", "-f", str(spec), "-o", str(bundle)]).exit_code
        == 0
    )
    result = install(bundle, f"{registry.host}/mount-test", None, "", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["mirror"]["blobs_mounted"] >= 1


def test_credentials_from_stdin_never_show(
    signed_bundle: dict, auth_registry: RegistryServer, tmp_path: Path
) -> None:
    assert auth_registry.auth is not None
    user, password = auth_registry.auth
    audit = tmp_path / "audit.jsonl"
    result = install(
        signed_bundle["bundle"], f"{auth_registry.host}/m", None, "",
        "--username", user, "--password-stdin", "--audit-log", str(audit), stdin=password + "\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert password not in result.output + result.stderr + audit.read_text()
    wrong = install(
        signed_bundle["bundle"], f"{auth_registry.host}/m", None, "",
        "--username", user, "--password-stdin", stdin="not-it\n",
    )  # fmt: skip
    assert wrong.exit_code == 4 and "refused the credentials" in wrong.stderr
    assert "not-it" not in wrong.stderr


def test_tls_mirror_with_its_ca(signed_bundle: dict, tls_registry: RegistryServer) -> None:
    assert tls_registry.ca_path is not None
    args = ["install", str(signed_bundle["bundle"]), "--registry", f"{tls_registry.host}/m", "-q"]
    refused = CliRunner().invoke(main, args, env=env())
    assert refused.exit_code == 4 and "--ca-file" in refused.stderr
    result = CliRunner().invoke(main, [*args, "--ca-file", str(tls_registry.ca_path)], env=env())
    assert result.exit_code == 0, result.stderr


def test_an_existing_tag_with_another_digest_follows_the_tag_policy(
    signed_bundle: dict, registry: RegistryServer, tmp_path: Path
) -> None:
    target = f"{registry.host}/policy"
    image = next(a for a in signed_bundle["manifest"]["artifacts"] if a["kind"] == "image")
    other = tmp_path / "other"
    write_oci_image_layout(other, ref_name="x", layers=[{"other": b"another image"}])
    push_layout_to_registry(other, "x", registry.host, f"policy/{image['ref']}")
    before = mirror_digest(target, image["ref"])
    refused = install(signed_bundle["bundle"], target, None, "")
    assert refused.exit_code == 2 and "already points at" in refused.stderr
    assert mirror_digest(target, image["ref"]) == before
    kept = install(signed_bundle["bundle"], target, None, "", "--existing-tags", "skip")
    assert kept.exit_code == 0 and mirror_digest(target, image["ref"]) == before
    replaced = install(signed_bundle["bundle"], target, None, "", "--existing-tags", "overwrite")
    assert replaced.exit_code == 0
    assert mirror_digest(target, image["ref"]) == image["digest"]


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_damaged_layer_leaves_no_tag_and_no_model_manifest(
    signed_bundle: dict, registry: RegistryServer, s3: S3Server, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(signed_bundle["bundle"], bundle)
    image = next(a for a in signed_bundle["manifest"]["artifacts"] if a["kind"] == "image")
    layer = json.loads((bundle / "blobs/sha256" / image["digest"][7:]).read_bytes())["layers"][0]
    flip_byte(bundle / "blobs/sha256" / layer["digest"][7:])
    bucket = make_bucket(s3, "models-damaged")
    result = install(bundle, f"{registry.host}/damaged", s3, bucket)
    assert result.exit_code == 3, result.stderr
    assert layer["digest"] in result.stderr and image["ref"] in result.stderr
    assert "blobs/sha256" in result.stderr  # where it lives
    for artifact in mirrored(signed_bundle["manifest"]):
        assert tags(registry, f"damaged/{artifact['ref'].rsplit(':', 1)[0]}") == []
    listed = s3.client().list_objects_v2(Bucket=bucket).get("Contents", [])
    assert not [o for o in listed if o["Key"].endswith("model-manifest.json")]


def test_a_damaged_weight_leaves_no_tag_and_no_model_manifest(
    signed_bundle: dict, registry: RegistryServer, s3: S3Server, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(signed_bundle["bundle"], bundle)
    model = next(a for a in signed_bundle["manifest"]["artifacts"] if a["kind"] == "model")
    layers = json.loads((bundle / "blobs/sha256" / model["digest"][7:]).read_bytes())["layers"]
    weight = max(layers, key=lambda layer: layer["size"])
    flip_byte(bundle / "blobs/sha256" / weight["digest"][7:])
    bucket = make_bucket(s3, "models-damaged-weight")
    result = install(bundle, f"{registry.host}/damaged-weight", s3, bucket)
    assert result.exit_code == 3, result.stderr
    assert weight["annotations"]["org.cncf.model.filepath"] in result.stderr
    for artifact in mirrored(signed_bundle["manifest"]):
        assert tags(registry, f"damaged-weight/{artifact['ref'].rsplit(':', 1)[0]}") == []
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert not [k for k in keys if "model-manifest" in k or k.endswith(".sig")]
    assert not [k for k in keys if k.endswith(weight["annotations"]["org.cncf.model.filepath"])]


def test_an_unsigned_or_wrongly_signed_bundle_moves_nothing(
    signed_bundle: dict, registry: RegistryServer, tmp_path: Path
) -> None:
    other = write_key_pair(tmp_path, "other")
    result = install(
        signed_bundle["bundle"], f"{registry.host}/unsigned", None, "", "--trust", str(other.public)
    )
    assert result.exit_code == 3 and "not signed as" in result.stderr
    response = requests.get(f"{registry.url}/v2/_catalog", timeout=10).json()
    assert not [r for r in response.get("repositories", []) if r.startswith("unsigned/")]


def test_preflight_failures_are_clear(signed_bundle: dict, s3: S3Server, tmp_path: Path) -> None:
    unreachable = install(signed_bundle["bundle"], "127.0.0.1:9", None, "")
    assert unreachable.exit_code == 4 and "unreachable" in unreachable.stderr
    missing = CliRunner().invoke(
        main,
        ["install", str(signed_bundle["bundle"]), "--weights", "s3://no-such-bucket/x",
         "--s3-endpoint", s3.endpoint, "-q"],
        env=env(),
    )  # fmt: skip
    assert missing.exit_code == 4 and "bucket does not exist" in missing.stderr
    no_credentials = CliRunner().invoke(
        main,
        ["install", str(signed_bundle["bundle"]), "--weights", "s3://models-a/x",
         "--s3-endpoint", s3.endpoint, "-q"],
        env={"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
             "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
             "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"},
    )  # fmt: skip
    assert no_credentials.exit_code == 4 and "credentials" in no_credentials.stderr


def test_a_faulty_network_still_ends_in_a_complete_mirror(
    signed_bundle: dict, registry: RegistryServer
) -> None:
    with FaultProxy(registry.host, seed=7, rate=0.35, budget=25) as proxy:
        result = install(signed_bundle["bundle"], f"{proxy.host}/faulty", None, "")
        assert result.exit_code == 0, result.stderr
        assert len(proxy.injected) >= 5
    for artifact in mirrored(signed_bundle["manifest"]):
        assert mirror_digest(f"{registry.host}/faulty", artifact["ref"]) == artifact["digest"]


def test_chunked_uploads_survive_a_faulty_network(
    signed_bundle: dict, registry: RegistryServer
) -> None:
    # Chunks of 64 KiB make every model blob a multi-chunk upload; Distribution 2.8 forgets an
    # upload session after an interrupted PATCH, so each failed blob starts again from byte 0.
    with FaultProxy(registry.host, seed=5, rate=0.3, budget=20) as proxy:
        result = install(
            signed_bundle["bundle"], f"{proxy.host}/chunked", None, "",
            "--push-models", "--chunk-size", "64KiB",
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        patches = [r for r in proxy.requests if r[0] == "PATCH"]
        assert len(patches) > 10 and len(proxy.injected) >= 5
    for artifact in signed_bundle["manifest"]["artifacts"]:
        if artifact["kind"] in ("image", "chart", "sbom", "model"):
            assert mirror_digest(f"{registry.host}/chunked", artifact["ref"]) == artifact["digest"]


def mirror_state(registry: RegistryServer, prefix: str, manifest: dict) -> dict[str, str]:
    state = {}
    for artifact in mirrored(manifest):
        repository, _, tag = artifact["ref"].rpartition(":")
        if tag in tags(registry, f"{prefix}/{repository}"):
            state[artifact["ref"]] = mirror_digest(f"{registry.host}/{prefix}", artifact["ref"])
    return state


@pytest.mark.parametrize("kill_after", [0.3, 0.8, 1.5])
def test_kill_9_at_any_point_then_a_rerun_ends_in_the_clean_mirror(
    signed_bundle: dict, registry: RegistryServer, kill_after: float
) -> None:
    prefix = f"killed-{int(kill_after * 10)}"
    with SlowProxy(registry.host, rate=64 * 1024) as proxy:
        process = subprocess.Popen(
            [SEALIFT, "install", str(signed_bundle["bundle"]),
             "--registry", f"{proxy.host}/{prefix}", "--insecure", "-q"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env()},
        )  # fmt: skip
        time.sleep(kill_after)
        process.send_signal(signal.SIGKILL)
        process.wait()
    # Whatever the kill left, a tag never points at missing blobs: skopeo can read each one.
    for reference, digest in mirror_state(registry, prefix, signed_bundle["manifest"]).items():
        expected = next(a for a in signed_bundle["manifest"]["artifacts"] if a["ref"] == reference)
        assert digest == expected["digest"]
        subprocess.run(
            [SKOPEO, "copy", "--src-tls-verify=false", "--insecure-policy",
             f"docker://{registry.host}/{prefix}/{reference}", "oci:/dev/null/x"],
            capture_output=True, check=False,
        )  # fmt: skip
    result = install(signed_bundle["bundle"], f"{registry.host}/{prefix}", None, "")
    assert result.exit_code == 0, result.stderr
    expected_state = {a["ref"]: a["digest"] for a in mirrored(signed_bundle["manifest"])}
    assert mirror_state(registry, prefix, signed_bundle["manifest"]) == expected_state


def test_uploads_carry_sha256_checksums_for_the_server_to_verify(
    registry: RegistryServer, s3: S3Server, tmp_path: Path
) -> None:
    from support.content import write_model_folder

    write_model_folder(tmp_path / "model", shards=1, shard_size=20 * 1024 * 1024, seed=3)
    spec = tmp_path / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: big, version: '1'}\n"
        "models:\n  - {name: big, version: '1', path: ./model}\n"
    )
    bundle = tmp_path / "bundle"
    assert (
        CliRunner().invoke(main, ["bundle", "create", "-f", str(spec), "-o", str(bundle)]).exit_code
        == 0
    )
    bucket = make_bucket(s3, "models-checksums")
    # moto stores no checksums, so look at what sealift sends, through a recording proxy.
    with FaultProxy(s3.endpoint.removeprefix("http://"), rate=0.0) as proxy:
        result = CliRunner().invoke(
            main,
            ["install", str(bundle), "--weights", f"s3://{bucket}/llm",
             "--s3-endpoint", f"http://{proxy.host}", "--s3-path-style", "-q"],
            env=env(),
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        sent = {
            (m, p.split("?")[0] + ("?uploads" if p.endswith("?uploads") else "")): {
                k.lower(): v for k, v in h.items()
            }
            for m, p, h in proxy.requests
            if m in ("PUT", "POST")
        }
    config = (tmp_path / "model" / "config.json").read_bytes()
    small = sent[("PUT", f"/{bucket}/llm/big/1/config.json")]
    import base64

    assert (
        small["x-amz-checksum-sha256"] == base64.b64encode(hashlib.sha256(config).digest()).decode()
    )
    assert small["x-amz-meta-sha256"] == hashlib.sha256(config).hexdigest()
    create = sent[("POST", f"/{bucket}/llm/big/1/model.safetensors?uploads")]
    assert create.get("x-amz-checksum-algorithm") == "SHA256"  # per-part checksums
    parts = [h for (m, p), h in sent.items() if m == "PUT" and p.endswith("model.safetensors")]
    assert parts and all("x-amz-checksum-sha256" in h for h in parts)

"""Sigstore keyless signatures verified offline against a trusted_root.json, by identity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.content import write_model_folder
from support.fake_sigstore import FakeSigstore

from sealift.cli import main
from sealift.progress import Progress
from sealift.signing.model_manifest import ModelManifest
from sealift.signing.weights import hash_folder

pytest.importorskip("sigstore")

IDENTITY = "release@vendor.example"
ISSUER = "https://accounts.vendor.example"


@pytest.fixture(scope="module")
def sigstore_instance() -> FakeSigstore:
    return FakeSigstore()


def signed_folder(tmp_path: Path, instance: FakeSigstore, *, identity: str = IDENTITY) -> Path:
    folder = tmp_path / "model"
    write_model_folder(folder, shards=1, shard_size=64 * 1024)
    digests, _, _ = hash_folder(folder, jobs=1, progress=Progress())
    statement = ModelManifest.build("model", digests).statement()
    (tmp_path / "model.sig").write_bytes(instance.sign_dsse(statement, identity, ISSUER))
    (tmp_path / "trusted_root.json").write_bytes(instance.trusted_root())
    return folder


def policy(
    tmp_path: Path,
    *,
    identity: str = IDENTITY,
    issuer: str = ISSUER,
    root: str = "trusted_root.json",
) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: TrustPolicy\nsigners:\n"
        "  - name: vendor\n"
        f"    keyless: {{trustedRoot: {root}, identity: {identity}, issuer: '{issuer}'}}\n"
        "weights: {required: [vendor]}\n"
    )
    return path


def verify(folder: Path, policy_path: Path) -> object:
    return CliRunner().invoke(
        main, ["weights", "verify", str(folder), "--policy", str(policy_path), "-q"]
    )


def test_a_keyless_signature_verifies_offline_for_the_named_identity(
    tmp_path: Path, sigstore_instance: FakeSigstore
) -> None:
    folder = signed_folder(tmp_path, sigstore_instance)
    result = verify(folder, policy(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert f"keyless {IDENTITY}" in result.stdout


@pytest.mark.parametrize(
    ("identity", "issuer"),
    [("someone@else.example", ISSUER), (IDENTITY, "https://other-issuer.example")],
)
def test_another_identity_or_issuer_is_refused(
    tmp_path: Path, sigstore_instance: FakeSigstore, identity: str, issuer: str
) -> None:
    folder = signed_folder(tmp_path, sigstore_instance)
    result = verify(folder, policy(tmp_path, identity=identity, issuer=issuer))
    assert result.exit_code == 3
    assert "keyless signature is not" in result.stderr and "hint:" in result.stderr


def test_a_signature_under_another_sigstore_instance_is_refused(
    tmp_path: Path, sigstore_instance: FakeSigstore
) -> None:
    folder = signed_folder(tmp_path, sigstore_instance)
    (tmp_path / "other_root.json").write_bytes(FakeSigstore().trusted_root())
    result = verify(folder, policy(tmp_path, root="other_root.json"))
    assert result.exit_code == 3


def test_modified_weights_under_a_valid_keyless_signature_are_refused(
    tmp_path: Path, sigstore_instance: FakeSigstore
) -> None:
    folder = signed_folder(tmp_path, sigstore_instance)
    with (folder / "config.json").open("a") as handle:
        handle.write(" ")
    result = verify(folder, policy(tmp_path))
    assert result.exit_code == 3 and "config.json was modified" in result.stderr


def test_a_tampered_transparency_log_entry_is_refused(
    tmp_path: Path, sigstore_instance: FakeSigstore
) -> None:
    folder = signed_folder(tmp_path, sigstore_instance)
    signature = json.loads((tmp_path / "model.sig").read_text())
    entry = signature["verificationMaterial"]["tlogEntries"][0]
    entry["integratedTime"] = str(int(entry["integratedTime"]) + 1)
    (tmp_path / "model.sig").write_text(json.dumps(signature))
    assert verify(folder, policy(tmp_path)).exit_code == 3


def keyless_bundle(tmp_path: Path, instance: FakeSigstore, root: bytes) -> Path:
    """A bundle that carries a trusted_root.json and a keyless signature over its model."""
    write_model_folder(tmp_path / "model", shards=1, shard_size=32 * 1024)
    (tmp_path / "trusted_root.json").write_bytes(root)
    spec = tmp_path / "sealift.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: k, version: '1'}\n"
        "models:\n  - {name: m, version: '1', path: ./model}\n"
        "files:\n  - {path: ./trusted_root.json}\n"
    )
    bundle = tmp_path / "bundle"
    assert (
        CliRunner().invoke(main, ["bundle", "create", "-f", str(spec), "-o", str(bundle)]).exit_code
        == 0
    )
    digests, _, _ = hash_folder(tmp_path / "model", jobs=1, progress=Progress())
    statement = ModelManifest.build("m:1", digests).statement()
    signature = bundle / "signatures/models/m/1/vendor.sig"
    signature.parent.mkdir(parents=True)
    signature.write_bytes(instance.sign_dsse(statement, IDENTITY, ISSUER))
    return bundle


def pinned_policy(tmp_path: Path, digest: str) -> Path:
    path = tmp_path / "pinned.yaml"
    path.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: TrustPolicy\nsigners:\n  - name: vendor\n"
        f"    keyless: {{trustedRootDigest: '{digest}', identity: {IDENTITY},"
        f" issuer: '{ISSUER}'}}\n"
        "weights: {required: [vendor]}\n"
    )
    return path


def test_a_trusted_root_carried_in_the_bundle_is_used_only_when_the_policy_pins_it(
    tmp_path: Path, sigstore_instance: FakeSigstore
) -> None:
    root = sigstore_instance.trusted_root()
    bundle = keyless_bundle(tmp_path, sigstore_instance, root)
    pinned = pinned_policy(tmp_path, "sha256:" + hashlib.sha256(root).hexdigest())
    result = CliRunner().invoke(
        main, ["weights", "verify", str(bundle), "--policy", str(pinned), "-q"]
    )
    assert result.exit_code == 0, result.stderr
    # An attacker's bundle brings its own Sigstore: its root does not have the pinned digest.
    attacker = FakeSigstore()
    forged = keyless_bundle(tmp_path / "forged", attacker, attacker.trusted_root())
    result = CliRunner().invoke(
        main, ["weights", "verify", str(forged), "--policy", str(pinned), "-q"]
    )
    assert result.exit_code == 3
    assert "the policy pins" in result.stderr and "hint:" in result.stderr

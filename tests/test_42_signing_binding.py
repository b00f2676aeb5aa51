"""A signature vouches for one model at one version, and resign vouches only for what it checked."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner, Result
from support.content import write_model_folder
from support.pki import write_key_pair

from sealift.cli import main


def bundle(root: Path, version: str, key: Path | None) -> Path:
    """A one-model bundle; the model's files are the same whatever the version."""
    if not (root / "model").exists():
        write_model_folder(root / "model", shards=1, shard_size=16 * 1024)
    spec = root / f"sealift-{version}.yaml"
    spec.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: Bundle\n"
        f"metadata: {{name: rel, version: '{version}'}}\n"
        f"models:\n  - {{name: m, version: '{version}', path: ./model}}\n"
    )
    out = root / f"bundle-{version}"
    args = ["bundle", "create", "-f", str(spec), "-o", str(out), "-q"]
    if key is not None:
        args += ["--sign-key", str(key)]
    assert CliRunner().invoke(main, args).exit_code == 0
    return out


def weights_verify(target: Path, pub: Path) -> Result:
    return CliRunner().invoke(main, ["weights", "verify", str(target), "--trust", str(pub), "-q"])


def test_a_signature_for_another_version_of_the_same_weights_is_refused(tmp_path: Path) -> None:
    keys = write_key_pair(tmp_path, "vendor")
    old = bundle(tmp_path, "1", keys.key)
    new = bundle(tmp_path, "2", None)
    # Same files, so the digests match: only the signed name:version tells the versions apart.
    target = new / "signatures/models/m/2/vendor.sig"
    target.parent.mkdir(parents=True)
    shutil.copy(old / "signatures/models/m/1/vendor.sig", target)
    result = weights_verify(new, keys.public)
    assert result.exit_code == 3, result.stderr
    assert "'m:1'" in result.stderr and "'m:2'" in result.stderr and "hint:" in result.stderr
    assert weights_verify(old, keys.public).exit_code == 0


def test_resign_under_a_weights_only_policy_does_not_vouch_for_the_bundle(tmp_path: Path) -> None:
    vendor = write_key_pair(tmp_path, "vendor")
    customer = write_key_pair(tmp_path, "customer")
    signed = bundle(tmp_path, "1", vendor.key)
    policy = tmp_path / "weights-only.yaml"
    policy.write_text(
        "apiVersion: sealift.dev/v1alpha1\nkind: TrustPolicy\n"
        f"signers:\n  - {{name: vendor, key: {vendor.public}}}\n"
        "weights: {required: [vendor]}\n"
    )
    result = CliRunner().invoke(
        main,
        [
            "weights",
            "resign",
            str(signed),
            "--policy",
            str(policy),
            "--key",
            str(customer.key),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert (signed / "signatures/models/m/1/customer.sig").exists()
    # The bundle manifest's images and charts were never checked: no signature over them.
    assert not (signed / "signatures/bundle/customer.sig").exists()

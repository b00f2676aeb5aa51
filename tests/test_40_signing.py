"""Signed weights and bundles through the real CLI: round trips, re-signing, and every refusal.

The product rules under test: ``weights sign`` / ``bundle create --sign-key`` write OpenSSF
model-signing signatures; ``weights verify`` and ``bundle verify --policy/--trust`` accept only
content that matches a signature of a signer the policy requires; ``weights resign`` adds the
customer's signatures beside the vendor's without touching anything else. A refusal is one
``error: ... (hint: ...)`` line naming the input, exit 2 for bad input and 3 for content or
signatures that do not match (``bundle verify`` prints one line per problem, then exits 3).
Signatures a signing CLI would refuse to make (expired certificates, ignore lists that hide
weights, names with ``..``) are crafted with the library's own signer classes and a trusted key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from support import pki as pki_support
from support.content import write_model_folder
from support.pki import KeyPair, Leaf, Pki, make_pki, write_key_pair
from support.softhsm import SoftHsmToken, make_token, unavailable_reason

from sealift.cli import main
from sealift.signing.dsse import IN_TOTO_PAYLOAD_TYPE, pae
from sealift.signing.model_manifest import FileDigest, ModelManifest
from sealift.signing.signature_file import SignatureFile
from sealift.signing.signers import KeySigner

EXIT_INPUT = 2
EXIT_INTEGRITY = 3
PASSPHRASE = "correct horse battery staple 42"
HEADER = 'apiVersion: sealift.dev/v1alpha1\nkind: Bundle\nmetadata: {name: demo, version: "%s"}\n'
MODEL = "tiny"
SHARD_1 = "model-00001-of-00002.safetensors"


# --------------------------------------------------------------------------- helpers


def cli(*args: object, env: dict[str, str | None] | None = None) -> Result:
    """Run the real CLI in-process; stdout and stderr stay apart; no passphrase leaks in."""
    environment: dict[str, str | None] = {"SEALIFT_KEY_PASSWORD": None, "SEALIFT_POLICY": None}
    environment.update(env or {})
    return CliRunner().invoke(main, [str(a) for a in args], env=environment)


def assert_ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def assert_error(result: Result, code: int, *names: object) -> str:
    """One ``error: ... (hint: ...)`` line naming every one of ``names``."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert "internal error" not in line, line
    assert "(hint: " in line and line.endswith(")"), line
    assert len(line.split("(hint: ", 1)[1].strip(" )")) > 5, line
    for name in names:
        assert str(name) in line, (str(name), line)
    return line


def problems_of(result: Result) -> list[str]:
    """``bundle verify``'s problem lines; checks exit 3 and the failing summary."""
    assert result.exit_code == EXIT_INTEGRITY, (result.exit_code, result.stdout, result.stderr)
    lines = result.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("FAILED with"), result.stdout
    return [line for line in lines[:-1] if line.split(":", 1)[0] in _PROBLEM_KINDS]


# Problem kinds of bundle verify; its other lines before the summary say who signed what.
_PROBLEM_KINDS = {
    *("signature", "rollback", "digest", "missing", "extra", "size", "manifest", "index"),
    *("graph", "part"),
}


def sign(target: Path, *extra: object, env: dict[str, str | None] | None = None) -> Result:
    return cli("weights", "sign", "-q", target, *extra, env=env)


def verify(target: Path, *extra: object) -> Result:
    return cli("weights", "verify", "-q", target, *extra)


def bundle_verify(bundle: Path, *extra: object) -> Result:
    return cli("bundle", "verify", "-q", bundle, *extra)


def sign_in_child(token: SoftHsmToken, folder: Path, uri: str) -> subprocess.CompletedProcess[str]:
    """``weights sign --pkcs11-uri`` in a child process: SoftHSM reads SOFTHSM2_CONF once per
    process, so the token's configuration must be in the environment before the module loads."""
    command = [sys.executable, "-m", "sealift.cli", "weights", "sign", "-q", str(folder)]
    return subprocess.run(
        [*command, "--pkcs11-uri", uri],
        env=token.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): sha256_file(p)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def statement_of(signature: Path) -> dict[str, Any]:
    document = json.loads(signature.read_bytes())
    return dict(json.loads(base64.b64decode(document["dsseEnvelope"]["payload"])))


def write_policy(
    path: Path,
    signers: list[dict[str, Any]],
    *,
    weights: dict[str, list[str]] | None = None,
    bundles: dict[str, list[str]] | None = None,
    releases: list[dict[str, str]] | None = None,
) -> Path:
    """A trust policy file; ``weights``/``bundles`` default to all signers required."""
    every = {"required": [s["name"] for s in signers]}
    document: dict[str, Any] = {
        "apiVersion": "sealift.dev/v1alpha1",
        "kind": "TrustPolicy",
        "signers": signers,
        "weights": every if weights is None else weights,
        "bundles": every if bundles is None else bundles,
    }
    if releases:
        document["releases"] = releases
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def cert_policy(folder: Path, roots: Path, **constraints: str) -> Path:
    return write_policy(
        folder / "cert-policy.yaml",
        [{"name": "pki", "certificate": {"roots": str(roots), **constraints}}],
        bundles={},
    )


def key_signature(statement: bytes, key: ec.EllipticCurvePrivateKey) -> bytes:
    """A signature file over ``statement`` made by the library's own key signer."""
    return KeySigner(key).sign_statement(statement).to_json()


def cert_signature(statement: bytes, leaf: Leaf) -> bytes:
    """A certificate signature over ``statement`` made whatever the leaf's validity (the CLI
    refuses to sign with a bad leaf, so a verifier's refusal is tested with this)."""
    signature = leaf.private_key.sign(
        pae(IN_TOTO_PAYLOAD_TYPE, statement), ec.ECDSA(hashes.SHA256())
    )
    chain = (leaf.certificate, *leaf.chain_certificates)
    return SignatureFile(
        payload=statement,
        payload_type=IN_TOTO_PAYLOAD_TYPE,
        signature=signature,
        certificate_chain=tuple(c.public_bytes(serialization.Encoding.DER) for c in chain),
    ).to_json()


def flip_byte(path: Path, offset: int = 100) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KeyPair]:
    folder = tmp_path_factory.mktemp("keys")
    return {
        "vendor": write_key_pair(folder, "vendor"),
        "customer": write_key_pair(folder, "customer"),
        "stranger": write_key_pair(folder, "stranger"),
        "p384": write_key_pair(folder, "p384", curve="P-384"),
        "locked": write_key_pair(folder, "locked", password=PASSPHRASE.encode()),
    }


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A small two-shard model folder and its files' sha256."""
    folder = tmp_path / "model"
    return folder, write_model_folder(folder, shard_size=4096)


@pytest.fixture
def signed(model: tuple[Path, dict[str, str]], keys: dict[str, KeyPair]) -> Path:
    """The model folder signed by the vendor key (signature MODEL.sig beside it)."""
    folder, _ = model
    assert_ok(sign(folder, "--key", keys["vendor"].key))
    return folder


@pytest.fixture(scope="module")
def softhsm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SoftHsmToken]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    yield make_token(tmp_path_factory.mktemp("softhsm"))


def bundle_spec(folder: Path, model: Path, *, version: str = "1.0") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / f"sealift-{version}.yaml"
    spec.write_text(
        HEADER % version
        + textwrap.dedent(f"""\
            models:
              - {{name: {MODEL}, version: "1", path: "{model}"}}
            """)
    )
    return spec


def create_signed_bundle(
    tmp_path: Path,
    key: Path,
    *,
    output: str = "bundle",
    version: str = "1.0",
    shard_size: int = 4096,
    split: str | None = None,
) -> tuple[Path, dict[str, str]]:
    """A model-only bundle signed by ``key`` as vendor; returns it and the model's file digests."""
    model = tmp_path / "src" / "model"
    files = (
        write_model_folder(model, shard_size=shard_size)
        if not model.exists()
        else tree_digests(model)
    )
    spec = bundle_spec(tmp_path / "src", model, version=version)
    target = tmp_path / output
    target.parent.mkdir(parents=True, exist_ok=True)
    extra: list[object] = ["--split", split] if split else []
    assert_ok(cli("bundle", "create", "-q", "-f", spec, "-o", target, "--sign-key", key, *extra))
    return target, files


# =========================================================================== 1. round trips


@pytest.mark.parametrize("name", ["vendor", "p384"], ids=["P-256", "P-384"])
def test_key_round_trip(
    name: str, model: tuple[Path, dict[str, str]], keys: dict[str, KeyPair]
) -> None:
    folder, files = model
    result = assert_ok(sign(folder, "--key", keys[name].key))
    signature = folder.with_name("model.sig")
    assert signature.is_file() and str(signature) in result.stdout
    statement = statement_of(signature)
    assert {r["name"]: r["digest"] for r in statement["predicate"]["resources"]} == files
    result = assert_ok(verify(folder, "--trust", keys[name].public))
    assert f"verified model folder {folder}: {len(files)} files" in result.stdout


def test_encrypted_key_with_the_environment_passphrase(
    model: tuple[Path, dict[str, str]], keys: dict[str, KeyPair]
) -> None:
    folder, _ = model
    result = assert_ok(
        sign(folder, "--key", keys["locked"].key, env={"SEALIFT_KEY_PASSWORD": PASSPHRASE})
    )
    assert PASSPHRASE not in result.stdout + result.stderr
    assert_ok(verify(folder, "--trust", keys["locked"].public))


def test_encrypted_key_with_a_passphrase_file(
    model: tuple[Path, dict[str, str]], keys: dict[str, KeyPair], tmp_path: Path
) -> None:
    folder, _ = model
    password_file = tmp_path / "passphrase"
    password_file.write_text(PASSPHRASE + "\n")  # an editor's trailing newline is tolerated
    result = assert_ok(
        sign(folder, "--key", keys["locked"].key, "--key-password-file", password_file)
    )
    assert PASSPHRASE not in result.stdout + result.stderr
    assert_ok(verify(folder, "--trust", keys["locked"].public))


def test_encrypted_key_without_its_passphrase_is_a_clear_input_error(
    model: tuple[Path, dict[str, str]], keys: dict[str, KeyPair]
) -> None:
    folder, _ = model
    line = assert_error(sign(folder, "--key", keys["locked"].key), EXIT_INPUT, keys["locked"].key)
    assert "encrypted" in line and "SEALIFT_KEY_PASSWORD" in line
    assert not folder.with_name("model.sig").exists()


def test_encrypted_key_with_a_wrong_passphrase_never_echoes_it(
    model: tuple[Path, dict[str, str]], keys: dict[str, KeyPair]
) -> None:
    folder, _ = model
    wrong = "not-the-passphrase-7781"
    result = sign(folder, "--key", keys["locked"].key, env={"SEALIFT_KEY_PASSWORD": wrong})
    assert "passphrase" in assert_error(result, EXIT_INPUT, keys["locked"].key)
    assert wrong not in result.stdout + result.stderr
    assert PASSPHRASE not in result.stdout + result.stderr


def test_certificate_round_trip_under_a_policy_of_roots(
    model: tuple[Path, dict[str, str]], pki: Pki, tmp_path: Path
) -> None:
    folder, _ = model
    leaf = pki[pki_support.VALID]
    assert_ok(sign(folder, "--key", leaf.key, "--cert", leaf.cert, "--chain", leaf.chain))
    document = json.loads(folder.with_name("model.sig").read_bytes())
    chain = document["verificationMaterial"]["x509CertificateChain"]["certificates"]
    assert len(chain) == 2  # the leaf and the intermediate; the root comes from the policy
    result = assert_ok(verify(folder, "--policy", cert_policy(tmp_path, pki.root)))
    assert "Model Signer (valid)" in result.stdout


@pytest.mark.parametrize("constraint", ["email", "subject"])
def test_certificate_identity_constraints(
    constraint: str, model: tuple[Path, dict[str, str]], pki: Pki, tmp_path: Path
) -> None:
    folder, _ = model
    leaf = pki[pki_support.VALID]
    assert_ok(sign(folder, "--key", leaf.key, "--cert", leaf.cert, "--chain", leaf.chain))
    matching = pki_support.LEAF_EMAIL if constraint == "email" else leaf.subject
    other = "someone-else@example.com" if constraint == "email" else "CN=Someone Else,O=Evil"
    (tmp_path / "ok").mkdir()
    (tmp_path / "no").mkdir()
    good = cert_policy(tmp_path / "ok", pki.root, **{constraint: matching})
    assert_ok(verify(folder, "--policy", good))
    bad = cert_policy(tmp_path / "no", pki.root, **{constraint: other})
    line = assert_error(verify(folder, "--policy", bad), EXIT_INTEGRITY, folder, "pki")
    assert "no signature by pki" in line


def test_pkcs11_round_trip_with_softhsm(
    softhsm: SoftHsmToken, model: tuple[Path, dict[str, str]]
) -> None:
    folder, _ = model
    signing = sign_in_child(softhsm, folder, softhsm.uri())
    assert signing.returncode == 0, signing.stderr
    assert "pkcs11 key" in signing.stdout
    assert softhsm.pin_file.read_text() not in signing.stdout + signing.stderr
    result = assert_ok(verify(folder, "--trust", softhsm.public_key))
    assert "verified model folder" in result.stdout


def test_pkcs11_wrong_key_label_is_an_input_error(
    softhsm: SoftHsmToken, model: tuple[Path, dict[str, str]]
) -> None:
    folder, _ = model
    signing = sign_in_child(softhsm, folder, softhsm.uri(key_label="no-such-key"))
    assert signing.returncode == EXIT_INPUT, signing.stderr
    errors = [line for line in signing.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no-such-key" in errors[0] and "(hint: " in errors[0], errors


def test_pkcs11_uri_with_pin_value_is_refused(
    model: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    folder, _ = model
    pin = "4815162342"
    uri = f"pkcs11:token=t;object=k?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-value={pin}"
    result = sign(folder, "--pkcs11-uri", uri)
    line = assert_error(result, EXIT_INPUT, "pin-value")
    assert "pin-source" in line
    assert pin not in result.stdout + result.stderr
    assert not folder.with_name("model.sig").exists()


# =========================================================================== 2. bundles


def test_signed_bundle_verifies_by_bundle_and_weights(
    tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    bundle, _ = create_signed_bundle(tmp_path, keys["vendor"].key)
    assert (bundle / "signatures/models" / MODEL / "1" / "vendor.sig").is_file()
    assert (bundle / "signatures/bundle/vendor.sig").is_file()
    result = assert_ok(bundle_verify(bundle, "--trust", keys["vendor"].public))
    assert "bundle manifest signed by vendor.pub" in result.stdout
    assert f"model {MODEL} 1 signed by vendor.pub" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("verified:")
    result = assert_ok(verify(bundle, "--trust", keys["vendor"].public))
    assert f"verified model {MODEL} 1" in result.stdout
    # Someone else's key is not the vendor's.
    problems = problems_of(bundle_verify(bundle, "--trust", keys["stranger"].public))
    assert problems and all(p.startswith("signature:") for p in problems), problems


def _customer_policy(folder: Path, keys: dict[str, KeyPair]) -> Path:
    signers = [
        {"name": "vendor", "key": str(keys["vendor"].public)},
        {"name": "customer", "key": str(keys["customer"].public)},
    ]
    either = {"required": ["customer"], "optional": ["vendor"]}
    return write_policy(folder / "customer-policy.yaml", signers, weights=either, bundles=either)


def test_resign_adds_the_customer_beside_the_vendor(
    tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    bundle, _ = create_signed_bundle(tmp_path, keys["vendor"].key)
    before = tree_digests(bundle)
    result = assert_ok(
        cli(
            "weights",
            "resign",
            "-q",
            bundle,
            "--trust",
            keys["vendor"].public,
            "--key",
            keys["customer"].key,
        )
    )
    added = {
        f"signatures/models/{MODEL}/1/customer.sig",
        "signatures/bundle/customer.sig",
    }
    after = tree_digests(bundle)
    assert set(after) - set(before) == added
    assert {k: after[k] for k in before} == before, "re-signing changed an existing file"
    for name in added:
        assert str(bundle / name) in result.stdout
    policy = _customer_policy(tmp_path, keys)
    result = assert_ok(bundle_verify(bundle, "--policy", policy))
    assert "bundle manifest signed by customer, vendor" in result.stdout
    assert_ok(verify(bundle, "--policy", policy))
    # The customer's signature alone satisfies a policy that requires only the customer.
    (bundle / "signatures/bundle/vendor.sig").unlink()
    (bundle / f"signatures/models/{MODEL}/1/vendor.sig").unlink()
    assert_ok(bundle_verify(bundle, "--policy", policy))


def test_resign_twice_with_one_signer_name_is_refused(
    tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    bundle, _ = create_signed_bundle(tmp_path, keys["vendor"].key)
    args = ("weights", "resign", "-q", bundle, "--trust", keys["vendor"].public)
    assert_ok(cli(*args, "--key", keys["customer"].key))
    before = tree_digests(bundle)
    line = assert_error(
        cli(*args, "--key", keys["stranger"].key), EXIT_INPUT, "customer.sig", "already has"
    )
    assert "never replaced" in line
    assert tree_digests(bundle) == before, "a refused re-sign changed the bundle"
    # Signing the vendor's name over again is refused just the same.
    assert_error(
        cli(*args, "--key", keys["stranger"].key, "--signer-name", "vendor"),
        EXIT_INPUT,
        "vendor.sig",
    )
    assert tree_digests(bundle) == before


def test_a_refused_resign_writes_no_signature(tmp_path: Path, keys: dict[str, KeyPair]) -> None:
    bundle, _ = create_signed_bundle(tmp_path, keys["vendor"].key)
    args = ("weights", "resign", "-q", bundle, "--trust", keys["vendor"].public)
    assert_ok(cli(*args, "--key", keys["customer"].key))
    # Only the bundle signature of "customer" is left: the refusal must come before any write
    # (a model signature by the refused key beside the customer's bundle signature).
    (bundle / f"signatures/models/{MODEL}/1/customer.sig").unlink()
    before = tree_digests(bundle)
    assert_error(cli(*args, "--key", keys["stranger"].key), EXIT_INPUT, "customer.sig")
    assert tree_digests(bundle) == before, "a refused resign wrote a signature"


def test_resign_a_split_tar_writes_the_sidecar_and_leaves_the_parts(
    tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    output, _ = create_signed_bundle(
        tmp_path, keys["vendor"].key, output="out/bundle.tar", shard_size=600_000, split="1MiB"
    )
    folder = output.parent
    parts = sorted(folder.glob("bundle.tar.[0-9][0-9][0-9]"))
    assert len(parts) >= 2, parts
    before = tree_digests(folder)
    assert_ok(bundle_verify(output, "--trust", keys["vendor"].public, "--parts"))
    args = ("weights", "resign", "-q", output, "--trust", keys["vendor"].public)
    assert_ok(cli(*args, "--key", keys["customer"].key))
    sidecar = folder / "bundle.tar.signatures"
    assert sorted(p.relative_to(sidecar).as_posix() for p in sidecar.rglob("*.sig")) == [
        "bundle/customer.sig",
        f"models/{MODEL}/1/customer.sig",
    ]
    after = tree_digests(folder)
    assert {k: after[k] for k in before} == before, "re-signing changed a part or the index"
    assert set(after) - set(before) == {
        "bundle.tar.signatures/bundle/customer.sig",
        f"bundle.tar.signatures/models/{MODEL}/1/customer.sig",
    }
    policy = _customer_policy(tmp_path, keys)
    result = assert_ok(bundle_verify(output, "--policy", policy, "--parts"))
    assert "bundle manifest signed by customer, vendor" in result.stdout
    assert_ok(verify(parts[0], "--policy", policy))
    line = assert_error(cli(*args, "--key", keys["stranger"].key), EXIT_INPUT, "customer.sig")
    assert "already has" in line
    assert tree_digests(folder) == after


# =========================================================================== 3. refusals


def test_refuses_a_modified_file(signed: Path, keys: dict[str, KeyPair]) -> None:
    flip_byte(signed / SHARD_1)
    line = assert_error(verify(signed, "--trust", keys["vendor"].public), EXIT_INTEGRITY, SHARD_1)
    assert "modified" in line


def test_refuses_an_added_file(signed: Path, keys: dict[str, KeyPair]) -> None:
    (signed / "extra.py").write_text("import os\n")
    line = assert_error(
        verify(signed, "--trust", keys["vendor"].public), EXIT_INTEGRITY, "extra.py"
    )
    assert "not covered by the signature" in line


def test_refuses_a_removed_file(signed: Path, keys: dict[str, KeyPair]) -> None:
    (signed / "tokenizer.json").unlink()
    line = assert_error(
        verify(signed, "--trust", keys["vendor"].public), EXIT_INTEGRITY, "tokenizer.json"
    )
    assert "missing" in line


def test_refuses_a_renamed_file(signed: Path, keys: dict[str, KeyPair]) -> None:
    (signed / "config.json").rename(signed / "config.json.bak")
    line = assert_error(
        verify(signed, "--trust", keys["vendor"].public), EXIT_INTEGRITY, "config.json"
    )
    assert "missing" in line or "not covered" in line


def test_refuses_an_emptied_file(signed: Path, keys: dict[str, KeyPair]) -> None:
    os.truncate(signed / SHARD_1, 0)
    line = assert_error(verify(signed, "--trust", keys["vendor"].public), EXIT_INTEGRITY, SHARD_1)
    assert "modified" in line


def test_refuses_an_ignore_list_that_hides_a_needed_file(
    model: tuple[Path, dict[str, str]], keys: dict[str, KeyPair]
) -> None:
    folder, files = model
    listed = {p: d for p, d in files.items() if p != "config.json"}
    manifest = ModelManifest.build("model", listed, ignore_paths=("config.json",))
    signature = folder.with_name("model.sig")
    signature.write_bytes(key_signature(manifest.statement(), keys["vendor"].private_key))
    (folder / "config.json").write_text('{"model_type": "evil"}\n')
    line = assert_error(
        verify(folder, "--trust", keys["vendor"].public), EXIT_INTEGRITY, "config.json"
    )
    assert "ignore list" in line


def test_refuses_a_symlink_leaving_the_model_folder(
    signed: Path, keys: dict[str, KeyPair], tmp_path: Path
) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text("{}\n")
    (signed / "special_tokens_map.json").symlink_to(outside)
    line = assert_error(
        verify(signed, "--trust", keys["vendor"].public), EXIT_INPUT, "special_tokens_map.json"
    )
    assert "symlink" in line
    signed.with_name("model.sig").unlink()
    assert "symlink" in assert_error(
        sign(signed, "--key", keys["vendor"].key), EXIT_INPUT, "special_tokens_map.json"
    )


def test_refuses_a_signed_name_that_escapes_the_folder(
    model: tuple[Path, dict[str, str]], keys: dict[str, KeyPair]
) -> None:
    folder, files = model
    honest = ModelManifest.build("model", files)
    evil = hashlib.sha256(b"evil\n").hexdigest()
    crafted = ModelManifest(name="model", files=(*honest.files, FileDigest("../evil", evil)))
    signature = folder.with_name("model.sig")
    signature.write_bytes(key_signature(crafted.statement(), keys["vendor"].private_key))
    (folder.parent / "evil").write_text("evil\n")
    line = assert_error(
        verify(folder, "--trust", keys["vendor"].public), EXIT_INTEGRITY, "'../evil'"
    )
    assert "escapes the model folder" in line


def test_refuses_a_signature_whose_statement_was_edited(
    signed: Path, keys: dict[str, KeyPair]
) -> None:
    signature = signed.with_name("model.sig")
    document = json.loads(signature.read_bytes())
    statement = statement_of(signature)
    statement["predicate"]["resources"][0]["digest"] = hashlib.sha256(b"evil").hexdigest()
    document["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    signature.write_text(json.dumps(document))
    line = assert_error(
        verify(signed, "--trust", keys["vendor"].public), EXIT_INTEGRITY, signature, "vendor.pub"
    )
    assert "does not verify" in line


def test_refuses_a_key_the_policy_does_not_trust(signed: Path, keys: dict[str, KeyPair]) -> None:
    line = assert_error(
        verify(signed, "--trust", keys["stranger"].public), EXIT_INTEGRITY, "stranger.pub"
    )
    assert "no signature by stranger.pub" in line


def test_refuses_a_signature_made_for_another_model(
    signed: Path, keys: dict[str, KeyPair], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    write_model_folder(other, shard_size=4096, seed=7)
    shutil.copy(signed.with_name("model.sig"), other.with_name("other.sig"))
    line = assert_error(verify(other, "--trust", keys["vendor"].public), EXIT_INTEGRITY, SHARD_1)
    assert "modified" in line and str(other) in line


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (pki_support.EXPIRED, "expired on"),
        (pki_support.NOT_YET_VALID, "not valid before"),
        (pki_support.NO_DIGITAL_SIGNATURE, "does not allow digital signatures"),
    ],
)
def test_refuses_a_bad_leaf_certificate(
    kind: str, words: str, model: tuple[Path, dict[str, str]], pki: Pki, tmp_path: Path
) -> None:
    folder, files = model
    leaf = pki[kind]
    # sealift will not sign with such a certificate ...
    refused = sign(folder, "--key", leaf.key, "--cert", leaf.cert, "--chain", leaf.chain)
    assert words.split()[-1] in assert_error(refused, EXIT_INPUT, "signing certificate")
    assert not folder.with_name("model.sig").exists()
    # ... and refuses a signature someone else made with it.
    statement = ModelManifest.build("model", files).statement()
    folder.with_name("model.sig").write_bytes(cert_signature(statement, leaf))
    line = assert_error(
        verify(folder, "--policy", cert_policy(tmp_path, pki.root)), EXIT_INTEGRITY, leaf.subject
    )
    assert words in line


def test_refuses_a_chain_to_an_untrusted_root(
    model: tuple[Path, dict[str, str]], pki: Pki, tmp_path: Path
) -> None:
    folder, _ = model
    leaf = pki[pki_support.UNTRUSTED]
    assert_ok(sign(folder, "--key", leaf.key, "--cert", leaf.cert, "--chain", leaf.chain))
    line = assert_error(
        verify(folder, "--policy", cert_policy(tmp_path, pki.root)), EXIT_INTEGRITY, leaf.subject
    )
    assert "does not chain to a trusted root" in line
    # The same signature is fine for a cluster that trusts the other root.
    (tmp_path / "other").mkdir()
    assert_ok(verify(folder, "--policy", cert_policy(tmp_path / "other", pki.other_root)))


def test_refuses_a_tampered_weight_in_a_signed_bundle(
    tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    bundle, files = create_signed_bundle(tmp_path, keys["vendor"].key)
    flip_byte(bundle / "blobs/sha256" / files[SHARD_1])
    line = assert_error(
        verify(bundle, "--trust", keys["vendor"].public), EXIT_INTEGRITY, SHARD_1, MODEL
    )
    assert files[SHARD_1] in line  # where the bad copy lies: the blob to copy again
    problems = problems_of(bundle_verify(bundle, "--trust", keys["vendor"].public))
    assert any(files[SHARD_1] in p for p in problems), problems


def test_refuses_an_ignore_list_hiding_a_needed_file_in_a_bundle(
    tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    bundle, files = create_signed_bundle(tmp_path, keys["vendor"].key)
    listed = {p: d for p, d in files.items() if p != "config.json"}
    manifest = ModelManifest.build(MODEL, listed, ignore_paths=("config.json",))
    signature = bundle / f"signatures/models/{MODEL}/1/vendor.sig"
    signature.write_bytes(key_signature(manifest.statement(), keys["vendor"].private_key))
    line = assert_error(
        verify(bundle, "--trust", keys["vendor"].public), EXIT_INTEGRITY, "config.json"
    )
    assert "ignore list" in line
    problems = problems_of(bundle_verify(bundle, "--trust", keys["vendor"].public))
    assert any("ignore list" in p and "config.json" in p for p in problems), problems


def test_refuses_a_signed_name_escaping_the_model_in_a_bundle(
    tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    bundle, files = create_signed_bundle(tmp_path, keys["vendor"].key)
    honest = ModelManifest.build(MODEL, files)
    evil = FileDigest("../evil", hashlib.sha256(b"evil\n").hexdigest())
    crafted = ModelManifest(name=MODEL, files=(*honest.files, evil))
    signature = bundle / f"signatures/models/{MODEL}/1/vendor.sig"
    signature.write_bytes(key_signature(crafted.statement(), keys["vendor"].private_key))
    assert_error(verify(bundle, "--trust", keys["vendor"].public), EXIT_INTEGRITY, "'../evil'")
    problems = problems_of(bundle_verify(bundle, "--trust", keys["vendor"].public))
    assert any("'../evil'" in p for p in problems), problems


def test_refuses_a_replaced_bundle_manifest(tmp_path: Path, keys: dict[str, KeyPair]) -> None:
    bundle, _ = create_signed_bundle(tmp_path, keys["vendor"].key, version="1.0")
    newer, _ = create_signed_bundle(tmp_path, keys["vendor"].key, output="newer", version="1.1")
    # The same model in both, so only the bundle manifest differs: swap it, keep the signature.
    shutil.copy(newer / "sealift-bundle.json", bundle / "sealift-bundle.json")
    problems = problems_of(bundle_verify(bundle, "--trust", keys["vendor"].public))
    assert any("another bundle manifest" in p for p in problems), problems
    # Copying the other bundle's signature instead is refused the same way.
    bundle2, _ = create_signed_bundle(tmp_path / "b2", keys["vendor"].key, version="1.0")
    shutil.copy(newer / "signatures/bundle/vendor.sig", bundle2 / "signatures/bundle/vendor.sig")
    problems = problems_of(bundle_verify(bundle2, "--trust", keys["vendor"].public))
    assert any("another bundle manifest" in p for p in problems), problems


def test_rollback_is_refused_unless_allowed_with_a_warning(
    tmp_path: Path, keys: dict[str, KeyPair]
) -> None:
    bundle, _ = create_signed_bundle(tmp_path, keys["vendor"].key, version="2026.1.0")
    policy = write_policy(
        tmp_path / "policy.yaml",
        [{"name": "vendor", "key": str(keys["vendor"].public)}],
        releases=[{"name": "demo", "minimumVersion": "2026.10.0"}],
    )
    problems = problems_of(bundle_verify(bundle, "--policy", policy))
    assert len(problems) == 1 and problems[0].startswith("rollback:"), problems
    assert "2026.1.0" in problems[0] and "2026.10.0" in problems[0]
    result = assert_ok(bundle_verify(bundle, "--policy", policy, "--allow-rollback"))
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "rollback" in warnings[0], result.stderr
    # A release at the floor is no rollback.
    at_floor, _ = create_signed_bundle(tmp_path / "floor", keys["vendor"].key, version="2026.10.0")
    result = assert_ok(bundle_verify(at_floor, "--policy", policy))
    assert "warning" not in result.stderr


# =========================================================================== library bugs found


def test_an_absent_optional_signer_is_not_blamed_for_another_signature(
    model: tuple[Path, dict[str, str]], pki: Pki, keys: dict[str, KeyPair], tmp_path: Path
) -> None:
    folder, _ = model
    ours, theirs = pki[pki_support.VALID], pki[pki_support.UNTRUSTED]
    mine, other = tmp_path / "customer.sig", tmp_path / "third-party.sig"
    for leaf, signature in ((ours, mine), (theirs, other)):
        assert_ok(
            sign(
                folder,
                *("--key", leaf.key, "--cert", leaf.cert, "--chain", leaf.chain),
                *("--signature", signature),
            )
        )
    customer = {"name": "customer", "certificate": {"roots": str(pki.root)}}
    vendor = {"name": "vendor", "key": str(keys["vendor"].public)}
    required_only = write_policy(
        tmp_path / "required.yaml", [customer, vendor], weights={"required": ["customer"]}
    )
    assert_ok(verify(folder, "--policy", required_only, "--signature", mine, "--signature", other))
    with_optional = write_policy(
        tmp_path / "optional.yaml",
        [customer, vendor],
        weights={"required": ["customer"], "optional": ["vendor"]},
    )
    # The vendor did not sign at all, so listing it as optional must change nothing.
    assert_ok(verify(folder, "--policy", with_optional, "--signature", mine, "--signature", other))


def test_a_policy_without_weight_signers_is_a_clear_error_for_a_folder(
    signed: Path, keys: dict[str, KeyPair], tmp_path: Path
) -> None:
    policy = write_policy(
        tmp_path / "bundles-only.yaml",
        [{"name": "vendor", "key": str(keys["vendor"].public)}],
        weights={},
    )
    result = verify(signed, "--policy", policy)
    assert result.exit_code in (EXIT_INPUT, EXIT_INTEGRITY), (result.exit_code, result.stderr)
    assert_error(result, result.exit_code, signed)

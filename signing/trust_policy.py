"""The trust policy: which signers exist, which must sign weights and bundles, and rollback floors.

Loaded from YAML, validated against the shipped schema, into frozen dataclasses. ``--trust
KEY.pub`` on the command line is shorthand for a policy in which that one key is required for
weights and bundles. Evaluation is here too: given the signatures found for one subject, which
required signers are satisfied, and why the others are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sealift.documents import load_document
from sealift.errors import InputError, IntegrityError
from sealift.signing.keys import load_certificates, load_public_key
from sealift.signing.signature_file import SignatureFile
from sealift.signing.verifiers import CertificateVerifier, KeyVerifier, NotThisSigner, Verifier

SCHEMA_NAME = "trust-policy.v1alpha1.json"


@dataclass(frozen=True)
class Requirement:
    """Signers that must, and that may, sign one kind of subject."""

    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrustPolicy:
    """A loaded trust policy."""

    source: str
    verifiers: tuple[Verifier, ...] = field(repr=False)
    weights: Requirement
    bundles: Requirement
    minimum_versions: dict[str, str] = field(default_factory=dict)

    def with_trusted_root(self, content: bytes) -> TrustPolicy:
        """This policy with keyless signers that name no trusted root using ``content``."""
        from sealift.signing.keyless import KeylessVerifier

        verifiers = tuple(
            v.with_trusted_root(content)
            if isinstance(v, KeylessVerifier) and v.trusted_root is None
            else v
            for v in self.verifiers
        )
        return TrustPolicy(
            self.source, verifiers, self.weights, self.bundles, self.minimum_versions
        )

    def verifier(self, name: str) -> Verifier:
        """The verifier of the signer called ``name``."""
        for verifier in self.verifiers:
            if verifier.name == name:
                return verifier
        raise KeyError(name)


def _keyless_verifier(name: str, spec: dict[str, str], base: Path) -> Verifier:
    from sealift.signing.keyless import KeylessVerifier

    root = base / spec["trustedRoot"] if spec.get("trustedRoot") else None
    return KeylessVerifier(
        name=name,
        identity=spec["identity"],
        issuer=spec["issuer"],
        trusted_root=root,
        trusted_root_digest=spec.get("trustedRootDigest"),
    )


def load_trust_policy(path: Path) -> TrustPolicy:
    """Load a policy file; paths in it are relative to the file."""
    document = load_document(
        path, package="sealift.signing", schema_name=SCHEMA_NAME, what="trust policy"
    )
    base = path.resolve().parent
    verifiers: list[Verifier] = []
    for entry in document["signers"]:
        name = entry["name"]
        if any(v.name == name for v in verifiers):
            raise InputError(f"{path}: signer {name!r} appears twice", hint="give each signer once")
        if "key" in entry:
            verifiers.append(
                KeyVerifier(name=name, public_key=load_public_key(base / entry["key"]))
            )
        elif "certificate" in entry:
            spec = entry["certificate"]
            roots = load_certificates(base / spec["roots"], what=f"roots of signer {name}")
            verifiers.append(
                CertificateVerifier(
                    name=name,
                    roots=tuple(roots),
                    subject=spec.get("subject"),
                    email=spec.get("email"),
                )
            )
        else:
            verifiers.append(_keyless_verifier(name, entry["keyless"], base))
    names = {v.name for v in verifiers}

    def requirement(key: str) -> Requirement:
        section = document.get(key) or {}
        required = tuple(section.get("required", ()))
        optional = tuple(section.get("optional", ()))
        for signer in (*required, *optional):
            if signer not in names:
                raise InputError(
                    f"{path}: {key} names signer {signer!r}, which is not defined",
                    hint="defined signers: " + ", ".join(sorted(names)),
                )
        return Requirement(required=required, optional=optional)

    weights = requirement("weights")
    bundles = requirement("bundles")
    if not weights.required and not bundles.required:
        raise InputError(
            f"{path}: the policy requires no signer for weights or bundles",
            hint="a policy that requires nothing trusts anything: name required signers",
        )
    return TrustPolicy(
        source=str(path),
        verifiers=tuple(verifiers),
        weights=weights,
        bundles=bundles,
        minimum_versions={r["name"]: r["minimumVersion"] for r in document.get("releases") or []},
    )


def policy_for_key(path: Path) -> TrustPolicy:
    """``--trust KEY.pub``: that key is required for weights and for bundles."""
    verifier = KeyVerifier(name=path.name, public_key=load_public_key(path))
    requirement = Requirement(required=(path.name,))
    return TrustPolicy(
        source=f"--trust {path}", verifiers=(verifier,), weights=requirement, bundles=requirement
    )


@dataclass(frozen=True)
class Verdict:
    """Which signers signed one subject, and the payload each of them signed."""

    subject: str
    accepted: dict[str, tuple[str, bytes]]  # signer -> (identity, payload)
    problems: tuple[str, ...]

    def signers(self) -> list[str]:
        """The names of the signers whose signatures verified."""
        return sorted(self.accepted)


def evaluate(
    policy: TrustPolicy,
    requirement: Requirement,
    signatures: list[tuple[str, SignatureFile]],
    *,
    subject: str,
) -> Verdict:
    """Check every signature of ``subject`` against every signer the requirement names.

    Raises :class:`IntegrityError` when a required signer has no valid signature, or when an
    optional signer's signature is present but invalid. Signatures by signers the policy does not
    name are ignored: the cluster trusts only what the policy names.
    """
    names = (*requirement.required, *requirement.optional)
    if not names:
        raise InputError(
            f"{subject}: {policy.source} names no signer for this kind of content",
            hint="add required signers for weights (or bundles) to the trust policy",
        )
    accepted: dict[str, tuple[str, bytes]] = {}
    problems: dict[str, list[str]] = {name: [] for name in names}
    near_misses: dict[str, list[str]] = {name: [] for name in names}
    for source, signature in signatures:
        for name in names:
            verifier = policy.verifier(name)
            try:
                identity = verifier.identify(signature, source=source)
            except NotThisSigner as other:
                near_misses[name].append(other.message)
                continue
            except IntegrityError as bad:
                problems[name].append(bad.message)
                continue
            if identity is not None and name not in accepted:
                accepted[name] = (identity, signature.payload)
    # An optional signer that did not sign is fine; one whose own signature fails is not.
    bad_optional = [n for n in requirement.optional if n not in accepted and problems[n]]
    missing = [name for name in requirement.required if name not in accepted]
    if missing or bad_optional:
        who = ", ".join(missing or bad_optional)
        who_names = missing or bad_optional
        own = [m for name in who_names for m in problems[name]]
        near = [m for name in who_names for m in near_misses[name]]
        detail = (own or near or [f"no signature by {who} was found"])[0]
        raise IntegrityError(
            f"{subject}: not signed as {policy.source} requires ({who}): {detail}",
            hint="re-sign with the required key, or check the trust policy",
        )
    return Verdict(
        subject=subject,
        accepted=accepted,
        problems=tuple(m for messages in problems.values() for m in messages),
    )


_VERSION_PART = re.compile(r"(\d+|[A-Za-z]+)")


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """A comparable key for release versions such as 2026.12.0 or 1.2.3-rc1."""
    key: list[tuple[int, int | str]] = []
    for part in _VERSION_PART.findall(version):
        key.append((1, int(part)) if part.isdigit() else (0, part))
    return tuple(key)


def check_minimum_version(policy: TrustPolicy, name: str, version: str) -> None:
    """Refuse a release older than the policy's floor for it (rollback protection)."""
    floor = policy.minimum_versions.get(name)
    if floor is not None and version_key(version) < version_key(floor):
        raise IntegrityError(
            f"release {name} {version} is older than the minimum {floor} in {policy.source}",
            hint="this looks like a rollback; use a newer bundle, or --allow-rollback on purpose",
        )


def portable_policy(path: Path) -> dict[str, bytes]:
    """The policy and every file it names, as flat names (for a ConfigMap mounted as a folder).

    Paths in the copy are rewritten to those flat names, so the folder is a complete policy.
    The policy is loaded first, so only a valid policy is ever carried into a cluster.
    """
    import yaml

    load_trust_policy(path)
    document = load_document(
        path, package="sealift.signing", schema_name=SCHEMA_NAME, what="trust policy"
    )
    base = path.resolve().parent
    files: dict[str, bytes] = {}

    def carry(signer: str, kind: str, relative: str) -> str:
        name = f"{signer}.{kind}"
        files[name] = (base / relative).read_bytes()
        return name

    for entry in document["signers"]:
        if "key" in entry:
            entry["key"] = carry(entry["name"], "pub.pem", entry["key"])
        elif "certificate" in entry:
            spec = entry["certificate"]
            spec["roots"] = carry(entry["name"], "roots.pem", spec["roots"])
        elif entry["keyless"].get("trustedRoot"):
            spec = entry["keyless"]
            spec["trustedRoot"] = carry(entry["name"], "trusted_root.json", spec["trustedRoot"])
    files["policy.yaml"] = yaml.safe_dump(document, sort_keys=False).encode()
    return files

"""Sign, verify and re-sign model weights: in a plain folder or inside a bundle.

Signing never re-reads weights whose digests are known (a bundle's layer digests are the files'
sha256). Verifying checks the signature first (cheap), then hashes each file once, in parallel,
and compares with what was signed: a modified, added, removed, renamed or empty file is caught.
Re-signing is one verification pass, then a signature over the manifest that pass verified.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sealift.bundles import layout
from sealift.bundles.blob_source import BlobSource
from sealift.bundles.bundle_manifest import Artifact, BundleManifest, parse_bundle_manifest
from sealift.bundles.model_folder import list_model_files, read_model_layers
from sealift.descriptors import children_of
from sealift.errors import InputError, IntegrityError
from sealift.hashing import hash_stream, sha256_bytes
from sealift.progress import Progress
from sealift.signing.bundle_statement import bundle_statement, signed_manifest_digest
from sealift.signing.model_manifest import (
    DEFAULT_IGNORE_PATHS,
    ModelManifest,
    parse_statement,
)
from sealift.signing.signature_file import SignatureFile, read_signature_file
from sealift.signing.signers import Signer
from sealift.signing.trust_policy import Requirement, TrustPolicy, Verdict, evaluate

# Files a served model cannot do without: a signed ignore list must not hide any of them.
_NEEDED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx")
_NEEDED_NAMES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
)


@dataclass(frozen=True)
class WeightsReport:
    """What a weights verification established, per model."""

    subject: str
    signers: tuple[str, ...]
    identities: tuple[str, ...]
    files: int
    bytes: int
    manifest: ModelManifest

    def line(self) -> str:
        """One line of evidence."""
        who = ", ".join(f"{s} ({i})" for s, i in zip(self.signers, self.identities, strict=True))
        return f"verified {self.subject}: {self.files} files, {self.bytes} bytes, signed by {who}"


def _is_needed(path: str) -> bool:
    name = PurePosixPath(path).name
    return path.endswith(_NEEDED_SUFFIXES) or name in _NEEDED_NAMES


def compare(
    signed: ModelManifest,
    actual: dict[str, str],
    *,
    subject: str,
    ignored_present: frozenset[str] = frozenset(),
) -> None:
    """The signed manifest and the files present must agree exactly (names and digests).

    ``ignored_present`` are files that exist but were not hashed because the signed ignore list
    covers them; none of them may be a file the model needs.
    """
    signed_digests = signed.digests()
    for path in sorted(ignored_present):
        if _is_needed(path):
            raise IntegrityError(
                f"{subject}: the signature's ignore list covers {path}, which the model needs",
                hint="an ignore list may not hide weights, configs or tokenizers; re-sign",
            )
    for path in sorted(set(signed_digests) - set(actual)):
        raise IntegrityError(
            f"{subject}: signed file {path} is missing (removed or renamed)",
            hint="restore the file; weights must match their signature exactly",
        )
    for path in sorted(set(actual) - set(signed_digests)):
        if signed.is_ignored(path):
            if _is_needed(path):
                raise IntegrityError(
                    f"{subject}: the signature's ignore list covers {path}, which the model needs",
                    hint="an ignore list may not hide weights, configs or tokenizers; re-sign",
                )
            continue
        raise IntegrityError(
            f"{subject}: {path} is not covered by the signature (added or renamed)",
            hint="remove the file, or have the model signed again with it",
        )
    for path, digest in sorted(signed_digests.items()):
        if actual[path] != digest:
            raise IntegrityError(
                f"{subject}: {path} was modified (digest {actual[path]}, signed {digest})",
                hint="the weights do not match their signature; do not use them",
            )


def agreeing_manifest(verdict: Verdict, *, subject: str) -> tuple[ModelManifest, tuple[str, ...]]:
    """Every accepted signature must vouch for the same files and digests."""
    manifests = {
        name: parse_statement(payload, source=f"{subject} signature by {name}")
        for name, (_, payload) in verdict.accepted.items()
    }
    if not manifests:
        raise IntegrityError(f"{subject}: no trusted signature", hint="check the trust policy")
    names = sorted(manifests)
    first = manifests[names[0]]
    for name in names[1:]:
        if manifests[name].digests() != first.digests():
            raise IntegrityError(
                f"{subject}: the signatures of {names[0]} and {name} list different files",
                hint="one of them signed another version of the weights",
            )
    return first, tuple(verdict.accepted[n][0] for n in names)


# -- plain model folders --------------------------------------------------------------------


def hash_folder(
    folder: Path,
    *,
    jobs: int,
    progress: Progress,
    skip: tuple[Path, ...] = (),
    ignored: Callable[[str], bool] = lambda _: False,
) -> tuple[dict[str, str], int, frozenset[str]]:
    """Hash every file of a model folder once, in parallel.

    Returns {path: digest}, the bytes hashed, and the files left unhashed because ``ignored``
    covers them. Symlinks leaving the folder and special files are refused while listing.
    """
    skipped = {p.resolve() for p in skip}
    listed = [f for f in list_model_files(folder, exclude=()) if f.path.resolve() not in skipped]
    files = [f for f in listed if not ignored(f.relative_path)]
    left_out = frozenset(f.relative_path for f in listed if ignored(f.relative_path))
    total = sum(f.size for f in files)
    digests: dict[str, str] = {}
    with progress.task("hash", total) as bar, ThreadPoolExecutor(max(jobs, 1)) as pool:

        def one(item: object) -> tuple[str, str]:
            path, relative, size = item  # type: ignore[misc]
            with path.open("rb") as handle:
                result = hash_stream(handle, expected_size=size, what=relative, on_bytes=bar.update)
            return relative, result.digest

        for relative, digest in pool.map(one, [(f.path, f.relative_path, f.size) for f in files]):
            digests[relative] = digest
    return digests, total, left_out


def sign_folder(
    folder: Path, signer: Signer, signature: Path, *, jobs: int, progress: Progress
) -> ModelManifest:
    """Hash a model folder and sign it; the signature file is written atomically."""
    inside = signature.resolve().is_relative_to(folder.resolve())
    ignores = DEFAULT_IGNORE_PATHS
    probe = ModelManifest(name=folder.name, files=(), ignore_paths=ignores)
    digests, _, _ = hash_folder(
        folder, jobs=jobs, progress=progress, skip=(signature,), ignored=probe.is_ignored
    )
    if inside:
        ignores = (*ignores, signature.resolve().relative_to(folder.resolve()).as_posix())
    manifest = ModelManifest.build(folder.name, digests, ignore_paths=ignores)
    _write_new(signature, signer.sign_statement(manifest.statement()).to_json())
    return manifest


def _write_new(path: Path, content: bytes) -> None:
    if path.exists():
        raise InputError(
            f"signature {path} already exists", hint="signatures are never overwritten"
        )
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(content)
    temporary.replace(path)


def verify_folder(
    folder: Path,
    signatures: list[Path],
    policy: TrustPolicy,
    *,
    jobs: int,
    progress: Progress,
) -> WeightsReport:
    """Verify a model folder against its signature files under ``policy``."""
    subject = f"model folder {folder}"
    found = []
    for path in signatures:
        try:
            content = path.read_bytes()
        except OSError as bad:
            raise InputError(f"signature {path} cannot be read", hint="check the path") from bad
        found.append((str(path), read_signature_file(content, source=str(path))))
    verdict = evaluate(policy, policy.weights, found, subject=subject)
    signed, identities = agreeing_manifest(verdict, subject=subject)
    actual, total, ignored_present = hash_folder(
        folder, jobs=jobs, progress=progress, skip=tuple(signatures), ignored=signed.is_ignored
    )
    compare(signed, actual, subject=subject, ignored_present=ignored_present)
    return WeightsReport(
        subject, tuple(sorted(verdict.accepted)), identities, len(actual), total, signed
    )


# -- models inside a bundle -----------------------------------------------------------------


def model_manifest(source: BlobSource, artifact: Artifact) -> ModelManifest:
    """A model artifact's files and digests, read from its manifest (no weights are read)."""
    _, layers = read_model_layers(source, artifact)
    digests = {layer.path: layer.digest for layer in layers}
    return ModelManifest.build(
        model_subject(artifact.name, artifact.version), digests, ignore_paths=DEFAULT_IGNORE_PATHS
    )


def model_subject(name: str, version: str) -> str:
    """The subject name sealift signs for a model: name and version, so a signature for one
    version cannot stand in for another."""
    return f"{name}:{version}"


def check_subject(signed: ModelManifest, name: str, version: str, *, subject: str) -> None:
    """The signature must be for this model and version (a bare name is what model_signing
    writes for a folder; it binds no version)."""
    if signed.name not in (model_subject(name, version), name):
        raise IntegrityError(
            f"{subject}: the signature is for {signed.name!r},"
            f" not {model_subject(name, version)!r}",
            hint="a signature for another model or version was put in place; do not use it",
        )


def read_manifest(source: BlobSource) -> BundleManifest:
    """The bundle manifest of ``source``."""
    if not source.has(layout.BUNDLE_MANIFEST_FILE):
        raise IntegrityError(
            f"{source.description} has no {layout.BUNDLE_MANIFEST_FILE}: not a complete bundle",
            hint="copy the bundle again, or re-run bundle create",
        )
    return parse_bundle_manifest(
        source.read_small(layout.BUNDLE_MANIFEST_FILE), source=source.description
    )


TRUSTED_ROOT_FILE = "trusted_root.json"


def bundle_policy(source: BlobSource, manifest: BundleManifest, policy: TrustPolicy) -> TrustPolicy:
    """The policy with the Sigstore trusted root the bundle carries (a file named
    trusted_root.json), for keyless signers whose policy pins exactly that file's digest."""
    artifact = manifest.artifact("file", TRUSTED_ROOT_FILE)
    if artifact is None:
        return policy
    content = source.read_small(layout.blob_name(artifact.digest))
    if sha256_bytes(content) != artifact.digest:
        raise IntegrityError(f"{TRUSTED_ROOT_FILE} in the bundle does not match its digest")
    layers = children_of(content, artifact.media_type, where=TRUSTED_ROOT_FILE).layers
    if len(layers) != 1:
        raise IntegrityError(f"{TRUSTED_ROOT_FILE} in the bundle is not a single-file artifact")
    root = source.read_small(layout.blob_name(layers[0].digest))
    if sha256_bytes(root) != layers[0].digest:
        raise IntegrityError(f"{TRUSTED_ROOT_FILE} in the bundle does not match its digest")
    return policy.with_trusted_root(root)


def _signatures_under(source: BlobSource, prefix: str) -> list[tuple[str, SignatureFile]]:
    found = []
    for name in source.signature_names():
        if name.startswith(prefix):
            found.append((name, read_signature_file(source.read_signature(name), source=name)))
    return found


def check_model_signatures(
    source: BlobSource, artifact: Artifact, requirement: Requirement, policy: TrustPolicy
) -> tuple[ModelManifest, Verdict, tuple[str, ...]]:
    """Signatures of one model in a bundle, checked against its layer digests (no hashing)."""
    subject = f"model {artifact.name} {artifact.version}"
    policy = bundle_policy(source, read_manifest(source), policy)
    signatures = _signatures_under(
        source, layout.model_signature_prefix(artifact.name, artifact.version)
    )
    verdict = evaluate(policy, requirement, signatures, subject=subject)
    if not verdict.accepted:
        raise IntegrityError(f"{subject}: no trusted signature", hint="check the trust policy")
    signed, identities = agreeing_manifest(verdict, subject=subject)
    check_subject(signed, artifact.name, artifact.version, subject=subject)
    actual = model_manifest(source, artifact).digests()
    compare(signed, actual, subject=subject)
    return signed, verdict, identities


def check_bundle_signatures(
    source: BlobSource, manifest: BundleManifest, policy: TrustPolicy
) -> Verdict:
    """The bundle manifest's signatures under the policy's bundle requirement."""
    subject = f"bundle {manifest.name} {manifest.version}"
    policy = bundle_policy(source, manifest, policy)
    signatures = _signatures_under(source, layout.BUNDLE_SIGNATURE_PREFIX)
    verdict = evaluate(policy, policy.bundles, signatures, subject=subject)
    for name, (_, payload) in verdict.accepted.items():
        vouched = signed_manifest_digest(payload, source=f"{subject} signature by {name}")
        if vouched != manifest.digest:
            raise IntegrityError(
                f"{subject}: the signature by {name} is for another bundle manifest ({vouched})",
                hint="the bundle manifest was replaced; do not use this bundle",
            )
    return verdict


def _hash_blobs(
    source: BlobSource, digests: list[tuple[str, int, str]], *, jobs: int, progress: Progress
) -> None:
    """Hash each (digest, size, what) blob once, in parallel; any mismatch is an error."""
    total = sum(size for _, size, _ in digests)
    with progress.task("verify weights", total) as bar, ThreadPoolExecutor(max(jobs, 1)) as pool:

        def one(item: tuple[str, int, str]) -> None:
            digest, size, what = item
            name = layout.blob_name(digest)
            if not source.has(name):
                raise IntegrityError(
                    f"{what}: blob {digest} is missing", hint="copy the bundle again"
                )
            with source.open(name) as reader:
                hash_stream(
                    reader,
                    expected_digest=digest,
                    expected_size=size,
                    what=f"{what} ({source.location(name)})",
                    on_bytes=bar.update,
                )

        list(pool.map(one, digests))


def verify_bundle_weights(
    source: BlobSource,
    policy: TrustPolicy,
    *,
    jobs: int,
    progress: Progress,
    hash_weights: bool = True,
) -> list[WeightsReport]:
    """Every model of a bundle: signatures under the policy, then each weight hashed once."""
    manifest = read_manifest(source)
    models = [a for a in manifest.artifacts if a.kind == "model"]
    if not models:
        raise InputError(f"{source.description} carries no model", hint="nothing to verify")
    reports = []
    to_hash: list[tuple[str, int, str]] = []
    for artifact in models:
        signed, verdict, identities = check_model_signatures(
            source, artifact, policy.weights, policy
        )
        sizes = _layer_sizes(source, artifact)
        for path, digest in signed.digests().items():
            to_hash.append((digest, sizes[digest], f"model {artifact.name} file {path}"))
        reports.append(
            WeightsReport(
                subject=f"model {artifact.name} {artifact.version}",
                signers=tuple(sorted(verdict.accepted)),
                identities=identities,
                files=len(signed.files),
                bytes=sum(sizes[d] for d in signed.digests().values()),
                manifest=signed,
            )
        )
    if hash_weights:
        # Largest first keeps every worker busy until the end.
        unique = sorted({d: (d, s, w) for d, s, w in to_hash}.values(), key=lambda item: -item[1])
        _hash_blobs(source, unique, jobs=jobs, progress=progress)
    return reports


def _layer_sizes(source: BlobSource, artifact: Artifact) -> dict[str, int]:
    _, layers = read_model_layers(source, artifact)
    return {layer.digest: layer.size for layer in layers}


def sign_bundle(
    source: BlobSource, manifest: BundleManifest, signer: Signer, signer_name: str
) -> list[str]:
    """Add ``signer_name``'s signatures over every model and the bundle manifest."""
    signatures = [
        (
            layout.model_signature_name(artifact.name, artifact.version, signer_name),
            signer.sign_statement(model_manifest(source, artifact).statement()).to_json(),
        )
        for artifact in manifest.artifacts
        if artifact.kind == "model"
    ]
    statement = bundle_statement(manifest.name, manifest.version, manifest.digest)
    signatures.append(
        (layout.bundle_signature_name(signer_name), signer.sign_statement(statement).to_json())
    )
    return _add_all(source, signatures)


def _add_all(source: BlobSource, signatures: list[tuple[str, bytes]]) -> list[str]:
    """Add every signature or none: a name already taken is refused before anything is written."""
    existing = set(source.signature_names())
    for name, _ in signatures:
        if name in existing:
            raise InputError(
                f"{source.description} already has the signature {name}",
                hint="signatures are never replaced: choose another --signer-name",
            )
    return [source.add_signature(name, content) for name, content in signatures]


def resign_bundle(
    source: BlobSource,
    policy: TrustPolicy,
    signer: Signer,
    signer_name: str,
    *,
    jobs: int,
    progress: Progress,
) -> tuple[list[WeightsReport], list[str]]:
    """Verify the vendor's signatures and weights (one pass), then add ``signer_name``'s."""
    manifest = read_manifest(source)
    bundle_verified = bool(policy.bundles.required)
    if policy.bundles.required or policy.bundles.optional:
        check_bundle_signatures(source, manifest, policy)
    reports = verify_bundle_weights(source, policy, jobs=jobs, progress=progress)
    signatures = []
    for report, artifact in zip(
        reports, [a for a in manifest.artifacts if a.kind == "model"], strict=True
    ):
        # Sign exactly what was verified: the signed manifest, not a re-read of the bundle.
        name = layout.model_signature_name(artifact.name, artifact.version, signer_name)
        signatures.append((name, signer.sign_statement(report.manifest.statement()).to_json()))
    if bundle_verified:
        # Vouch for the bundle manifest only when a required signature over it was verified:
        # counter-signing unverified images and charts would launder them.
        statement = bundle_statement(manifest.name, manifest.version, manifest.digest)
        signatures.append(
            (layout.bundle_signature_name(signer_name), signer.sign_statement(statement).to_json())
        )
    return reports, _add_all(source, signatures)

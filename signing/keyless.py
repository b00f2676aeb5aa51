"""Sigstore keyless signatures, verified offline against a ``trusted_root.json``.

A vendor that signs in CI with Sigstore (a short-lived Fulcio certificate for its OIDC identity,
logged in Rekor) ships the ``trusted_root.json`` of the Sigstore instance it used inside the
bundle. Verification then needs no network: the certificate chain, the signed certificate
timestamp and the transparency-log inclusion are checked against that file by sigstore-python,
and the identity and issuer must be the ones the trust policy names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sealift.errors import InputError, IntegrityError, ResourceError
from sealift.hashing import sha256_bytes
from sealift.signing.signature_file import SignatureFile
from sealift.signing.verifiers import NotThisSigner


@dataclass(frozen=True)
class KeylessVerifier:
    """A signer known by its OIDC identity and issuer, under a Sigstore trusted root."""

    name: str
    identity: str
    issuer: str
    trusted_root: Path | None = None
    trusted_root_json: bytes | None = field(default=None, repr=False)
    # A trusted root carried in the bundle is used only if it has exactly this digest: the
    # policy pins the trust anchor; the content being verified must never supply its own.
    trusted_root_digest: str | None = None

    def with_trusted_root(self, content: bytes) -> KeylessVerifier:
        """This verifier using a trusted root carried in the bundle, if the policy pinned it."""
        if self.trusted_root_digest is None or sha256_bytes(content) != self.trusted_root_digest:
            return self
        return KeylessVerifier(
            self.name, self.identity, self.issuer, None, content, self.trusted_root_digest
        )

    def _root_bytes(self) -> bytes:
        if self.trusted_root_json is not None:
            return self.trusted_root_json
        if self.trusted_root is None:
            raise IntegrityError(
                f"signer {self.name}: no trusted_root.json with the digest the policy pins"
                f" ({self.trusted_root_digest})",
                hint="carry the vendor's trusted_root.json in the bundle, or name a trustedRoot",
            )
        try:
            return self.trusted_root.read_bytes()
        except OSError as bad:
            raise InputError(f"trusted root {self.trusted_root} cannot be read") from bad

    def identify(self, signature: SignatureFile, *, source: str) -> str | None:
        if signature.method != "keyless":
            return None
        try:
            from sigstore.models import Bundle, TrustedRoot
            from sigstore.verify import Verifier as SigstoreVerifier
            from sigstore.verify.policy import Identity
        except ImportError as missing:
            raise ResourceError(
                "Sigstore keyless verification needs sigstore-python",
                hint="pip install 'sealift[sigstore]'",
            ) from missing
        import json
        import tempfile

        try:
            # sigstore-python loads a trusted root only from a file.
            with tempfile.NamedTemporaryFile(suffix=".json") as handle:
                handle.write(self._root_bytes())
                handle.flush()
                root = TrustedRoot.from_file(handle.name)
            verifier = SigstoreVerifier(trusted_root=root)
            bundle = Bundle.from_json(json.dumps(signature.document))
            payload_type, payload = verifier.verify_dsse(
                bundle, Identity(identity=self.identity, issuer=self.issuer)
            )
        except Exception as bad:  # sigstore raises several families; all mean "not verified"
            raise NotThisSigner(
                f"{source}: the keyless signature is not {self.identity} from {self.issuer}"
                f" under the trusted root ({type(bad).__name__}: {bad})",
                hint="check the identity and issuer in the policy and the trusted_root.json",
            ) from bad
        if payload != signature.payload:
            raise IntegrityError(f"{source}: the verified payload differs from the envelope")
        del payload_type
        return f"keyless {self.identity} ({self.issuer})"

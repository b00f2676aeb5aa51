"""Verifiers: decide whether a signature file was made by one trusted signer.

Each verifier stands for one signer of the trust policy. ``identify`` answers None when the
signature is not of its kind or names another key, returns the signer's identity when the
signature checks out, and raises :class:`IntegrityError` when the signature claims to be this
signer's but does not verify (modified content, an expired or untrusted certificate).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import verification

from sealift.errors import IntegrityError
from sealift.signing.dsse import pae
from sealift.signing.keys import hash_for, public_key_hint
from sealift.signing.signature_file import SignatureFile


class NotThisSigner(IntegrityError):
    """The signature is of this verifier's kind but not this signer's (another PKI, another
    identity): not a fault of this signer, though worth saying when no signer matched."""


class Verifier(Protocol):
    """One trusted signer."""

    name: str

    def identify(self, signature: SignatureFile, *, source: str) -> str | None:
        """The signer's identity if ``signature`` is its valid signature, None if not its own."""
        ...


def _check(key: ec.EllipticCurvePublicKey, signature: SignatureFile) -> bool:
    try:
        key.verify(
            signature.signature,
            pae(signature.payload_type, signature.payload),
            ec.ECDSA(hash_for(key)),
        )
    except InvalidSignature:
        return False
    return True


@dataclass(frozen=True)
class KeyVerifier:
    """A signer known by its EC public key."""

    name: str
    public_key: ec.EllipticCurvePublicKey = field(repr=False)

    def identify(self, signature: SignatureFile, *, source: str) -> str | None:
        if signature.method != "key":
            return None
        hint = public_key_hint(self.public_key)
        if signature.public_key_hint and signature.public_key_hint != hint:
            return None
        if _check(self.public_key, signature):
            return f"key {hint[:16]}"
        if signature.public_key_hint == hint:
            raise IntegrityError(
                f"{source}: the signature by {self.name} (key {hint[:16]}) does not verify",
                hint="the signed content or the signature was modified; do not use it",
            )
        return None


def _leaf_usage_ok(certificate: x509.Certificate) -> bool:
    try:
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return bool(usage.digital_signature)


@dataclass(frozen=True)
class CertificateVerifier:
    """A signer known by the roots of its PKI (and, optionally, its subject or email)."""

    name: str
    roots: tuple[x509.Certificate, ...] = field(repr=False)
    subject: str | None = None
    email: str | None = None
    now: datetime.datetime | None = None

    def _matches(self, leaf: x509.Certificate) -> bool:
        if self.subject is not None and leaf.subject.rfc4514_string() != self.subject:
            return False
        if self.email is not None:
            try:
                names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            except x509.ExtensionNotFound:
                return False
            if self.email not in names.get_values_for_type(x509.RFC822Name):
                return False
        return True

    def identify(self, signature: SignatureFile, *, source: str) -> str | None:
        if signature.method != "certificate":
            return None
        try:
            chain = [x509.load_der_x509_certificate(der) for der in signature.certificate_chain]
        except ValueError as bad:
            raise IntegrityError(f"{source}: a certificate in the signature is malformed") from bad
        leaf, intermediates = chain[0], chain[1:]
        if not self._matches(leaf):
            return None
        subject = leaf.subject.rfc4514_string()
        now = self.now or datetime.datetime.now(datetime.UTC)
        # Validity is checked at verification time (model_signing 1.1.1 checks it at the leaf's
        # notBefore, which accepts expired certificates).
        if now > leaf.not_valid_after_utc:
            raise IntegrityError(
                f"{source}: the certificate of {subject} expired on"
                f" {leaf.not_valid_after_utc:%Y-%m-%d}",
                hint="ask the signer to re-sign with a valid certificate",
            )
        if now < leaf.not_valid_before_utc:
            raise IntegrityError(
                f"{source}: the certificate of {subject} is not valid before"
                f" {leaf.not_valid_before_utc:%Y-%m-%d}",
                hint="check this machine's clock, or wait until the certificate is valid",
            )
        if not _leaf_usage_ok(leaf):
            raise IntegrityError(
                f"{source}: the certificate of {subject} does not allow digital signatures",
                hint="the signer must use a certificate issued for signing",
            )
        builder = (
            verification.PolicyBuilder()
            .store(verification.Store(list(self.roots)))
            .time(now)
            .extension_policies(
                ca_policy=verification.ExtensionPolicy.webpki_defaults_ca(),
                ee_policy=verification.ExtensionPolicy.permit_all(),
            )
        )
        try:
            builder.build_client_verifier().verify(leaf, intermediates)
        except verification.VerificationError as bad:
            raise NotThisSigner(
                f"{source}: the certificate of {subject} does not chain to a trusted root of"
                f" {self.name} ({bad})",
                hint="check the trust policy's roots for this signer",
            ) from bad
        public_key = leaf.public_key()
        if not isinstance(public_key, ec.EllipticCurvePublicKey) or not _check(
            public_key, signature
        ):
            raise IntegrityError(
                f"{source}: the signature by {subject} does not verify",
                hint="the signed content or the signature was modified; do not use it",
            )
        return f"certificate {subject}"

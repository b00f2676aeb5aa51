"""Signers: turn a statement into a signature file. The private key never leaves its object.

A key signer holds an EC key loaded from a file; a certificate signer adds the X.509 chain of the
customer's PKI. Signing refuses a certificate that is expired, not yet valid, lacks the
digitalSignature key usage, or does not match the key, so nothing is signed that a verifier
would later refuse.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sealift.errors import InputError
from sealift.signing.dsse import IN_TOTO_PAYLOAD_TYPE, pae
from sealift.signing.keys import hash_for, public_key_hint
from sealift.signing.signature_file import SignatureFile


class Signer(Protocol):
    """Something that signs in-toto statements."""

    @property
    def description(self) -> str:
        """Who signs, for logs (a key hint or a certificate subject; never key material)."""
        ...

    def sign_statement(self, statement: bytes) -> SignatureFile:
        """A signature file over ``statement``."""
        ...


@dataclass(frozen=True)
class KeySigner:
    """Signs with an EC private key; the signature carries the public key's hint."""

    private_key: ec.EllipticCurvePrivateKey = field(repr=False)

    @property
    def description(self) -> str:
        return f"key {public_key_hint(self.private_key.public_key())[:16]}"

    def _sign(self, statement: bytes) -> bytes:
        return self.private_key.sign(
            pae(IN_TOTO_PAYLOAD_TYPE, statement), ec.ECDSA(hash_for(self.private_key))
        )

    def sign_statement(self, statement: bytes) -> SignatureFile:
        return SignatureFile(
            payload=statement,
            payload_type=IN_TOTO_PAYLOAD_TYPE,
            signature=self._sign(statement),
            public_key_hint=public_key_hint(self.private_key.public_key()),
        )


def check_signing_certificate(
    certificate: x509.Certificate, *, now: datetime.datetime, source: str
) -> None:
    """Refuse a leaf certificate a verifier would refuse: validity and key usage."""
    if now < certificate.not_valid_before_utc:
        raise InputError(
            f"{source} is not valid before {certificate.not_valid_before_utc:%Y-%m-%d %H:%M}Z",
            hint="check the certificate and this machine's clock",
        )
    if now > certificate.not_valid_after_utc:
        raise InputError(
            f"{source} expired on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M}Z",
            hint="ask your PKI for a new certificate",
        )
    try:
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return
    if not usage.digital_signature:
        raise InputError(
            f"{source} does not allow digital signatures (key usage)",
            hint="use a certificate issued for signing",
        )


@dataclass(frozen=True)
class CertificateSigner(KeySigner):
    """Signs with a key whose certificate chains to the customer's PKI."""

    certificate: x509.Certificate | None = None
    chain: tuple[x509.Certificate, ...] = ()

    @property
    def description(self) -> str:
        assert self.certificate is not None
        return f"certificate {self.certificate.subject.rfc4514_string()}"

    def __post_init__(self) -> None:
        assert self.certificate is not None
        mine = self.private_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        theirs = self.certificate.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        if mine != theirs:
            raise InputError(
                "the signing certificate does not belong to the private key",
                hint="pass the certificate issued for this key",
            )
        check_signing_certificate(
            self.certificate,
            now=datetime.datetime.now(datetime.UTC),
            source=f"signing certificate {self.certificate.subject.rfc4514_string()}",
        )

    def sign_statement(self, statement: bytes) -> SignatureFile:
        assert self.certificate is not None
        chain = (self.certificate, *self.chain)
        return SignatureFile(
            payload=statement,
            payload_type=IN_TOTO_PAYLOAD_TYPE,
            signature=self._sign(statement),
            certificate_chain=tuple(c.public_bytes(serialization.Encoding.DER) for c in chain),
        )


def load_signer(
    *,
    key: Path | None = None,
    certificate: Path | None = None,
    chain: Path | None = None,
    password_file: Path | None = None,
    pkcs11_uri: str | None = None,
) -> Signer:
    """The signer the command line describes: a key file (with a certificate), or a token."""
    from sealift.signing.keys import load_certificates, load_private_key

    if pkcs11_uri is not None:
        if key is not None or certificate is not None:
            raise InputError(
                "--pkcs11-uri and --key cannot be used together", hint="choose one key"
            )
        from sealift.signing.pkcs11_signer import Pkcs11Signer

        return Pkcs11Signer.open(pkcs11_uri)
    if key is None:
        raise InputError("no signing key given", hint="pass --key KEY.pem or --pkcs11-uri URI")
    private_key = load_private_key(key, password_file=password_file)
    if certificate is None:
        if chain is not None:
            raise InputError("--chain needs --cert", hint="pass the signing certificate too")
        return KeySigner(private_key)
    leaf = load_certificates(certificate, what="signing certificate")[0]
    intermediates = tuple(load_certificates(chain, what="certificate chain")) if chain else ()
    return CertificateSigner(private_key, certificate=leaf, chain=intermediates)

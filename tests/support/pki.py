"""A throwaway PKI for signing tests, made with ``cryptography`` (nothing is downloaded).

A root CA, an intermediate and leaf certificates for every case a verifier must judge: valid,
expired, not yet valid, without the digitalSignature key usage, and one issued under another
(untrusted) root. Every key is EC (P-256 unless asked otherwise) and written as PEM; a private
key can be written encrypted. The CAs are valid long before and after every leaf, so a verifier
that checks the chain at the leaf's notBefore (model_signing 1.1.1) still accepts the chain.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CURVES: dict[str, type[ec.EllipticCurve]] = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1}
LEAF_EMAIL = "release-signing@example.com"
DAY = datetime.timedelta(days=1)

# The leaf kinds make_pki issues.
VALID = "valid"
EXPIRED = "expired"
NOT_YET_VALID = "not-yet-valid"
NO_DIGITAL_SIGNATURE = "no-digital-signature"
UNTRUSTED = "untrusted"


def new_key(curve: str = "P-256") -> ec.EllipticCurvePrivateKey:
    """A fresh EC private key on ``curve`` (P-256 or P-384)."""
    return ec.generate_private_key(CURVES[curve]())


def write_private_key(
    path: Path, key: ec.EllipticCurvePrivateKey, *, password: bytes | None = None
) -> Path:
    """The key as PKCS#8 PEM, encrypted with ``password`` when given."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return path


def write_public_key(path: Path, key: ec.EllipticCurvePublicKey) -> Path:
    """The public key as SubjectPublicKeyInfo PEM."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


@dataclass(frozen=True)
class KeyPair:
    """A private key and its public key, both as PEM files."""

    key: Path
    public: Path
    private_key: ec.EllipticCurvePrivateKey = field(repr=False)


def write_key_pair(
    folder: Path, name: str, *, curve: str = "P-256", password: bytes | None = None
) -> KeyPair:
    """``NAME.key`` (encrypted with ``password`` if given) and ``NAME.pub`` in ``folder``."""
    key = new_key(curve)
    return KeyPair(
        key=write_private_key(folder / f"{name}.key", key, password=password),
        public=write_public_key(folder / f"{name}.pub", key.public_key()),
        private_key=key,
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example Corp"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def write_certificates(path: Path, *certificates: x509.Certificate) -> Path:
    """Certificates as one PEM file, in the order given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates))
    return path


@dataclass(frozen=True)
class Authority:
    """A CA: its key and certificate."""

    key: ec.EllipticCurvePrivateKey = field(repr=False)
    certificate: x509.Certificate

    @classmethod
    def root(cls, common_name: str, *, now: datetime.datetime) -> Authority:
        """A self-signed root CA valid from 10 years ago to 10 years ahead."""
        key = new_key()
        name = _name(common_name)
        builder = _ca_builder(name, name, key.public_key(), key.public_key(), now=now)
        return cls(key, builder.sign(key, hashes.SHA256()))

    def intermediate(self, common_name: str, *, now: datetime.datetime) -> Authority:
        """An intermediate CA under this one, valid as long as the root."""
        key = new_key()
        builder = _ca_builder(
            _name(common_name),
            self.certificate.subject,
            key.public_key(),
            self.key.public_key(),
            now=now,
            path_length=0,
        )
        return Authority(key, builder.sign(self.key, hashes.SHA256()))

    def leaf(
        self,
        common_name: str,
        key: ec.EllipticCurvePrivateKey,
        *,
        not_before: datetime.datetime,
        not_after: datetime.datetime,
        digital_signature: bool = True,
        email: str = LEAF_EMAIL,
    ) -> x509.Certificate:
        """An end-entity certificate for ``key``; with ``digital_signature=False`` its key usage
        allows only key agreement, and it has no extended key usage at all."""
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=digital_signature,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=not digital_signature,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        if digital_signature:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
            )
        return builder.sign(self.key, hashes.SHA256())


def _ca_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer_key: ec.EllipticCurvePublicKey,
    *,
    now: datetime.datetime,
    path_length: int | None = 1,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - 3650 * DAY)
        .not_valid_after(now + 3650 * DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False
        )
    )


@dataclass(frozen=True)
class Leaf:
    """A signing certificate, its key and the chain (intermediates) that goes with it."""

    kind: str
    key: Path
    cert: Path
    chain: Path
    certificate: x509.Certificate = field(repr=False)
    private_key: ec.EllipticCurvePrivateKey = field(repr=False)
    chain_certificates: tuple[x509.Certificate, ...] = field(repr=False)

    @property
    def subject(self) -> str:
        """The leaf's RFC 4514 subject, as a trust policy names it."""
        return self.certificate.subject.rfc4514_string()


@dataclass(frozen=True)
class Pki:
    """A root, an intermediate, another (untrusted) root, and one leaf of every kind."""

    root: Path
    intermediate: Path
    other_root: Path
    leaves: dict[str, Leaf]

    def __getitem__(self, kind: str) -> Leaf:
        return self.leaves[kind]


def make_pki(folder: Path, *, now: datetime.datetime | None = None) -> Pki:
    """Write the PKI under ``folder``: root.pem, intermediate.pem, other-root.pem and, per leaf
    kind, ``KIND.key``, ``KIND.pem`` and ``KIND-chain.pem``."""
    now = now or datetime.datetime.now(datetime.UTC)
    folder.mkdir(parents=True, exist_ok=True)
    root = Authority.root("Example Root CA", now=now)
    intermediate = root.intermediate("Example Signing CA", now=now)
    other_root = Authority.root("Untrusted Root CA", now=now)
    other_intermediate = other_root.intermediate("Untrusted Signing CA", now=now)
    windows = {
        VALID: (now - DAY, now + 365 * DAY),
        EXPIRED: (now - 400 * DAY, now - 30 * DAY),
        NOT_YET_VALID: (now + 30 * DAY, now + 400 * DAY),
        NO_DIGITAL_SIGNATURE: (now - DAY, now + 365 * DAY),
        UNTRUSTED: (now - DAY, now + 365 * DAY),
    }
    leaves: dict[str, Leaf] = {}
    for kind, (not_before, not_after) in windows.items():
        issuer = other_intermediate if kind == UNTRUSTED else intermediate
        key = new_key()
        certificate = issuer.leaf(
            f"Model Signer ({kind})",
            key,
            not_before=not_before,
            not_after=not_after,
            digital_signature=kind != NO_DIGITAL_SIGNATURE,
        )
        leaves[kind] = Leaf(
            kind=kind,
            key=write_private_key(folder / f"{kind}.key", key),
            cert=write_certificates(folder / f"{kind}.pem", certificate),
            chain=write_certificates(folder / f"{kind}-chain.pem", issuer.certificate),
            certificate=certificate,
            private_key=key,
            chain_certificates=(issuer.certificate,),
        )
    return Pki(
        root=write_certificates(folder / "root.pem", root.certificate),
        intermediate=write_certificates(folder / "intermediate.pem", intermediate.certificate),
        other_root=write_certificates(folder / "other-root.pem", other_root.certificate),
        leaves=leaves,
    )

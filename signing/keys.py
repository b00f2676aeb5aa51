"""Keys and certificates from files: loaded, checked and never printed.

A private key's passphrase comes from ``SEALIFT_KEY_PASSWORD`` or a file, never from argv. Only
EC keys on P-256 and P-384 are accepted (what model_signing verifies), each with its hash.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sealift.errors import InputError

CURVE_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
}
PASSWORD_ENV = "SEALIFT_KEY_PASSWORD"


def hash_for(key: ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey) -> hashes.HashAlgorithm:
    """The hash model_signing pairs with the key's curve."""
    return CURVE_HASHES[key.curve.name]()


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as missing:
        raise InputError(f"{what} {path} does not exist", hint="check the path") from missing
    except OSError as bad:
        raise InputError(
            f"{what} {path} cannot be read ({bad.strerror})", hint="check permissions"
        ) from bad


def _check_curve(key: object, path: Path, what: str) -> None:
    if not isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        raise InputError(
            f"{what} {path} is not an EC key",
            hint="use an EC key on P-256 or P-384 (openssl ecparam)",
        )
    if key.curve.name not in CURVE_HASHES:
        raise InputError(f"{what} {path} uses curve {key.curve.name}", hint="use P-256 or P-384")


def load_private_key(
    path: Path, *, password_file: Path | None = None
) -> ec.EllipticCurvePrivateKey:
    """An EC private key from PEM; the passphrase from a file or ``SEALIFT_KEY_PASSWORD``."""
    data = _read(path, "private key")
    password: bytes | None = None
    if password_file is not None:
        password = _read(password_file, "key password file").rstrip(b"\r\n")
    elif os.environ.get(PASSWORD_ENV):
        password = os.environ[PASSWORD_ENV].encode()
    try:
        key = serialization.load_pem_private_key(data, password=password)
    except TypeError as locked:
        raise InputError(
            f"private key {path} is encrypted and no passphrase was given",
            hint=f"set {PASSWORD_ENV} or pass --key-password-file",
        ) from locked
    except ValueError as bad:
        # Never echo the key material or the passphrase: only say what failed.
        raise InputError(
            f"private key {path} cannot be loaded (wrong passphrase or not a PEM key)",
            hint="check the file and its passphrase",
        ) from bad
    _check_curve(key, path, "private key")
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def load_public_key(path: Path) -> ec.EllipticCurvePublicKey:
    """An EC public key from PEM (SubjectPublicKeyInfo), or the key of a PEM certificate."""
    data = _read(path, "public key")
    try:
        if b"BEGIN CERTIFICATE" in data:
            key = x509.load_pem_x509_certificate(data).public_key()
        else:
            key = serialization.load_pem_public_key(data)
    except ValueError as bad:
        raise InputError(
            f"public key {path} is not a PEM public key", hint="export it with openssl ec -pubout"
        ) from bad
    _check_curve(key, path, "public key")
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return key


def public_key_hint(key: ec.EllipticCurvePublicKey) -> str:
    """model_signing's key hint: sha256 of the key's PEM text."""
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(pem).hexdigest()


def load_certificates(path: Path, *, what: str = "certificate file") -> list[x509.Certificate]:
    """Every certificate in a PEM file, in order."""
    data = _read(path, what)
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as bad:
        raise InputError(f"{what} {path} holds no PEM certificate", hint="check the file") from bad
    return certificates

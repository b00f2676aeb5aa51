"""The signature file: a Sigstore bundle (v0.3) holding a DSSE envelope, as model_signing writes.

``verificationMaterial`` is one of: a ``publicKey`` hint (signed with a key), an
``x509CertificateChain`` (signed with a certificate from a PKI), or a Fulcio ``certificate`` with
transparency-log entries (Sigstore keyless). This module reads and writes the JSON; it verifies
nothing (see :mod:`verifiers`).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from sealift.errors import IntegrityError
from sealift.signing.dsse import IN_TOTO_PAYLOAD_TYPE

BUNDLE_MEDIA_TYPES = (
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
)
MAX_SIGNATURE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class SignatureFile:
    """One parsed signature: the payload, the DSSE signature and how to check it."""

    payload: bytes = field(repr=False)
    payload_type: str
    signature: bytes = field(repr=False)
    public_key_hint: str | None = None
    certificate_chain: tuple[bytes, ...] = ()  # DER, leaf first
    keyless_certificate: bytes | None = None  # DER Fulcio leaf
    document: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def method(self) -> str:
        """``key``, ``certificate`` or ``keyless``."""
        if self.keyless_certificate is not None:
            return "keyless"
        if self.certificate_chain:
            return "certificate"
        return "key"

    def to_json(self) -> bytes:
        """The file's bytes (compact, as model_signing writes)."""
        if self.certificate_chain:
            material: dict[str, Any] = {
                "x509CertificateChain": {
                    "certificates": [
                        {"rawBytes": base64.b64encode(der).decode()}
                        for der in self.certificate_chain
                    ]
                },
                "tlogEntries": [],
            }
        else:
            material = {"publicKey": {"hint": self.public_key_hint or ""}, "tlogEntries": []}
        document = {
            "mediaType": BUNDLE_MEDIA_TYPES[0],
            "verificationMaterial": material,
            "dsseEnvelope": {
                "payload": base64.b64encode(self.payload).decode(),
                "payloadType": self.payload_type,
                "signatures": [{"sig": base64.b64encode(self.signature).decode(), "keyid": ""}],
            },
        }
        return json.dumps(document, separators=(",", ":")).encode()


def _b64(value: Any, what: str, source: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as bad:
        raise IntegrityError(
            f"{source}: {what} is not base64", hint="the signature is damaged"
        ) from bad


def read_signature_file(content: bytes, *, source: str) -> SignatureFile:
    """Parse a signature file; malformed ones are integrity errors naming ``source``."""
    if len(content) > MAX_SIGNATURE_BYTES:
        raise IntegrityError(f"{source} is too large to be a signature")
    try:
        document = json.loads(content)
        media_type = document.get("mediaType")
        if media_type not in BUNDLE_MEDIA_TYPES:
            raise IntegrityError(
                f"{source}: media type {media_type!r} is not a Sigstore bundle v0.3",
                hint="sign with sealift or model_signing 1.x",
            )
        envelope = document["dsseEnvelope"]
        signatures = envelope["signatures"]
        if len(signatures) != 1:
            raise IntegrityError(f"{source}: expected one DSSE signature, found {len(signatures)}")
        material = document["verificationMaterial"]
        chain: tuple[bytes, ...] = ()
        keyless: bytes | None = None
        hint: str | None = None
        if "x509CertificateChain" in material:
            chain = tuple(
                _b64(c["rawBytes"], "a certificate", source)
                for c in material["x509CertificateChain"]["certificates"]
            )
            if not chain:
                raise IntegrityError(f"{source}: empty certificate chain")
        elif "certificate" in material:
            keyless = _b64(material["certificate"]["rawBytes"], "the certificate", source)
        elif "publicKey" in material:
            hint = str(material["publicKey"].get("hint", "")) or None
        else:
            raise IntegrityError(f"{source}: no verification material", hint="re-sign the model")
        payload_type = str(envelope["payloadType"])
        if payload_type != IN_TOTO_PAYLOAD_TYPE:
            raise IntegrityError(f"{source}: payload type {payload_type!r} is not in-toto")
        return SignatureFile(
            payload=_b64(envelope["payload"], "the payload", source),
            payload_type=payload_type,
            signature=_b64(signatures[0]["sig"], "the signature", source),
            public_key_hint=hint,
            certificate_chain=chain,
            keyless_certificate=keyless,
            document=document,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as bad:
        raise IntegrityError(
            f"{source} is not a readable signature ({type(bad).__name__})",
            hint="the file is damaged or not a model signature",
        ) from bad

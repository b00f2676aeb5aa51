"""A Sigstore instance of our own, entirely local: a Fulcio-like CA, a CT log and a Rekor log.

It makes what a vendor's CI would get from the public Sigstore when signing keylessly (a
short-lived certificate for an OIDC identity with an embedded SCT, and a Rekor v1 entry with an
inclusion promise and a one-leaf inclusion proof), plus the trusted_root.json that lists its
keys. The verifier under test is sigstore-python's own, unmodified; only the keys are ours.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import struct
from typing import Any

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SCT_OID = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
ISSUER_V1_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
ISSUER_V2_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _key_id(key: ec.EllipticCurvePublicKey) -> bytes:
    return hashlib.sha256(_spki(key)).digest()


def _vector(data: bytes, length_bytes: int) -> bytes:
    return len(data).to_bytes(length_bytes, "big") + data


def _der_length(count: int) -> bytes:
    if count < 0x80:
        return bytes([count])
    raw = count.to_bytes((count.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _sct_extension(
    ct_key: ec.EllipticCurvePrivateKey, issuer: ec.EllipticCurvePublicKey, tbs: bytes, ms: int
) -> x509.UnrecognizedExtension:
    """An RFC 6962 precertificate SCT over ``tbs``, as the extension Fulcio embeds."""
    signed = struct.pack("!BBQH", 0, 0, ms, 1) + _key_id(issuer) + _vector(tbs, 3) + _vector(b"", 2)
    signature = ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
    sct = (
        bytes([0])
        + _key_id(ct_key.public_key())
        + struct.pack("!Q", ms)
        + _vector(b"", 2)
        + bytes([4, 3])
        + _vector(signature, 2)
    )
    listed = _vector(_vector(sct, 2), 2)
    return x509.UnrecognizedExtension(SCT_OID, b"\x04" + _der_length(len(listed)) + listed)


class FakeSigstore:
    """Keys and certificates of a local Sigstore; ``sign_dsse`` makes a v0.3 bundle."""

    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        self.ca_key = ec.generate_private_key(ec.SECP384R1())
        self.ct_key = ec.generate_private_key(ec.SECP256R1())
        self.rekor_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sigstore.test"),
                x509.NameAttribute(NameOID.COMMON_NAME, "fake-fulcio"),
            ]
        )
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(days=1))
            .not_valid_after(self.now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()), critical=False
            )
            .sign(self.ca_key, hashes.SHA384())
        )

    def trusted_root(self) -> bytes:
        """The trusted_root.json a vendor would ship for this instance."""
        start = (self.now - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

        def log(key: ec.EllipticCurvePrivateKey) -> dict[str, Any]:
            return {
                "baseUrl": "http://127.0.0.1:1",
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": _b64(_spki(key.public_key())),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": start},
                },
                "logId": {"keyId": _b64(_key_id(key.public_key()))},
            }

        document = {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [log(self.rekor_key)],
            "certificateAuthorities": [
                {
                    "subject": {"organization": "sigstore.test", "commonName": "fake-fulcio"},
                    "uri": "http://127.0.0.1:1",
                    "certChain": {
                        "certificates": [
                            {
                                "rawBytes": _b64(
                                    self.ca_cert.public_bytes(serialization.Encoding.DER)
                                )
                            }
                        ]
                    },
                    "validFor": {"start": start},
                }
            ],
            "ctlogs": [log(self.ct_key)],
            "timestampAuthorities": [],
        }
        return json.dumps(document, indent=2).encode()

    def _leaf(self, key: ec.EllipticCurvePublicKey, identity: str, issuer: str) -> x509.Certificate:
        if "@" in identity and "://" not in identity:
            san: x509.GeneralName = x509.RFC822Name(identity)
        else:
            san = x509.UniformResourceIdentifier(identity)
        issuer_der = issuer.encode()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.ca_cert.subject)
            .public_key(key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(minutes=1))
            .not_valid_after(self.now + dt.timedelta(minutes=10))
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName([san]), critical=True)
            .add_extension(x509.UnrecognizedExtension(ISSUER_V1_OID, issuer_der), critical=False)
            .add_extension(
                x509.UnrecognizedExtension(
                    ISSUER_V2_OID, b"\x0c" + _der_length(len(issuer_der)) + issuer_der
                ),
                critical=False,
            )
        )
        # The precertificate is the same certificate without its SCT extension.
        tbs = builder.sign(self.ca_key, hashes.SHA384()).tbs_certificate_bytes
        sct = _sct_extension(
            self.ct_key, self.ca_key.public_key(), tbs, int(self.now.timestamp() * 1000)
        )
        return builder.add_extension(sct, critical=False).sign(self.ca_key, hashes.SHA384())

    def sign_dsse(self, payload: bytes, identity: str, issuer: str) -> bytes:
        """A Sigstore bundle v0.3 over ``payload``, signed by ``identity`` from ``issuer``."""
        payload_type = "application/vnd.in-toto+json"
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = self._leaf(key.public_key(), identity, issuer)
        pae = b"DSSEv1 %d %s %d %s" % (
            len(payload_type),
            payload_type.encode(),
            len(payload),
            payload,
        )
        signature = key.sign(pae, ec.ECDSA(hashes.SHA256()))
        envelope = {
            "payload": _b64(payload),
            "payloadType": payload_type,
            "signatures": [{"sig": _b64(signature), "keyid": ""}],
        }
        body = json.dumps(
            {
                "apiVersion": "0.0.1",
                "kind": "dsse",
                "spec": {
                    "envelopeHash": {
                        "algorithm": "sha256",
                        "value": hashlib.sha256(json.dumps(envelope).encode()).hexdigest(),
                    },
                    "payloadHash": {
                        "algorithm": "sha256",
                        "value": hashlib.sha256(payload).hexdigest(),
                    },
                    "signatures": [
                        {
                            "signature": _b64(signature),
                            "verifier": _b64(certificate.public_bytes(serialization.Encoding.PEM)),
                        }
                    ],
                },
            },
            separators=(",", ":"),
        ).encode()
        log_id = _key_id(self.rekor_key.public_key())
        integrated = int(self.now.timestamp())
        promise = self.rekor_key.sign(
            rfc8785.dumps(
                {
                    "body": _b64(body),
                    "integratedTime": integrated,
                    "logID": log_id.hex(),
                    "logIndex": 0,
                }
            ),
            ec.ECDSA(hashes.SHA256()),
        )
        root = hashlib.sha256(b"\x00" + body).digest()  # a one-leaf RFC 6962 tree
        note = f"fake-rekor.test - 1\n1\n{_b64(root)}\n"
        note_signature = self.rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        checkpoint = note + "\n" + f"\u2014 fake-rekor.test {_b64(log_id[:4] + note_signature)}\n"
        bundle = {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "certificate": {
                    "rawBytes": _b64(certificate.public_bytes(serialization.Encoding.DER))
                },
                "tlogEntries": [
                    {
                        "logIndex": "0",
                        "logId": {"keyId": _b64(log_id)},
                        "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                        "integratedTime": str(integrated),
                        "inclusionPromise": {"signedEntryTimestamp": _b64(promise)},
                        "inclusionProof": {
                            "logIndex": "0",
                            "rootHash": _b64(root),
                            "treeSize": "1",
                            "hashes": [],
                            "checkpoint": {"envelope": checkpoint},
                        },
                        "canonicalizedBody": _b64(body),
                    }
                ],
            },
            "dsseEnvelope": envelope,
        }
        return json.dumps(bundle).encode()

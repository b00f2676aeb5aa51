"""Signing with a key that never leaves a PKCS#11 token (an HSM, a smart card, SoftHSM).

Keys are named by RFC 7512 ``pkcs11:`` URIs, as model_signing and p11-kit name them:
``pkcs11:token=sealift;object=k1?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/run/pin``.
The PIN comes from ``pin-source`` (a file) or ``SEALIFT_PKCS11_PIN``; ``pin-value`` is refused,
because a URI is typed on command lines and lands in shell history and process listings. The
data is hashed on the host and the token signs the digest with CKM_ECDSA, which every token has.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from sealift.errors import InputError, ResourceError
from sealift.signing.dsse import IN_TOTO_PAYLOAD_TYPE, pae
from sealift.signing.keys import public_key_hint
from sealift.signing.signature_file import SignatureFile

T = TypeVar("T")
PIN_ENV = "SEALIFT_PKCS11_PIN"
_CURVES: dict[str, ec.EllipticCurve] = {"secp256r1": ec.SECP256R1(), "secp384r1": ec.SECP384R1()}
_HASHES = {"secp256r1": hashlib.sha256, "secp384r1": hashlib.sha384}


@dataclass(frozen=True)
class Pkcs11Uri:
    """The parts of a ``pkcs11:`` URI sealift uses."""

    token: str | None
    label: str | None
    key_id: bytes | None
    module_path: str
    pin_file: Path | None


def parse_pkcs11_uri(uri: str) -> Pkcs11Uri:
    """Parse an RFC 7512 URI; refuse an inline PIN and a missing module."""
    if not uri.startswith("pkcs11:"):
        raise InputError(f"{uri.split('?')[0]!r} is not a pkcs11: URI", hint="see RFC 7512")
    path, _, query = uri[len("pkcs11:") :].partition("?")
    attributes = dict(p.split("=", 1) for p in path.split(";") if "=" in p)
    options = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
    if "pin-value" in options:
        raise InputError(
            "the pkcs11: URI carries its PIN (pin-value)",
            hint=f"use pin-source=file:/path or the {PIN_ENV} environment variable",
        )
    module = unquote(options.get("module-path", ""))
    if not module:
        raise InputError(
            "the pkcs11: URI names no module-path", hint="add ?module-path=/path/to/module.so"
        )
    pin_source = unquote(options.get("pin-source", ""))
    pin_file = Path(pin_source.removeprefix("file:")) if pin_source else None
    key_id = bytes(unquote(attributes["id"]), "latin-1") if "id" in attributes else None
    return Pkcs11Uri(
        token=unquote(attributes["token"]) if "token" in attributes else None,
        label=unquote(attributes["object"]) if "object" in attributes else None,
        key_id=key_id,
        module_path=module,
        pin_file=pin_file,
    )


def _pin(uri: Pkcs11Uri) -> str:
    if uri.pin_file is not None:
        try:
            return uri.pin_file.read_text().rstrip("\r\n")
        except OSError as bad:
            raise InputError(
                f"PIN file {uri.pin_file} cannot be read", hint="check pin-source"
            ) from bad
    if os.environ.get(PIN_ENV):
        return os.environ[PIN_ENV]
    raise InputError(
        "no PIN for the PKCS#11 token",
        hint=f"add pin-source=file:/path to the URI or set {PIN_ENV}",
    )


@dataclass
class Pkcs11Signer:
    """A :class:`Signer` whose EC private key stays in a PKCS#11 token."""

    uri: Pkcs11Uri
    _public_key: ec.EllipticCurvePublicKey | None = field(default=None, repr=False)
    _curve: str = ""

    @classmethod
    def open(cls, uri_text: str) -> Pkcs11Signer:
        """Check the token, the key and the PIN now, so a bad URI fails before any work."""
        signer = cls(parse_pkcs11_uri(uri_text))
        signer._with_key(lambda session, private, public: None)
        return signer

    def _with_key(self, action: Callable[[Any, Any, Any], T]) -> T:
        try:
            import pkcs11
            from asn1crypto.core import OctetString
            from pkcs11 import Attribute, KeyType, ObjectClass
            from pkcs11.util.ec import decode_ec_public_key  # noqa: F401 - presence check
        except ImportError as missing:
            raise ResourceError(
                "PKCS#11 support is not installed",
                hint="pip install 'sealift[pkcs11]' (python-pkcs11)",
            ) from missing
        if not Path(self.uri.module_path).is_file():
            raise InputError(
                f"PKCS#11 module {self.uri.module_path} does not exist", hint="check module-path"
            )
        try:
            library = pkcs11.lib(self.uri.module_path)
            token = (
                library.get_token(token_label=self.uri.token)
                if self.uri.token
                else next(iter(library.get_tokens()))
            )
            with token.open(user_pin=_pin(self.uri)) as session:
                query: dict[str, object] = {"key_type": KeyType.EC}
                if self.uri.label:
                    query["label"] = self.uri.label
                if self.uri.key_id:
                    query["id"] = self.uri.key_id
                private = session.get_key(object_class=ObjectClass.PRIVATE_KEY, **query)
                public = session.get_key(object_class=ObjectClass.PUBLIC_KEY, **query)
                if self._public_key is None:
                    params = public[Attribute.EC_PARAMS]
                    curve = _curve_name(params)
                    point = OctetString.load(public[Attribute.EC_POINT]).native
                    self._public_key = ec.EllipticCurvePublicKey.from_encoded_point(
                        _CURVES[curve], point
                    )
                    self._curve = curve
                return action(session, private, public)
        except InputError:
            raise
        except (pkcs11.PKCS11Error, StopIteration, KeyError) as bad:
            raise InputError(
                f"PKCS#11 key {self.uri.label or self.uri.key_id!r} on token {self.uri.token!r}"
                f" cannot be used ({type(bad).__name__})",
                hint="check the token label, the key label or id, and the PIN",
            ) from bad

    @property
    def description(self) -> str:
        assert self._public_key is not None
        return f"pkcs11 key {public_key_hint(self._public_key)[:16]}"

    def sign_statement(self, statement: bytes) -> SignatureFile:
        from pkcs11 import Mechanism

        digest_holder: list[bytes] = []

        def sign(session: Any, private: Any, public: Any) -> None:
            digest = _HASHES[self._curve](pae(IN_TOTO_PAYLOAD_TYPE, statement)).digest()
            digest_holder.append(private.sign(digest, mechanism=Mechanism.ECDSA))

        self._with_key(sign)
        raw = digest_holder[0]
        half = len(raw) // 2
        der = encode_dss_signature(
            int.from_bytes(raw[:half], "big"), int.from_bytes(raw[half:], "big")
        )
        assert self._public_key is not None
        return SignatureFile(
            payload=statement,
            payload_type=IN_TOTO_PAYLOAD_TYPE,
            signature=der,
            public_key_hint=public_key_hint(self._public_key),
        )


def _curve_name(params: bytes) -> str:
    from asn1crypto.keys import ECDomainParameters

    name = ECDomainParameters.load(params).chosen.native
    if name not in _CURVES:
        raise InputError(f"the token key uses curve {name}", hint="use a P-256 or P-384 key")
    return str(name)

"""A SoftHSM2 token with one EC P-256 key, for signing through PKCS#11 the way an HSM does.

SoftHSM reads ``SOFTHSM2_CONF`` once per process, when the module is first initialised, so the
test process itself never loads the module: the token is initialised with ``softhsm2-util``, the
key is generated with python-pkcs11 in a child process, and signing runs the sealift CLI in a
child process too, each with :attr:`SoftHsmToken.env`. The PIN lives in a file without a
trailing newline, as ``pin-source=file:`` expects; the public key is exported to PEM so that
verification needs no token at all.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization

MODULE = Path("/usr/lib/softhsm/libsofthsm2.so")
SOFTHSM2_UTIL = "softhsm2-util"
TOKEN_LABEL = "sealift-test"
KEY_LABEL = "release-key"
USER_PIN = "735119"
SO_PIN = "918273"

_GENERATE = """
import sys
import pkcs11
from pkcs11 import Attribute, KeyType
from pkcs11.util.ec import encode_ec_public_key, encode_named_curve_parameters

module, token_label, key_label, pin = sys.argv[1:5]
token = pkcs11.lib(module).get_token(token_label=token_label)
with token.open(rw=True, user_pin=pin) as session:
    parameters = session.create_domain_parameters(
        KeyType.EC,
        {Attribute.EC_PARAMS: encode_named_curve_parameters("secp256r1")},
        local=True,
    )
    public, _ = parameters.generate_keypair(store=True, label=key_label)
    sys.stdout.buffer.write(encode_ec_public_key(public))
"""


def unavailable_reason() -> str | None:
    """Why a SoftHSM token cannot be made here, or None when it can."""
    if not MODULE.is_file():
        return f"{MODULE} not installed (apt-get install softhsm2)"
    if shutil.which(SOFTHSM2_UTIL) is None:
        return f"{SOFTHSM2_UTIL} not installed (apt-get install softhsm2)"
    if importlib.util.find_spec("pkcs11") is None:
        return "python-pkcs11 not installed (pip install 'sealift[pkcs11]')"
    return None


@dataclass(frozen=True)
class SoftHsmToken:
    """An initialised token, the files that reach it and the exported public key."""

    folder: Path
    conf: Path
    pin_file: Path
    public_key: Path
    env: dict[str, str] = field(repr=False)

    def uri(self, *, key_label: str = KEY_LABEL, pin: str | None = None) -> str:
        """An RFC 7512 URI for the key: the PIN from the PIN file, or inline (``pin-value``)."""
        query = f"module-path={MODULE}"
        query += f"&pin-value={pin}" if pin is not None else f"&pin-source=file:{self.pin_file}"
        return f"pkcs11:token={TOKEN_LABEL};object={key_label}?{query}"


def make_token(folder: Path) -> SoftHsmToken:
    """Initialise a fresh token under ``folder`` and generate its EC P-256 key."""
    tokens = folder / "tokens"
    tokens.mkdir(parents=True)
    conf = folder / "softhsm2.conf"
    conf.write_text(
        f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n"
    )
    env = {**os.environ, "SOFTHSM2_CONF": str(conf)}
    env.pop("SEALIFT_PKCS11_PIN", None)
    subprocess.run(
        [
            SOFTHSM2_UTIL,
            "--init-token",
            "--free",
            "--label",
            TOKEN_LABEL,
            "--pin",
            USER_PIN,
            "--so-pin",
            SO_PIN,
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    generated = subprocess.run(
        [sys.executable, "-c", _GENERATE, str(MODULE), TOKEN_LABEL, KEY_LABEL, USER_PIN],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    public = serialization.load_der_public_key(generated.stdout)
    public_key = folder / "token.pub"
    public_key.write_bytes(
        public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    pin_file = folder / "pin"
    pin_file.write_text(USER_PIN)  # no trailing newline, as pin-source files are written
    return SoftHsmToken(folder=folder, conf=conf, pin_file=pin_file, public_key=public_key, env=env)

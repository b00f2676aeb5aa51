"""The statement a bundle signature covers: the bundle manifest's digest, nothing else.

Signing the bundle manifest signs every artifact it lists by digest, transitively. The statement
is in-toto v1 like the model signatures, so the same signers and verifiers serve both.
"""

from __future__ import annotations

import json

from sealift.errors import IntegrityError
from sealift.signing.model_manifest import STATEMENT_TYPE

BUNDLE_PREDICATE_TYPE = "https://sealift.dev/bundle-signature/v1"


def bundle_statement(name: str, version: str, manifest_digest: str) -> bytes:
    """The statement over one bundle manifest (``sha256:...`` digest)."""
    document = {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": f"{name}:{version}",
                "digest": {"sha256": manifest_digest.removeprefix("sha256:")},
            }
        ],
        "predicateType": BUNDLE_PREDICATE_TYPE,
        "predicate": {"bundle": {"name": name, "version": version}},
    }
    return json.dumps(document, indent=2, sort_keys=True).encode()


def signed_manifest_digest(payload: bytes, *, source: str) -> str:
    """The bundle manifest digest a signed statement vouches for."""
    try:
        document = json.loads(payload)
        if (
            document["_type"] != STATEMENT_TYPE
            or document["predicateType"] != BUNDLE_PREDICATE_TYPE
        ):
            raise KeyError("predicateType")
        return "sha256:" + str(document["subject"][0]["digest"]["sha256"])
    except (ValueError, KeyError, TypeError, IndexError) as bad:
        raise IntegrityError(
            f"{source} is not a sealift bundle signature", hint="re-sign the bundle"
        ) from bad

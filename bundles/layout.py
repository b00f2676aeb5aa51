"""The on-disk bundle: one OCI image layout plus sealift's own small files, in one place.

```
oci-layout                  {"imageLayoutVersion": "1.0.0"}
index.json                  every top-level artifact, named by org.opencontainers.image.ref.name
blobs/sha256/<hex>          every blob once, however many artifacts share it
sealift-bundle.json         the bundle manifest: the one root that signatures cover
signatures/                 detached signatures of the bundle manifest, added without rehashing
```

A tar bundle holds the same names (the tar may also hold model files under ``models/`` with
``blobs/sha256/<hex>`` as hard links to them, see :mod:`tar_writer`). Split tars add a parts
index beside the parts. This module is the only place these names are spelled.
"""

from __future__ import annotations

import re

OCI_LAYOUT_FILE = "oci-layout"
OCI_LAYOUT_CONTENT = b'{"imageLayoutVersion":"1.0.0"}\n'
INDEX_FILE = "index.json"
BLOBS_DIR = "blobs/sha256"
BUNDLE_MANIFEST_FILE = "sealift-bundle.json"
SIGNATURES_DIR = "signatures"
WORK_DIR = ".sealift-work"
MODEL_DATA_DIR = "models"
# The prefetch image ``bundle create`` builds (sealift on a base with Python): its repository in
# the bundle, tagged with the version of sealift that built it, e.g. sealift/prefetch:0.1.0.
PREFETCH_IMAGE_REPOSITORY = "sealift/prefetch"

PART_SUFFIX_DIGITS = 3
PARTS_INDEX_SUFFIX = ".parts.json"
PARTIAL_SUFFIX = ".partial"
JOURNAL_SUFFIX = ".journal.json"

_BLOB_NAME = re.compile(r"^blobs/sha256/([0-9a-f]{64})$")
_SIGNATURE_NAME = re.compile(
    r"^signatures/(bundle|models/[a-z0-9][a-z0-9.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*)/[a-z0-9][a-z0-9-]*\.sig$"
)
SIGNATURES_SIDECAR_SUFFIX = ".signatures"
_NAMED_DATA = re.compile(r"^(models/[^/]+/[^/]+|files)/.+$")
TOP_LEVEL_FILES = frozenset({OCI_LAYOUT_FILE, INDEX_FILE, BUNDLE_MANIFEST_FILE})


def blob_name(digest: str) -> str:
    """The layout path of a blob, e.g. ``blobs/sha256/ab12...``."""
    return f"{BLOBS_DIR}/{digest.removeprefix('sha256:')}"


def digest_of_blob_name(name: str) -> str | None:
    """The digest a layout path names, or None if it is not a blob path."""
    match = _BLOB_NAME.match(name)
    return f"sha256:{match.group(1)}" if match else None


def is_signature_name(name: str) -> bool:
    """Whether ``name`` is a detached signature file inside the bundle."""
    return bool(_SIGNATURE_NAME.match(name))


def model_signature_name(model: str, version: str, signer: str) -> str:
    """Where a signer's signature over one model's weights is kept."""
    return f"{SIGNATURES_DIR}/models/{model}/{version}/{signer}.sig"


def model_signature_prefix(model: str, version: str) -> str:
    """The folder of every signature over one model."""
    return f"{SIGNATURES_DIR}/models/{model}/{version}/"


def bundle_signature_name(signer: str) -> str:
    """Where a signer's signature over the bundle manifest is kept."""
    return f"{SIGNATURES_DIR}/bundle/{signer}.sig"


BUNDLE_SIGNATURE_PREFIX = f"{SIGNATURES_DIR}/bundle/"


def is_named_data(name: str) -> bool:
    """Whether ``name`` is a model or extra file stored under a readable path in a tar bundle."""
    return bool(_NAMED_DATA.match(name)) and ".." not in name.split("/")


def model_data_name(model: str, version: str, relative_path: str) -> str:
    """Where a tar bundle stores a model file under a name a person can read."""
    return f"{MODEL_DATA_DIR}/{model}/{version}/{relative_path}"


def file_data_name(name: str) -> str:
    """Where a tar bundle stores an extra file under a name a person can read."""
    return f"files/{name}"


def part_name(base: str, number: int) -> str:
    """The file name of part ``number`` of a split tar, e.g. ``bundle.tar.000``."""
    return f"{base}.{number:0{PART_SUFFIX_DIGITS}d}"


def parts_index_name(base: str) -> str:
    """The parts index beside the parts of a split tar."""
    return base + PARTS_INDEX_SUFFIX

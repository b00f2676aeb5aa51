"""The signed model manifest, in the OpenSSF model-signing format (``model_signing`` v1.0).

An in-toto v1 statement whose predicate lists every file of the model with its sha256, and whose
subject digest is the sha256 over those digests' raw bytes, in path order. Built from digests
sealift already knows (a model file's blob digest *is* its sha256), so signing never re-reads
weights. Parsing is strict: shard-mode manifests, other hash types and unsafe names are refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from sealift.errors import IntegrityError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# What model_signing ignores by default; a signature records its ignore list, and a verifier
# accepts unlisted files only under those paths.
DEFAULT_IGNORE_PATHS = (".git", ".gitattributes", ".github", ".gitignore")
_HEX = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class FileDigest:
    """One file of a model: its path inside the model folder and its sha256 (hex)."""

    path: str
    sha256: str


def check_model_path(path: str, *, source: str) -> str:
    """A signed file name must stay inside the model folder."""
    pure = PurePosixPath(path)
    if (
        not path
        or pure.is_absolute()
        or "\\" in path
        or any(part in ("", ".", "..") for part in path.split("/"))
        or "\x00" in path
    ):
        raise IntegrityError(
            f"{source}: signed file name {path!r} escapes the model folder",
            hint="the signature is malicious or broken; do not use these weights",
        )
    return path


def _sort_key(item: FileDigest) -> tuple[str, ...]:
    # model_signing orders resources by path components, so "a/b" sorts before "a.txt".
    return PurePosixPath(item.path).parts


@dataclass(frozen=True)
class ModelManifest:
    """What a model signature covers: every file and its digest, plus the ignore list."""

    name: str
    files: tuple[FileDigest, ...]
    ignore_paths: tuple[str, ...] = DEFAULT_IGNORE_PATHS
    allow_symlinks: bool = False

    @classmethod
    def build(
        cls,
        name: str,
        digests: dict[str, str],
        *,
        ignore_paths: tuple[str, ...] = DEFAULT_IGNORE_PATHS,
    ) -> ModelManifest:
        """A manifest over ``{path: sha256 hex or sha256:digest}``, sorted as model_signing does."""
        files = tuple(
            sorted(
                (
                    FileDigest(check_model_path(path, source=name), digest.removeprefix("sha256:"))
                    for path, digest in digests.items()
                ),
                key=_sort_key,
            )
        )
        return cls(name=name, files=files, ignore_paths=tuple(sorted(set(ignore_paths))))

    @property
    def subject_digest(self) -> str:
        """sha256 over the raw 32-byte digests in order: the statement's subject digest."""
        return hashlib.sha256(b"".join(bytes.fromhex(f.sha256) for f in self.files)).hexdigest()

    def digests(self) -> dict[str, str]:
        """Path to ``sha256:`` digest."""
        return {f.path: f"sha256:{f.sha256}" for f in self.files}

    def statement(self) -> bytes:
        """The in-toto statement bytes that get signed."""
        document = {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": self.name, "digest": {"sha256": self.subject_digest}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "serialization": {
                    "method": "files",
                    "hash_type": "sha256",
                    "allow_symlinks": self.allow_symlinks,
                    "ignore_paths": list(self.ignore_paths),
                },
                "resources": [
                    {"name": f.path, "algorithm": "sha256", "digest": f.sha256} for f in self.files
                ],
            },
        }
        return json.dumps(document, indent=2).encode()

    def is_ignored(self, path: str) -> bool:
        """Whether an unlisted file at ``path`` is covered by the signed ignore list."""
        parts = PurePosixPath(path).parts
        return any(
            parts[: len(PurePosixPath(i).parts)] == PurePosixPath(i).parts
            for i in self.ignore_paths
        )


def _fail(source: str, problem: str) -> IntegrityError:
    return IntegrityError(
        f"{source}: {problem}",
        hint="the signature is not a valid model signature; re-sign the model",
    )


def parse_statement(payload: bytes, *, source: str) -> ModelManifest:
    """Parse a signed statement back into a manifest; anything unexpected is refused."""
    try:
        document: Any = json.loads(payload)
        if document["_type"] != STATEMENT_TYPE:
            raise _fail(source, f"statement type {document['_type']!r} is not in-toto v1")
        if document["predicateType"] != PREDICATE_TYPE:
            raise _fail(
                source, f"predicate type {document['predicateType']!r} is not model_signing v1.0"
            )
        predicate = document["predicate"]
        serialization = predicate["serialization"]
        method = serialization.get("method")
        if method != "files":
            raise _fail(
                source,
                f"serialization method {method!r} is not supported (only 'files':"
                " model_signing 1.1.1 cannot verify its own shard signatures either)",
            )
        if serialization.get("hash_type") != "sha256":
            raise _fail(source, f"hash type {serialization.get('hash_type')!r} is not sha256")
        if serialization.get("allow_symlinks"):
            raise _fail(source, "the signature allows symlinks; sealift refuses linked weights")
        files: list[FileDigest] = []
        seen: set[str] = set()
        for resource in predicate["resources"]:
            path = check_model_path(str(resource["name"]), source=source)
            digest = str(resource["digest"])
            if resource.get("algorithm") != "sha256" or not _HEX.match(digest):
                raise _fail(source, f"{path}: digest is not a sha256 hex digest")
            if path in seen:
                raise _fail(source, f"{path} is listed twice")
            seen.add(path)
            files.append(FileDigest(path, digest))
        ignore_paths = tuple(str(p) for p in serialization.get("ignore_paths") or ())
        for ignored in ignore_paths:
            check_model_path(ignored, source=source)
        manifest = ModelManifest(
            name=str(document["subject"][0]["name"]),
            files=tuple(files),
            ignore_paths=ignore_paths,
        )
        claimed = document["subject"][0]["digest"]["sha256"]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as bad:
        raise _fail(source, f"malformed statement ({type(bad).__name__})") from bad
    if claimed != manifest.subject_digest:
        raise _fail(source, "the subject digest does not match the listed files")
    return manifest

"""Model folders as CNCF ModelPack artifacts: one uncompressed layer per file.

Walking a folder is where path safety lives: a symlink that leaves the folder, a special file, a
name that is not plain UTF-8 or one with ``..`` is refused before any byte is read.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sealift import media_types
from sealift.descriptors import canonical_json
from sealift.errors import InputError
from sealift.hashing import sha256_bytes

if TYPE_CHECKING:
    from sealift.bundles.blob_source import BlobSource
    from sealift.bundles.bundle_manifest import Artifact

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx", ".h5", ".msgpack")
_DOC_SUFFIXES = (".md", ".txt", ".rst", ".pdf")
_CODE_SUFFIXES = (".py",)


@dataclass(frozen=True)
class ModelFile:
    """One file of a model folder: its path in the folder, where to read it, its size."""

    relative_path: str
    path: Path
    size: int

    @property
    def media_type(self) -> str:
        """The ModelPack layer type for this file."""
        lower = self.relative_path.lower()
        name = lower.rsplit("/", 1)[-1]
        if lower.endswith(_WEIGHT_SUFFIXES):
            return media_types.MODEL_WEIGHT_RAW
        if name.startswith(("license", "readme", "notice")) or lower.endswith(_DOC_SUFFIXES):
            return media_types.MODEL_DOC_RAW
        if lower.endswith(_CODE_SUFFIXES):
            return media_types.MODEL_CODE_RAW
        return media_types.MODEL_WEIGHT_CONFIG_RAW


def _excluded(relative: str, patterns: tuple[str, ...]) -> bool:
    for pattern in patterns:
        if fnmatch.fnmatchcase(relative, pattern):
            return True
        if pattern.endswith("/**") and (relative + "/").startswith(pattern[:-2]):
            return True
    return False


def list_model_files(folder: Path, *, exclude: tuple[str, ...] = ()) -> tuple[ModelFile, ...]:
    """The files of a model folder, sorted by path, after the safety checks."""
    if not folder.is_dir():
        raise InputError(
            f"model folder {folder} does not exist", hint="check models[].path in the bundle file"
        )
    root = folder.resolve()
    found: list[ModelFile] = []
    for current, dirnames, filenames in os.walk(folder, followlinks=False):
        for dirname in list(dirnames):
            full = Path(current) / dirname
            relative = full.relative_to(folder).as_posix()
            if _excluded(relative, exclude):
                dirnames.remove(dirname)
            elif full.is_symlink():
                raise InputError(
                    f"model folder {folder}: {relative} is a symlinked folder",
                    hint="copy the folder's real files in; linked folders are not followed",
                )
        dirnames.sort()
        for filename in sorted(filenames):
            full = Path(current) / filename
            relative = full.relative_to(folder).as_posix()
            if _excluded(relative, exclude):
                continue
            if "\\" in relative or any(p in ("", ".", "..") for p in relative.split("/")):
                raise InputError(
                    f"model folder {folder}: unsafe file name {relative!r}",
                    hint="rename the file: names with backslashes or '..' cannot be carried",
                )
            info = full.lstat()
            if stat.S_ISLNK(info.st_mode):
                target = full.resolve()
                if not target.is_relative_to(root):
                    raise InputError(
                        f"model folder {folder}: {relative} is a symlink leaving the folder"
                        f" (to {target})",
                        hint="copy the real file into the folder (e.g. download with --local-dir)",
                    )
                info = target.stat()
                full = target
            if not stat.S_ISREG(info.st_mode):
                raise InputError(
                    f"model folder {folder}: {relative} is not a regular file",
                    hint="a model folder holds only regular files",
                )
            found.append(ModelFile(relative_path=relative, path=full, size=info.st_size))
    if not found:
        raise InputError(f"model folder {folder} has no files", hint="check models[].path")
    return tuple(found)


@dataclass(frozen=True)
class ModelArtifact:
    """The ModelPack config and manifest for a model whose files have been hashed."""

    config: bytes
    manifest: bytes


def build_model_artifact(
    name: str, version: str, files: tuple[ModelFile, ...], digests: dict[str, str]
) -> ModelArtifact:
    """Config and manifest for ``files``; ``digests`` maps relative path to sha256 digest."""
    config = canonical_json(
        {
            "descriptor": {"name": name, "version": version},
            "config": {"format": _format_of(files)},
            "modelfs": {"type": "layers", "diffIds": [digests[f.relative_path] for f in files]},
        }
    )
    layers = [
        {
            "mediaType": f.media_type,
            "digest": digests[f.relative_path],
            "size": f.size,
            "annotations": {media_types.MODEL_FILEPATH_ANNOTATION: f.relative_path},
        }
        for f in files
    ]
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": media_types.OCI_MANIFEST,
            "artifactType": media_types.MODEL_ARTIFACT,
            "config": {
                "mediaType": media_types.MODEL_CONFIG,
                "digest": sha256_bytes(config),
                "size": len(config),
            },
            "layers": layers,
            "annotations": {
                "org.opencontainers.image.title": name,
                "org.opencontainers.image.version": version,
            },
        }
    )
    return ModelArtifact(config=config, manifest=manifest)


def _format_of(files: tuple[ModelFile, ...]) -> str:
    suffixes = {f.relative_path.rsplit(".", 1)[-1].lower() for f in files if "." in f.relative_path}
    for candidate in ("safetensors", "gguf", "onnx", "bin", "pt"):
        if candidate in suffixes:
            return candidate
    return "unknown"


@dataclass(frozen=True)
class ModelLayer:
    """One file of a model artifact as its manifest lists it."""

    path: str
    digest: str
    size: int
    media_type: str


def model_layers(content: bytes, *, where: str) -> tuple[ModelLayer, ...]:
    """The files a ModelPack manifest lists, with safe relative paths, in manifest order.

    Every consumer of a model manifest (signing, install, prefetch) reads it here, so a path
    that would escape the model folder is refused in one place.
    """
    from pathlib import PurePosixPath

    from sealift.descriptors import children_of
    from sealift.errors import IntegrityError

    layers = []
    seen: set[str] = set()
    for layer in children_of(content, media_types.OCI_MANIFEST, where=where).layers:
        path = layer.annotation(media_types.MODEL_FILEPATH_ANNOTATION)
        parts = PurePosixPath(path).parts if path else ()
        if not path or path.startswith("/") or "\\" in path or ".." in parts or path in seen:
            raise IntegrityError(
                f"{where}: file path {path!r} in the model manifest is missing, unsafe or repeated",
                hint="the model manifest is damaged or malicious; do not use it",
            )
        seen.add(path)
        layers.append(ModelLayer(path, layer.digest, layer.size, layer.media_type))
    return tuple(layers)


def read_model_layers(
    source: BlobSource, artifact: Artifact
) -> tuple[bytes, tuple[ModelLayer, ...]]:
    """A model artifact's manifest from a bundle, checked against its digest, and its files."""
    from sealift.bundles import layout
    from sealift.errors import IntegrityError
    from sealift.hashing import sha256_bytes

    content = source.read_small(layout.blob_name(artifact.digest))
    if sha256_bytes(content) != artifact.digest:
        raise IntegrityError(
            f"model {artifact.name} {artifact.version}: its manifest does not match its digest",
            hint="the bundle is damaged; run bundle verify",
        )
    return content, model_layers(content, where=f"model {artifact.name}")

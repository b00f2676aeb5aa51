"""The prefetch image: sealift and its dependencies as one reproducible layer on a base with Python.

``bundle create`` builds it when the bundle file has ``prefetchImage``. pip installs this
version of sealift and its dependencies, offline, from a wheelhouse built for the target
platform and Python (``tools/wheelhouse.sh``) into a staging folder. The folder becomes one layer
under ``/opt/sealift/site-packages`` with a launcher at ``/usr/local/bin/sealift``: entries sorted,
owned by root, one fixed time (``SOURCE_DATE_EPOCH`` or 0), normalised modes, gzip with no name
and no time. The new config is the base image's with the layer's diff_id, ``PYTHONPATH`` and an
entrypoint that needs no shell. The same base, wheels and sealift version give the same digests.

The layer streams through two pipes: tar entries → hashed (the diff_id) → gzip → hashed (the
blob digest) → a temporary file, so both digests come from the one hashing stream while the
bytes are written. The layer is then a blob like any other for the copy into the bundle, and the
base image's layers are the base image's blobs, shared by digest, never stored twice.
"""

from __future__ import annotations

import copy
import csv
import gzip
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from sealift import __version__, media_types
from sealift.bundles.bundle_file import ImageSpec, PrefetchImageSpec
from sealift.bundles.image_sources import MAX_DOCUMENT_BYTES, BlobTask, ResolvedImage
from sealift.descriptors import (
    Descriptor,
    canonical_json,
    children_of,
    load_json,
    media_type_of,
)
from sealift.errors import InputError, IntegrityError, ResourceError
from sealift.hashing import CopyResult, Sink, copy_stream, sha256_bytes
from sealift.progress import Progress

#: Where sealift and its dependencies live in the image (no leading slash: a layer member).
SITE_PACKAGES = "opt/sealift/site-packages"
#: A launcher for people in a shell (kubectl exec); the entrypoint itself needs no shell.
LAUNCHER = "usr/local/bin/sealift"
_RUN_SEALIFT = "from sealift.cli import main; main(prog_name='sealift')"
# -P: nothing from the working directory shadows a module; -s: nor from a user site folder.
ENTRYPOINT = ("python3", "-P", "-s", "-c", _RUN_SEALIFT)
LAUNCHER_SCRIPT = (
    "#!/bin/sh\n"
    "# sealift, installed in /opt/sealift/site-packages by sealift bundle create\n"
    f'exec python3 -P -s -c "{_RUN_SEALIFT}" "$@"\n'
).encode()
GZIP_LEVEL = 6
_SMALL_FILE = 1 << 20
TITLE = "sealift-prefetch"

# manylinux wheel architectures by OCI architecture; x86 wheels also come in the older
# manylinux1 (glibc 2.5) and manylinux2010 (2.12) flavours, other architectures start at 2.17.
_MANYLINUX_MACHINES = {
    "amd64": "x86_64",
    "386": "i686",
    "arm64": "aarch64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}
_OLDEST_GLIBC = {"x86_64": 5, "i686": 5}
_LEGACY_TAGS = (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5))
_TO_OCI_LAYER = {
    media_types.DOCKER_LAYER: media_types.OCI_LAYER,
    media_types.DOCKER_LAYER_GZIP: media_types.OCI_LAYER_GZIP,
}
_NO_DISTRIBUTION = re.compile(r"No matching distribution found for (.+)")


def pip_platform_tags(platform: str, glibc: str) -> tuple[str, ...]:
    """The wheel platform tags a Linux ``platform`` with ``glibc`` (e.g. "2.28") can run.

    pip does not widen ``--platform manylinux_2_28_x86_64`` to the older tags itself, so every
    one is listed, newest first. ``tools/wheelhouse.sh`` downloads with the same list.
    """
    os_name, _, rest = platform.partition("/")
    machine = _MANYLINUX_MACHINES.get(rest.split("/")[0])
    if os_name != "linux" or machine is None:
        known = ", ".join(f"linux/{arch}" for arch in _MANYLINUX_MACHINES)
        raise InputError(
            f"platform {platform} has no manylinux wheels sealift can install",
            hint=f"the prefetch image can be built for {known}",
        )
    newest = int(glibc.split(".")[1])
    oldest = _OLDEST_GLIBC.get(machine, 17)
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(newest, oldest - 1, -1)]
    tags += [f"{name}_{machine}" for name, minor in _LEGACY_TAGS if oldest <= minor <= newest]
    return tuple(tags)


def source_date_epoch() -> int:
    """The one time stamped into the image: ``SOURCE_DATE_EPOCH`` (reproducible builds) or 0."""
    text = os.environ.get("SOURCE_DATE_EPOCH", "0")
    if not text.isdigit():
        raise InputError(
            f"SOURCE_DATE_EPOCH={text!r} is not a number of seconds",
            hint="set it to a Unix time, e.g. $(git log -1 --format=%ct), or unset it",
        )
    return int(text)


# --------------------------------------------------------------------------- the base image


def _same_platform(config: dict[str, Any], platform: str) -> bool:
    os_name, _, rest = platform.partition("/")
    arch, _, variant = rest.partition("/")
    if config.get("os") != os_name or config.get("architecture") != arch:
        return False
    have = str(config.get("variant") or "")
    # arm64 images often leave out the only variant there is (v8).
    return not (variant and have and variant != have)


def _platform_of(config: dict[str, Any]) -> str:
    text = f"{config.get('os', '?')}/{config.get('architecture', '?')}"
    return text + (f"/{config['variant']}" if config.get("variant") else "")


def _base_manifest(base: ResolvedImage, platform: str, where: str) -> tuple[Descriptor, bytes]:
    """The base image's manifest for ``platform`` (one of an index's, or the only one)."""
    digests = list(base.layers_by_manifest)
    if len(digests) > 1:
        index = children_of(base.documents[base.root.digest], base.root.media_type, where=where)
        wanted = [d for d in index.manifests if d.digest in digests and d.platform]
        chosen = [d for d in wanted if _same_platform(_platform_dict(d.platform), platform)]
        if not chosen:
            available = ", ".join(sorted(d.platform for d in wanted)) or "none"
            raise InputError(
                f"{where}: the base image {base.spec.name} has no manifest for {platform}",
                hint=f"its platforms: {available}; set prefetchImage.platform to one of them",
            )
        digests = [chosen[0].digest]
    content = base.documents[digests[0]]
    media_type = media_type_of(content, media_types.OCI_MANIFEST, where=where)
    return Descriptor(media_type, digests[0], len(content)), content


def _platform_dict(platform: str) -> dict[str, str]:
    os_name, _, rest = platform.partition("/")
    arch, _, variant = rest.partition("/")
    return {"os": os_name, "architecture": arch, "variant": variant}


def _read_config(base: ResolvedImage, config: Descriptor, where: str) -> bytes:
    """The base image's config, read through the hashing stream and checked."""
    if config.size > MAX_DOCUMENT_BYTES:
        raise IntegrityError(f"{where}: the config of {base.spec.name} is too large")
    task = next((t for t in base.blobs if t.digest == config.digest), None)
    if task is None:
        raise IntegrityError(f"{where}: the config of {base.spec.name} is not among its blobs")
    buffer = io.BytesIO()
    source = task.open()
    try:
        copy_stream(
            source,
            (buffer,),
            expected_digest=config.digest,
            expected_size=config.size,
            what=f"config of {base.spec.name}",
        )
    finally:
        source.close()
    return buffer.getvalue()


def _check_base(config: dict[str, Any], spec: PrefetchImageSpec, name: str, where: str) -> None:
    if not _same_platform(config, spec.platform):
        raise InputError(
            f"{where}.base: {name} is an image for {_platform_of(config)},"
            f" the prefetch image is built for {spec.platform}",
            hint="name a base image for that platform, or set prefetchImage.platform",
        )
    env = (config.get("config") or {}).get("Env") or []
    # Official Python images say which Python they hold; a mismatch would install the wrong ABI.
    declared = next((e.split("=", 1)[1] for e in env if e.startswith("PYTHON_VERSION=")), "")
    if declared and ".".join(declared.split(".")[:2]) != spec.python:
        raise InputError(
            f"{where}.python: {spec.python}, but the base image {name} has Python {declared}",
            hint="set prefetchImage.python to the base image's major.minor version",
        )


# --------------------------------------------------------------------------- pip, offline


def _check_wheelhouse(spec: PrefetchImageSpec, where: str) -> None:
    rebuild = f"tools/wheelhouse.sh {spec.platform} {spec.python}"
    if not spec.wheels.is_dir():
        raise InputError(
            f"{where}.wheels: the wheelhouse {spec.wheels} is not a folder",
            hint=f"build it with {rebuild} and point prefetchImage.wheels at it",
        )
    if not any(spec.wheels.glob(f"sealift-{__version__}-*.whl")):
        raise InputError(
            f"{where}.wheels: {spec.wheels} has no wheel of sealift {__version__}",
            hint=f"build the wheelhouse from this sealift release: {rebuild}",
        )


def _pip_install(spec: PrefetchImageSpec, stage: Path, where: str) -> None:
    requirement = "sealift"
    if spec.extras:
        requirement += "[" + ",".join(spec.extras) + "]"
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        # No pip.conf, no PIP_* variables: only this wheelhouse, nothing from an index.
        "--isolated",
        "--no-input",
        "--disable-pip-version-check",
        "--no-cache-dir",
        "--progress-bar=off",
        "--no-index",
        "--find-links",
        str(spec.wheels),
        "--target",
        str(stage),
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        spec.python,
        *(f"--platform={tag}" for tag in pip_platform_tags(spec.platform, spec.glibc)),
        # Byte code is for the image's Python to write, not the build machine's.
        "--no-compile",
        "--no-warn-script-location",
        f"{requirement}=={__version__}",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as bad:
        raise ResourceError(
            f"cannot run pip to build the prefetch image: {bad}",
            hint=f"install pip for {sys.executable} (python -m ensurepip)",
        ) from bad
    if result.returncode == 0:
        return
    output = result.stderr + result.stdout
    if "No module named pip" in output:
        raise ResourceError(
            "building the prefetch image needs pip, which sealift's Python does not have",
            hint=f"install it: {sys.executable} -m ensurepip",
        )
    missing = _NO_DISTRIBUTION.search(output)
    rebuild = f"tools/wheelhouse.sh {spec.platform} {spec.python}"
    if spec.extras:
        rebuild = f"WHEELHOUSE_EXTRAS={','.join(spec.extras)} {rebuild}"
    if missing:
        wanted = missing.group(1).split(";")[0].strip()
        raise InputError(
            f"{where}.wheels: {spec.wheels} has no wheel of {wanted} for {spec.platform}"
            f" and Python {spec.python} (manylinux glibc <= {spec.glibc})",
            hint=f"build the wheelhouse for that platform and Python: {rebuild}",
        )
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    last = errors[-1] if errors else (output.strip().splitlines() or ["no output"])[-1]
    raise InputError(
        f"{where}: pip cannot install sealift {__version__} from {spec.wheels}"
        f" for {spec.platform} and Python {spec.python}: {last}",
        hint=f"rebuild the wheelhouse: {rebuild}",
    )


def _drop_scripts(stage: Path) -> None:
    """Remove the console scripts pip wrote, and their lines in each RECORD.

    Their first line names the build machine's Python (a path that differs between machines
    and would change the layer's digest); the launcher replaces them. RECORD then lists
    exactly what the layer holds.
    """
    shutil.rmtree(stage / "bin", ignore_errors=True)
    for record in sorted(stage.glob("*.dist-info/RECORD")):
        # Lines as pip wrote them (CRLF): only whole lines are dropped.
        with record.open(encoding="utf-8", newline="") as handle:
            lines = handle.readlines()
        kept = [
            line
            for line in lines
            if not os.path.normpath((next(csv.reader([line]), None) or ["."])[0]).startswith("..")
        ]
        if len(kept) != len(lines):
            record.write_text("".join(kept), encoding="utf-8", newline="")


# --------------------------------------------------------------------------- the layer


@dataclass(frozen=True)
class _Entry:
    """One member of the layer; ``header`` is its exact tar header (PAX where needed)."""

    header: bytes
    size: int
    path: Path | None = None  # a staged file
    content: bytes = b""  # or bytes written as they are (the launcher)


def _header(name: str, kind: bytes, size: int, mode: int, mtime: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    try:
        # ustar holds names up to 255 bytes (prefix + name): one block, no PAX record.
        return info.tobuf(format=tarfile.USTAR_FORMAT, encoding="utf-8", errors="strict")
    except ValueError:
        # A PAX record only for what ustar cannot hold; never atime or ctime.
        return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def _entries(stage: Path, mtime: int) -> list[_Entry]:
    """Every member of the layer, sorted: parents first, then the staged tree and launcher."""
    # name -> (type, mode, size, staged file or None, content)
    members: dict[str, tuple[bytes, int, int, Path | None, bytes]] = {}

    def folder(name: str) -> None:
        members[name] = (tarfile.DIRTYPE, 0o755, 0, None, b"")

    def refuse(path: Path) -> ResourceError:
        return ResourceError(
            f"pip left {path}, which is not a plain file or folder, in the staging folder",
            hint="a wheel in the wheelhouse is unusual; rebuild it with tools/wheelhouse.sh",
        )

    parts = SITE_PACKAGES.split("/")
    for end in range(1, len(parts) + 1):
        folder("/".join(parts[:end]))
    for end in range(1, LAUNCHER.count("/") + 1):
        folder("/".join(LAUNCHER.split("/")[:end]))
    members[LAUNCHER] = (tarfile.REGTYPE, 0o755, len(LAUNCHER_SCRIPT), None, LAUNCHER_SCRIPT)
    for root, dirs, files in os.walk(stage):
        dirs.sort()
        relative = Path(root).relative_to(stage).as_posix()
        prefix = SITE_PACKAGES if relative == "." else f"{SITE_PACKAGES}/{relative}"
        for name in dirs:
            path = Path(root) / name
            if path.is_symlink():
                raise refuse(path)
            folder(f"{prefix}/{name}")
        for name in files:
            path = Path(root) / name
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode):
                raise refuse(path)
            mode = 0o755 if info.st_mode & 0o111 else 0o644
            members[f"{prefix}/{name}"] = (tarfile.REGTYPE, mode, info.st_size, path, b"")
    return [
        _Entry(_header(name, kind, size, mode, mtime), size, path, content)
        for name, (kind, mode, size, path, content) in sorted(members.items())
    ]


def _tar_size(entries: Sequence[_Entry]) -> int:
    blocks = sum(len(e.header) + e.size + (-e.size % tarfile.BLOCKSIZE) for e in entries)
    return blocks + 2 * tarfile.BLOCKSIZE


def _write_tar(entries: Sequence[_Entry], out: BinaryIO) -> None:
    for entry in entries:
        out.write(entry.header)
        if entry.path is not None and entry.size > _SMALL_FILE:
            with entry.path.open("rb") as source:
                # The header promised this size: a file that changed since is an error.
                copy_stream(
                    source, (out,), expected_size=entry.size, what=f"staged file {entry.path}"
                )
        elif entry.path is not None:
            # Most files are small: one read each (the whole tar is hashed as it streams).
            with entry.path.open("rb") as source:
                data = source.read(entry.size + 1)
            if len(data) != entry.size:
                raise IntegrityError(
                    f"staged file {entry.path} changed while the layer was written",
                    hint="run bundle create again",
                )
            out.write(data)
        else:
            out.write(entry.content)
        out.write(bytes(-entry.size % tarfile.BLOCKSIZE))
    out.write(bytes(2 * tarfile.BLOCKSIZE))


def _through_pipe(
    produce: Callable[[BinaryIO], object],
    sinks: Sequence[Sink],
    *,
    what: str,
    on_bytes: Callable[[int], None] | None = None,
) -> CopyResult:
    """Run ``produce`` in a thread writing into a pipe; copy (and hash) what it writes to
    ``sinks``. A failure on either side ends both: a closed read end breaks the writer."""
    read_fd, write_fd = os.pipe()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with open(write_fd, "wb") as out:
                produce(out)
        except BaseException as bad:  # re-raised in the calling thread
            failures.append(bad)

    worker = threading.Thread(target=run, name="prefetch-layer", daemon=True)
    worker.start()
    try:
        with open(read_fd, "rb") as source:
            result = copy_stream(source, sinks, what=what, on_bytes=on_bytes)
    finally:
        worker.join()
    if failures:
        raise failures[0]
    return result


@dataclass(frozen=True)
class BuiltLayer:
    """The layer as written: its blob digest and size, and the digest of the tar inside."""

    path: Path
    digest: str
    size: int
    diff_id: str
    tar_size: int


def write_layer(stage: Path, target: Path, progress: Progress, *, mtime: int) -> BuiltLayer:
    """Write the staged tree (and the launcher) as one reproducible gzip layer at ``target``."""
    entries = _entries(stage, mtime)
    tar: list[CopyResult] = []
    with progress.task("prefetch image layer", _tar_size(entries)) as bar:

        def compress(out: BinaryIO) -> None:
            # No file name and time 0 in the gzip header: the same tar gives the same blob.
            with gzip.GzipFile(
                filename="", mode="wb", compresslevel=GZIP_LEVEL, fileobj=out, mtime=0
            ) as packed:
                tar.append(
                    _through_pipe(
                        lambda raw: _write_tar(entries, raw),
                        (packed,),
                        what="prefetch image layer",
                        on_bytes=bar.update,
                    )
                )

        with target.open("wb") as handle:
            blob = _through_pipe(compress, (handle,), what="compressed prefetch image layer")
    return BuiltLayer(target, blob.digest, blob.size, tar[0].digest, tar[0].size)


# --------------------------------------------------------------------------- config, manifest


def _timestamp(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_config(
    base_config: dict[str, Any], layer: BuiltLayer, spec: PrefetchImageSpec, *, epoch: int
) -> bytes:
    """The base image's config with the sealift layer on top, its environment and entrypoint."""
    config = copy.deepcopy(base_config)
    created = _timestamp(epoch)
    config["created"] = created
    rootfs = config.get("rootfs") or {"type": "layers"}
    rootfs["diff_ids"] = [*(rootfs.get("diff_ids") or []), layer.diff_id]
    config["rootfs"] = rootfs
    if isinstance(config.get("history"), list):
        # Without a history in the base, one entry would not match the base's layers.
        config["history"].append(
            {
                "created": created,
                "created_by": f"sealift bundle create: sealift {__version__} and its"
                f" dependencies for {spec.platform}, Python {spec.python}",
            }
        )
    runtime = config.get("config") or {}
    env = [e for e in runtime.get("Env") or [] if not e.startswith("PYTHONPATH=")]
    earlier = next((e[11:] for e in runtime.get("Env") or [] if e.startswith("PYTHONPATH=")), "")
    site = "/" + SITE_PACKAGES
    env.append(f"PYTHONPATH={site}:{earlier}" if earlier else f"PYTHONPATH={site}")
    runtime["Env"] = env
    runtime["Entrypoint"] = list(ENTRYPOINT)
    # An entrypoint of its own drops the base's command (as docker build does).
    runtime["Cmd"] = ["--help"]
    labels = dict(runtime.get("Labels") or {})
    labels.update(
        {
            "org.opencontainers.image.title": TITLE,
            "org.opencontainers.image.version": __version__,
            "org.opencontainers.image.description": f"sealift {__version__} (prefetch agent)"
            f" for {spec.platform}, Python {spec.python}",
        }
    )
    runtime["Labels"] = labels
    config["config"] = runtime
    return canonical_json(config)


def image_manifest(
    config: bytes,
    base_layers: Sequence[Descriptor],
    layer: BuiltLayer,
    *,
    base_name: str,
    base_digest: str,
) -> bytes:
    """An OCI manifest: the base's layers (as OCI media types, same bytes) and the new one."""
    layers = [
        Descriptor(_TO_OCI_LAYER.get(d.media_type, d.media_type), d.digest, d.size)
        for d in base_layers
    ]
    layers.append(Descriptor(media_types.OCI_LAYER_GZIP, layer.digest, layer.size))
    config_descriptor = Descriptor(media_types.OCI_CONFIG, sha256_bytes(config), len(config))
    return canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": media_types.OCI_MANIFEST,
            "config": config_descriptor.to_dict(),
            "layers": [d.to_dict() for d in layers],
            "annotations": {
                "org.opencontainers.image.base.digest": base_digest,
                "org.opencontainers.image.base.name": base_name,
                "org.opencontainers.image.title": TITLE,
                "org.opencontainers.image.version": __version__,
            },
        }
    )


# --------------------------------------------------------------------------- the whole image


def build_prefetch_image(
    spec: PrefetchImageSpec,
    base: ResolvedImage,
    *,
    bundle_file: Path,
    work: Path,
    progress: Progress,
) -> ResolvedImage:
    """Build the prefetch image on ``base`` in ``work`` (a temporary folder the caller removes
    after the copy); the result is an image like any resolved one, ready to copy."""
    where = f"{bundle_file}: prefetchImage"
    epoch = source_date_epoch()
    try:
        pip_platform_tags(spec.platform, spec.glibc)
    except InputError as bad:
        raise InputError(f"{where}.platform: {bad.message}", hint=bad.hint) from bad
    manifest, manifest_bytes = _base_manifest(base, spec.platform, where)
    children = children_of(manifest_bytes, manifest.media_type, where=f"image {base.spec.name}")
    assert children.config is not None  # resolve_image refuses manifests without one
    config_bytes = _read_config(base, children.config, where)
    base_config = load_json(config_bytes, where=f"config of {base.spec.name}")
    _check_base(base_config, spec, base.spec.name, where)
    _check_wheelhouse(spec, where)

    stage = work / "stage"
    progress.note(
        f"building {spec.name}: sealift {__version__} from {spec.wheels}"
        f" for {spec.platform}, Python {spec.python}, on {base.spec.name}"
    )
    _pip_install(spec, stage, where)
    _drop_scripts(stage)
    if not (stage / "sealift" / "__init__.py").is_file():
        raise IntegrityError(
            f"{where}: pip did not install the sealift package from {spec.wheels}",
            hint="rebuild the wheelhouse with tools/wheelhouse.sh",
        )
    layer = write_layer(stage, work / "layer.tar.gz", progress, mtime=epoch)
    shutil.rmtree(stage)

    config = image_config(base_config, layer, spec, epoch=epoch)
    image = image_manifest(
        config, children.layers, layer, base_name=base.spec.name, base_digest=manifest.digest
    )
    root = Descriptor(media_types.OCI_MANIFEST, sha256_bytes(image), len(image), spec.platform)
    base_tasks = {t.digest: t for t in base.blobs}
    blobs = [base_tasks[d.digest] for d in children.layers]
    blobs.append(
        BlobTask(
            what=f"sealift layer of {spec.name}",
            digest=layer.digest,
            size=layer.size,
            media_type=media_types.OCI_LAYER_GZIP,
            open=lambda: layer.path.open("rb"),
            scan=True,
        )
    )
    return ResolvedImage(
        spec=ImageSpec(name=spec.name, kind="built", platforms=(spec.platform,)),
        root=root,
        documents={root.digest: image, sha256_bytes(config): config},
        blobs=tuple(blobs),
        platforms=(spec.platform,),
        layers_by_manifest={root.digest: (*(d.digest for d in children.layers), layer.digest)},
        source=f"built on {base.spec.name}@{manifest.digest} with sealift {__version__}"
        f" for {spec.platform}, Python {spec.python}",
    )


__all__ = [
    "ENTRYPOINT",
    "LAUNCHER",
    "SITE_PACKAGES",
    "BuiltLayer",
    "build_prefetch_image",
    "image_config",
    "image_manifest",
    "pip_platform_tags",
    "write_layer",
]

"""Helm charts as OCI artifacts, with Helm's media types, plus the images a chart will run.

A chart arrives as a ``.tgz`` or a folder. A folder is packaged deterministically (sorted entries,
zero timestamps) so the same chart gives the same digest. Archive entries are checked: nothing
absolute, no ``..``, no links, and exactly one top folder holding ``Chart.yaml``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from sealift import media_types
from sealift.descriptors import Descriptor, canonical_json, children_of, load_json
from sealift.errors import InputError
from sealift.hashing import sha256_bytes
from sealift.image_reference import ImageReference
from sealift.registry_client import RegistryClient

MAX_CHART_BYTES = 64 * 1024 * 1024
MAX_MEMBER_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ChartPackage:
    """A packaged chart ready to store: its .tgz bytes, Helm config and the images it names."""

    name: str
    version: str
    app_version: str
    archive: bytes
    config: bytes
    images: tuple[str, ...]
    # A chart pulled from a registry keeps the manifest it had there, so its digest is pinned.
    source_manifest: bytes | None = None

    @property
    def ref(self) -> str:
        """The name inside the bundle; Helm turns '+' into '_' in OCI tags."""
        return f"charts/{self.name}:{self.version.replace('+', '_')}"

    def manifest(self) -> bytes:
        """The source registry's manifest, or the one Helm itself would push for this chart."""
        if self.source_manifest is not None:
            return self.source_manifest
        return canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": media_types.OCI_MANIFEST,
                "config": {
                    "mediaType": media_types.HELM_CONFIG,
                    "digest": sha256_bytes(self.config),
                    "size": len(self.config),
                },
                "layers": [
                    {
                        "mediaType": media_types.HELM_CHART,
                        "digest": sha256_bytes(self.archive),
                        "size": len(self.archive),
                    }
                ],
                "annotations": {
                    "org.opencontainers.image.title": self.name,
                    "org.opencontainers.image.version": self.version,
                },
            }
        )


def _package_folder(folder: Path) -> bytes:
    if not (folder / "Chart.yaml").is_file():
        raise InputError(f"chart folder {folder} has no Chart.yaml", hint="point at a Helm chart")
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=9) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        files: list[Path] = []
        for root, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            for filename in sorted(filenames):
                files.append(Path(root) / filename)
        for path in sorted(files):
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink():
                raise InputError(
                    f"chart folder {folder}: {relative} is a symlink",
                    hint="replace links with the files they point to",
                )
            info = tarfile.TarInfo(f"{folder.name}/{relative}")
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _read_members(archive_bytes: bytes, source: Path) -> dict[str, bytes]:
    """Chart.yaml and values.yaml of the top chart, after checking every entry name."""
    wanted: dict[str, bytes] = {}
    top: str | None = None
    try:
        with tarfile.open(fileobj=io.BytesIO(archive_bytes), mode="r:gz") as archive:
            for member in archive:
                path = PurePosixPath(member.name)
                if member.name.startswith("/") or ".." in path.parts:
                    raise InputError(
                        f"chart {source}: entry {member.name!r} escapes the chart folder",
                        hint="the archive is malicious or broken; do not use it",
                    )
                if member.issym() or member.islnk() or not (member.isreg() or member.isdir()):
                    raise InputError(
                        f"chart {source}: entry {member.name!r} is a link or special file",
                        hint="charts hold only regular files",
                    )
                parts = [p for p in path.parts if p != "."]
                if not parts:
                    continue
                if top is None:
                    top = parts[0]
                elif parts[0] != top:
                    raise InputError(
                        f"chart {source} has more than one top folder ({top}, {parts[0]})",
                        hint="package one chart per .tgz (helm package)",
                    )
                # A vendored subchart's Chart.yaml: its appVersion is its images' default tag.
                subchart = len(parts) == 4 and parts[1] == "charts" and parts[3] == "Chart.yaml"
                if subchart and member.isreg() and member.size <= MAX_MEMBER_BYTES:
                    extracted = archive.extractfile(member)
                    assert extracted is not None
                    wanted[f"charts/{parts[2]}/Chart.yaml"] = extracted.read()
                if len(parts) == 2 and parts[1] in ("Chart.yaml", "values.yaml") and member.isreg():
                    if member.size > MAX_MEMBER_BYTES:
                        raise InputError(f"chart {source}: {member.name} is too large")
                    extracted = archive.extractfile(member)
                    assert extracted is not None
                    wanted[parts[1]] = extracted.read()
    except (tarfile.TarError, OSError, EOFError) as bad:
        raise InputError(
            f"chart {source} is not a readable .tgz ({bad})", hint="repackage it with helm package"
        ) from bad
    if "Chart.yaml" not in wanted:
        raise InputError(
            f"chart {source} has no Chart.yaml", hint="a chart archive holds NAME/Chart.yaml"
        )
    return wanted


def _image_strings(values: Any) -> list[str]:
    """Images named by chart values: {repository, image, version|tag} or "repo:tag" strings."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            repository = node.get("repository")
            image = node.get("image")
            tag = node.get("version") or node.get("tag")
            if isinstance(repository, str) and isinstance(image, str):
                reference = f"{repository.rstrip('/')}/{image}"
                found.append(
                    f"{reference}:{tag}" if isinstance(tag, str | int | float) else reference
                )
            elif isinstance(repository, str) and repository and isinstance(tag, str | int | float):
                found.append(f"{repository}:{tag}")
            for key, value in node.items():
                if key == "image" and isinstance(value, str) and ":" in value and "/" in value:
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(values)
    return sorted(set(found))


def load_chart(path: Path) -> ChartPackage:
    """Package or read a chart and describe it; every problem is an InputError naming ``path``."""
    if path.is_dir():
        archive = _package_folder(path)
    elif path.is_file():
        if path.stat().st_size > MAX_CHART_BYTES:
            raise InputError(f"chart {path} is larger than {MAX_CHART_BYTES} bytes")
        archive = path.read_bytes()
    else:
        raise InputError(
            f"chart {path} does not exist", hint="check charts[].path in the bundle file"
        )
    return describe_chart(archive, path)


def pull_chart(client: RegistryClient, reference: ImageReference) -> ChartPackage:
    """Fetch a chart that ``helm push`` stored in a registry; its digests are verified."""
    where = f"chart oci://{reference}"
    manifest = client.get_manifest(reference.repository, reference.reference)
    document = load_json(manifest.content, where=where)
    children = children_of(manifest.content, media_types.OCI_MANIFEST, where=where)
    charts = [layer for layer in children.layers if layer.media_type == media_types.HELM_CHART]
    if (
        children.config is None
        or children.config.media_type != media_types.HELM_CONFIG
        or len(charts) != 1
    ):
        raise InputError(
            f"{where} is not a Helm chart (config {document.get('config', {}).get('mediaType')})",
            hint="give the reference helm push printed, oci://host/repo/name:version",
        )

    def fetch(descriptor: Descriptor) -> bytes:
        if descriptor.size > MAX_CHART_BYTES:
            raise InputError(f"{where}: blob {descriptor.digest} is larger than a chart can be")
        return client.read_blob(
            reference.repository,
            descriptor.digest,
            descriptor.size,
            what=f"{where} blob {descriptor.digest}",
        )

    package = describe_chart(fetch(charts[0]), Path(where))
    return replace(package, config=fetch(children.config), source_manifest=manifest.content)


def chart_values(archive: bytes, source: Path) -> dict[str, Any]:
    """The default values.yaml of a packaged chart (its subcharts' values are nested in it)."""
    members = _read_members(archive, source)
    try:
        values = yaml.safe_load(members.get("values.yaml", b"")) or {}
    except yaml.YAMLError as bad:
        raise InputError(
            f"chart {source}: values.yaml is not valid YAML", hint="fix the chart"
        ) from bad
    if not isinstance(values, dict):
        raise InputError(f"chart {source}: values.yaml is not a mapping", hint="fix the chart")
    return values


def chart_app_versions(archive: bytes, source: Path) -> dict[str, str]:
    """appVersion of the chart ("") and of each vendored subchart (by name).

    Charts leave image tags out of their values and default them to appVersion in templates;
    whoever rewrites image values needs that default to name the exact image.
    """
    versions: dict[str, str] = {}
    for name, content in _read_members(archive, source).items():
        if not name.endswith("Chart.yaml"):
            continue
        try:
            meta = yaml.safe_load(content) or {}
        except yaml.YAMLError as bad:
            raise InputError(
                f"chart {source}: {name} is not valid YAML", hint="fix the chart"
            ) from bad
        if isinstance(meta, dict) and meta.get("appVersion") is not None:
            key = "" if name == "Chart.yaml" else name.split("/")[1]
            versions[key] = str(meta["appVersion"])
    return versions


def describe_chart(archive: bytes, source: Path) -> ChartPackage:
    """Describe a packaged chart: metadata, Helm config and the images its values name."""
    path = source
    members = _read_members(archive, path)
    parsed: dict[str, Any] = {}
    for name in ("Chart.yaml", "values.yaml"):
        try:
            parsed[name] = yaml.safe_load(members.get(name, b"")) or {}
        except yaml.YAMLError as bad:
            mark = getattr(bad, "problem_mark", None)
            line = f" line {mark.line + 1}" if mark is not None else ""
            raise InputError(
                f"chart {path}: {name}{line} is not valid YAML",
                hint=f"fix {name} and package the chart again",
            ) from bad
    chart, values = parsed["Chart.yaml"], parsed["values.yaml"]
    if not isinstance(chart, dict) or not chart.get("name") or not chart.get("version"):
        raise InputError(
            f"chart {path}: Chart.yaml lacks name or version", hint="see helm.sh/docs/topics/charts"
        )
    # Helm's OCI config is the chart metadata as JSON.
    config = json.dumps(chart, sort_keys=True, separators=(",", ":"), default=str).encode()
    return ChartPackage(
        name=str(chart["name"]),
        version=str(chart["version"]),
        app_version=str(chart.get("appVersion", "")),
        archive=archive,
        config=config,
        images=tuple(_image_strings(values)),
    )

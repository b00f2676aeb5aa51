"""The NVIDIA GPU Operator from the chart in the bundle, with every image pointing at the mirror.

The chart's own default values say which images it runs ({repository, image, version} for the
operator and each component, {repository, tag} for the node-feature-discovery subchart). Each one
is matched to an image of the bundle and rewritten to the mirror; an enabled component whose
image the bundle lacks is refused here, before anything is rendered. The chart is then rendered
by ``helm template`` (Helm is the chart's own renderer; sealift applies the objects itself so it
can check every image and apply server-side with its field manager).

The chart composes ``repository/image:version`` in its templates, so chart images are named by
tag; install checks that each mirror tag still resolves to the digest the bundle verified.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sealift.bundles.bundle_manifest import Artifact
from sealift.errors import InputError, ResourceError
from sealift.installer.mirror import MirrorTarget
from sealift.installer.site_file import GPU_TAINT_KEY, Site

HELM_ENV = "SEALIFT_HELM"


@dataclass(frozen=True)
class ChartImage:
    """One image named by chart values: where, in which shape, and what it names."""

    path: tuple[str, ...]
    shape: str  # "triplet" ({repository, image, version}) or "repo-tag" ({repository, tag})
    repository: str
    tag: str


@dataclass(frozen=True)
class MirroredImage:
    """A chart image and the bundle image it was matched to."""

    chart: ChartImage
    artifact: Artifact
    mirror_repository: str
    tag: str


def chart_images(values: Any, path: tuple[str, ...] = ()) -> Iterator[ChartImage]:
    """Every image the values name, skipping components that are switched off."""
    if not isinstance(values, dict):
        return
    if values.get("enabled") is False:
        return
    repository, image = values.get("repository"), values.get("image")
    version = values.get("version", values.get("tag"))
    if isinstance(repository, str) and isinstance(image, str) and version is not None:
        yield ChartImage(path, "triplet", f"{repository.rstrip('/')}/{image}", str(version))
    elif isinstance(repository, str) and "tag" in values and "image" not in values:
        yield ChartImage(path, "repo-tag", repository, str(values["tag"]))
    # Components nest others (driver.manager inside driver): keep walking.
    for key, value in values.items():
        yield from chart_images(value, (*path, str(key)))


def _matches(repository: str, artifact: Artifact) -> bool:
    # The bundle drops the source registry's host, and a vendor may have added a prefix of its
    # own (registry/prefix/nvidia/x): match the path after the host as a suffix.
    first, _, rest = repository.partition("/")
    path = rest if rest and ("." in first or ":" in first or first == "localhost") else repository
    bundle_repository = artifact.ref.rpartition(":")[0]
    return bundle_repository == path or bundle_repository.endswith("/" + path)


def match_images(
    values: dict[str, Any], images: tuple[Artifact, ...], mirror: MirrorTarget, *, chart: str
) -> list[MirroredImage]:
    """Match each enabled chart image to a bundle image of the same repository and tag."""
    matched: list[MirroredImage] = []
    for wanted in chart_images(values):
        candidates = [
            artifact
            for artifact in images
            if _matches(wanted.repository, artifact)
            and artifact.ref.rpartition(":")[2] == wanted.tag
        ]
        if not candidates:
            where = ".".join(wanted.path) or "(top level)"
            raise InputError(
                f"chart {chart} values {where} runs {wanted.repository}:{wanted.tag},"
                " which the bundle does not carry",
                hint="add the image to the bundle file's images, or switch the component off",
            )
        # The longest matching name is the most specific one.
        best = max(candidates, key=lambda a: len(a.ref))
        repository = best.ref.rpartition(":")[0]
        matched.append(
            MirroredImage(
                chart=wanted,
                artifact=best,
                mirror_repository=f"{mirror.registry}/{mirror.repository(repository)}",
                tag=wanted.tag,
            )
        )
    return matched


def _set(tree: dict[str, Any], path: tuple[str, ...], value: dict[str, Any]) -> None:
    node = tree
    for key in path:
        node = node.setdefault(key, {})
    node.update(value)


def operator_values(
    values: dict[str, Any],
    site: Site,
    images: tuple[Artifact, ...],
    mirror: MirrorTarget,
    *,
    chart: str,
) -> tuple[dict[str, Any], list[MirroredImage]]:
    """The values install passes to the chart: mirror images, driver strategy, MIG, taints."""
    overrides: dict[str, Any] = {}
    driver: dict[str, Any] = {"enabled": site.driver_strategy != "host"}
    if site.driver_strategy == "precompiled":
        driver["usePrecompiled"] = True
    if site.driver_strategy == "packageRepository":
        driver["repoConfig"] = {"configMapName": site.driver_repository_config_map}
    overrides["driver"] = driver
    overrides["mig"] = {"strategy": site.mig_strategy if site.mig_strategy != "none" else "single"}
    overrides["migManager"] = {"enabled": site.mig_strategy != "none"}
    tolerations = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    for pool in site.pools:
        if pool.taint is not None and pool.taint.key != GPU_TAINT_KEY:
            tolerations.append(
                {"key": pool.taint.key, "operator": "Exists", "effect": pool.taint.effect}
            )
    overrides["daemonsets"] = {"tolerations": tolerations}
    # Images of components switched off by the overrides are not needed from the bundle.
    effective = _merge(values, overrides)
    matched = match_images(effective, images, mirror, chart=chart)
    for image in matched:
        if image.chart.shape == "triplet":
            repository, _, name = image.mirror_repository.rpartition("/")
            _set(
                overrides,
                image.chart.path,
                {"repository": repository, "image": name, "version": image.tag},
            )
        else:
            _set(
                overrides,
                image.chart.path,
                {"repository": image.mirror_repository, "tag": image.tag},
            )
    return overrides, matched


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def find_helm(explicit: Path | None = None) -> Path:
    """``--helm``, else $SEALIFT_HELM, else ``helm`` on PATH."""
    if explicit is not None:
        candidate: str | None = str(explicit)
    else:
        candidate = os.environ.get(HELM_ENV) or shutil.which("helm")
    if not candidate or not os.access(candidate, os.X_OK):
        raise ResourceError(
            f"helm was not found{f' at {candidate}' if candidate else ''}",
            hint=f"helm v3 renders the GPU Operator chart: install it, or set --helm/${HELM_ENV}",
        )
    return Path(candidate)


def helm_template(
    helm: Path,
    chart_archive: Path,
    *,
    release: str,
    namespace: str,
    values: dict[str, Any],
    kube_version: str | None = None,
) -> list[dict[str, Any]]:
    """Render the chart with ``helm template`` (CRDs included); return the objects."""
    with tempfile.TemporaryDirectory(prefix="sealift-helm-") as work:
        values_file = Path(work) / "values.yaml"
        values_file.write_text(yaml.safe_dump(values, sort_keys=True))
        command = [
            str(helm),
            "template",
            release,
            str(chart_archive),
            "--namespace",
            namespace,
            "--include-crds",
            "--values",
            str(values_file),
        ]
        if kube_version:
            command += ["--kube-version", kube_version]
        # Helm keeps caches and config in HOME; point them at the scratch folder so a render
        # never reads a user's repositories or reaches a network.
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": work,
            "HELM_CACHE_HOME": f"{work}/cache",
            "HELM_CONFIG_HOME": f"{work}/config",
            "HELM_DATA_HOME": f"{work}/data",
        }
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        detail = " ".join(done.stderr.strip().splitlines()[-1:]) or f"exit {done.returncode}"
        raise InputError(
            f"helm template of chart {chart_archive.name} failed: {detail}",
            hint="check the chart in the bundle and the site file's gpuOperator settings",
        )
    objects = [doc for doc in yaml.safe_load_all(done.stdout) if isinstance(doc, dict) and doc]
    return objects
